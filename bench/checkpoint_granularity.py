"""Layer- and op-level checkpointing measured on a tiny real Llama against hfmem's saved bytes.

    python bench/checkpoint_granularity.py

Needs torch and transformers. Each decoder layer chosen for checkpointing runs under torch's non-reentrant
torch.utils.checkpoint (what torchtitan's ptd_checkpoint_wrapper runs), selected as torchtitan selects them
(torchtitan/distributed/activation_checkpoint.py:27-49 at 238fa99: the layers whose 1-based count is a multiple of
selective_ac_option) or as Megatron-LM's block and uniform methods do (megatron/core/recompute.py:157-181 at
d98e8a6). Op-level rows run torchtitan's policy (L98-124 there) over its `_op_sac_save_list`
(torchtitan/models/llama3/infra/parallelize.py:36-52), with CPU's flash SDPA kernel
(aten._scaled_dot_product_flash_attention_for_cpu) standing in for the CUDA one on the list. Measured: the
unique non-parameter storages kept from the forward to the backward (b=2, s=128, bf16, SDPA, CPU): what
saved_tensors_hooks see outside checkpointed regions, the inputs each checkpoint keeps for its recompute, and the
op outputs the selective-checkpoint cache keeps. CPU RNG states the checkpoints stash are host memory and are not
counted. The 1,024 bytes measured beyond hfmem in every checkpointed row are position_ids ((1, s) int64), a keyword
argument each checkpoint keeps, which hfmem counts under eager attention only.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import torch  # noqa: E402
from torch.utils.checkpoint import (  # noqa: E402
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
    set_checkpoint_early_stop,
)

from flop_counts import (  # noqa: E402
    SEQ as FLOP_SEQ,
    build,
    counted,
    tiny as flop_model,
)
from hfmem.compute.flops import forward_flops, training_flops  # noqa: E402
from hfmem.memory.activations import ActivationSettings, estimate_activations, layer_modules  # noqa: E402
from hfmem.memory.activations.recompute import coverage, recomputed_share  # noqa: E402
from hfmem.model.architecture import read_architecture  # noqa: E402
from hfmem.model.meta import build_inventory  # noqa: E402
from saved_activations import build_model  # noqa: E402
from tiny_models import tiny_config  # noqa: E402

MODEL, LAYERS, B, S = "meta-llama/Meta-Llama-3-8B", 4, 2, 128
OPS = torch.ops.aten
SAVE_LIST = {OPS.mm.default, OPS._scaled_dot_product_efficient_attention.default,
             OPS._scaled_dot_product_flash_attention.default, OPS._scaled_dot_product_cudnn_attention.default,
             OPS._scaled_dot_product_attention_math.default, OPS.max.default,
             torch.ops._c10d_functional.reduce_scatter_tensor.default,
             OPS._scaled_dot_product_flash_attention_for_cpu.default}
"""torchtitan's _op_sac_save_list as it resolves on CPU without flex attention and the compiled-code and varlen
ops (none runs in a transformers Llama forward), plus CPU's flash SDPA kernel."""


def torchtitan_policy() -> Any:
    """torchtitan's _custom_policy: save the listed ops' outputs, except every second aten.mm (counted apart in
    forward and recompute)."""
    meta = {"forward": 0, "recompute": 0}

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == OPS.mm.default:
            meta[mode] += 1
        to_save = func in SAVE_LIST and not (func == OPS.mm.default and meta[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def grouped(model: Any, group: int, checkpointed: Any) -> None:
    """Megatron's uniform method over `group` layers: the first layer of each group runs the whole group inside one
    checkpoint (keeping only the group's input), the others pass their input through."""
    layers = list(model.model.layers)
    for layer in layers:
        layer.gradient_checkpointing = False

    class Group(torch.nn.Module):
        def __init__(self, members: list[Any]) -> None:
            super().__init__()
            self.members = torch.nn.ModuleList(members)

        def forward(self, hidden: Any, **kwargs: Any) -> Any:
            def run(h: Any, **kw: Any) -> Any:
                for member in self.members:
                    h = member(h, **kw)
                return h

            return checkpointed(partial(run, **kwargs), hidden) if self.members else hidden

    model.model.layers = torch.nn.ModuleList(
        Group(layers[i:i + group] if i % group == 0 else []) for i in range(len(layers)))


def measured(model: Any, checkpointed: set[int], op_level: bool, group: int = 1) -> int:
    """Unique non-parameter bytes kept from forward to backward with `checkpointed` layers (0-based) wrapped, or
    with every `group` layers in one checkpoint."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}
    caches: list[dict] = []

    def count(t: Any) -> None:
        if isinstance(t, torch.Tensor):
            storage = t.untyped_storage()
            if storage.data_ptr() not in params:
                seen.setdefault(storage.data_ptr(), storage.nbytes())

    def context() -> Any:
        forward, recompute = create_selective_checkpoint_contexts(torchtitan_policy())
        caches.append(forward.storage)
        return forward, recompute

    def wrapped(function: Any, *args: Any) -> Any:
        for value in (*args, *getattr(function, "keywords", {}).values()):
            for t in value if isinstance(value, (tuple, list)) else (value,):
                count(t)
        extra = {"context_fn": context} if op_level else {}
        return checkpoint(function, *args, use_reentrant=False, **extra)

    for i, layer in enumerate(model.model.layers):
        layer.gradient_checkpointing = i in checkpointed
        layer._gradient_checkpointing_func = wrapped
    if group > 1:
        grouped(model, group, wrapped)
    ids = torch.randint(0, model.config.vocab_size, (B, S), generator=torch.Generator().manual_seed(0))
    with torch.autograd.graph.saved_tensors_hooks(lambda t: (count(t), t)[1], lambda t: t):
        out = model(input_ids=ids, labels=ids, use_cache=False)
    for cache in caches:  # {op key: {call index: output tree of _VersionWrapper, or the recompute marker}}
        for calls in cache.values():
            for entry in calls.values():
                for wrapper in entry if isinstance(entry, (tuple, list)) else (entry,):
                    count(getattr(wrapper, "val", None))
    out.loss.backward()  # the recompute runs: the policy and the checkpoints are exercised end to end
    return sum(seen.values())


def predicted(gc: str, method: str, n: int, layers: int = LAYERS) -> int:
    """hfmem's saved bytes for the same step (CPU dropout masks in the masked tensor's dtype, as measured)."""
    config = tiny_config(MODEL, layers)
    return estimate_activations(read_architecture(config), build_inventory(config), ActivationSettings(
        micro_batch_size=B, seq_len=S, attention="sdpa", gradient_checkpointing=gc, checkpoint_method=method,
        checkpoint_layers=n, dropout_mask_bytes=None)).saved


def layers_of(method: str, n: int, layers: int = LAYERS) -> set[int]:
    """The 0-based layers each method checkpoints on one stage of `layers` layers (uniform: all of them)."""
    if method == "every":
        return {i for i in range(layers) if (i + 1) % n == 0}
    if method == "block":
        return set(range(min(n, layers)))
    return set(range(layers))


ROWS = (("op", "uniform", 1), ("off", "uniform", 1), ("full", "uniform", 1), ("full", "uniform", 2),
        ("full", "uniform", 3), ("full", "every", 2), ("full", "every", 3), ("full", "block", 1), ("full", "block", 3))


def rows() -> list[tuple[str, int, int]]:
    """(label, predicted, measured) per checkpointing setup."""
    out = []
    for gc, method, n in ROWS:
        model = build_model(tiny_config(MODEL, LAYERS), "sdpa")
        chosen = layers_of(method, n) if gc != "off" else set()
        if gc == "full":
            assert len(chosen) == coverage(method, n, LAYERS).covered or method == "uniform"
        label = gc if gc in ("off", "op") else f"full {method} {n}"
        group = n if gc == "full" and method == "uniform" else 1
        out.append((label, predicted(gc, method, n), measured(model, chosen, op_level=gc == "op", group=group)))
    return out


def step_flops(gc: str, method: str, n: int) -> tuple[float, float]:
    """(hfmem, FlopCounterMode) matmul FLOPs per token of a training step of flop_counts' tiny Llama (2 layers, fp32,
    eager attention: the CPU flash kernel has no FLOP formula), the checkpointed layers run as torchtitan runs them
    (early_stop False: every recomputed op runs)."""
    config, arch, inventory = flop_model(MODEL)
    model = build(config)
    layers = len(model.model.layers)
    chosen = layers_of(method, n, layers) if gc == "full" else set(range(layers))

    def wrapped(function: Any, *args: Any) -> Any:
        extra = {"context_fn": lambda: create_selective_checkpoint_contexts(torchtitan_policy())} if gc == "op" else {}
        return checkpoint(function, *args, use_reentrant=False, **extra)

    for i, layer in enumerate(model.model.layers):
        layer.gradient_checkpointing = i in chosen
        layer._gradient_checkpointing_func = wrapped
    with set_checkpoint_early_stop(False):
        measured_flops = counted(model, backward=True)
    forward = forward_flops(arch, inventory, FLOP_SEQ)
    share = recomputed_share(arch, layer_modules(arch, inventory), mode=gc, method=method, n=n, kernel="eager",
                             in_layers=forward.in_layers, attention=forward.attention)
    return training_flops(arch, forward, checkpointing=gc, recomputed=share).hardware, measured_flops


def main() -> None:
    print(f"tiny {MODEL} ({LAYERS} layers, b={B}, s={S}, bf16, SDPA, CPU): bytes kept for backward")
    print(f"{'checkpointing':18} {'predicted':>11} {'measured':>11} {'error':>8}")
    for label, pred, meas in rows():
        print(f"{label:18} {pred:11,} {meas:11,} {pred / meas - 1:+8.2%}")
    print(f"\ntiny {MODEL} (2 layers, fp32, eager, CPU): matmul FLOPs per token of a step, FlopCounterMode")
    print(f"{'checkpointing':18} {'predicted':>11} {'measured':>11} {'error':>8}")
    for gc, method, n in (("op", "uniform", 1), ("full", "uniform", 1), ("full", "every", 2), ("full", "block", 1)):
        pred, meas = step_flops(gc, method, n)
        label = gc if gc == "op" else f"full {method} {n}"
        print(f"{label:18} {pred:11,.0f} {meas:11,.0f} {pred / meas - 1:+8.2%}")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
