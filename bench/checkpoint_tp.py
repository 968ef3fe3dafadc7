"""Per-op and full checkpointing under tensor parallelism (2 ranks, gloo, CPU) against hfmem's rank figure.

    python bench/checkpoint_tp.py

The tiny Llama of bench/checkpoint_granularity.py (2 layers, b=2, s=128, bf16, SDPA) under torchtitan's TP plan with
sequence parallelism (tests/layout_ranks.py's _tp_plan), each layer under torch's non-reentrant checkpoint, with
torchtitan's per-op policy for the op rows. Measured per rank: the local bytes kept from the forward to the backward
(saved_tensors_hooks outside checkpointed layers, each checkpoint's inputs, the policy's cache), parameters aside.
Under per-op checkpointing each rank also keeps the row-parallel down projection's whole-sequence partial sum and
the two reduce-scatters' outputs (torchtitan's list saves _c10d_functional.reduce_scatter_tensor), which hfmem
counts (recompute.op_row_parallel_per_token); the op rows then miss by exactly the bytes the full rows miss.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts  # noqa: E402

from checkpoint_granularity import B, MODEL, S, torchtitan_policy  # noqa: E402
from hfmem.memory.activations import ActivationSettings, estimate_activations  # noqa: E402
from hfmem.memory.parallel import Layout, rank_activations  # noqa: E402
from hfmem.model.architecture import read_architecture  # noqa: E402
from hfmem.model.meta import build_inventory  # noqa: E402
from layout_ranks import _tp_plan  # noqa: E402
from ranks import leave, spawn  # noqa: E402
from saved_activations import build_model  # noqa: E402
from tiny_models import tiny_config  # noqa: E402

LAYERS, TP = 2, 2


def local(t: Any) -> Any:
    """The plain tensor under a DTensor (its local shard) or a functional collective's AsyncCollectiveTensor."""
    while type(t) is not torch.Tensor and isinstance(t, torch.Tensor):
        inner = getattr(t, "_local_tensor", None)
        inner = getattr(t, "elem", None) if inner is None else inner
        if inner is None:
            raise TypeError(f"unknown tensor subclass {type(t).__name__}")
        t = inner
    return t


def _rank(rank: int, port: int, gc: str, out: str) -> None:
    """One rank: parallelise, checkpoint every layer, run forward and the parallel loss, write the kept bytes."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss_parallel

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=TP)
    torch.set_num_threads(1)
    model = build_model(tiny_config(MODEL, LAYERS), "sdpa")
    _tp_plan(model, init_device_mesh("cpu", (TP,)), sequence_parallel=True)
    params = {local(p).untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}
    caches: list[dict] = []

    def count(t: Any) -> None:
        if isinstance(t, torch.Tensor):
            storage = local(t).untyped_storage()
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
        return checkpoint(function, *args, use_reentrant=False, **({"context_fn": context} if gc == "op" else {}))

    for layer in model.model.layers:
        layer.gradient_checkpointing = True
        layer._gradient_checkpointing_func = wrapped
    ids = torch.randint(0, model.config.vocab_size, (B, S), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(S).unsqueeze(0)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: (count(t), t)[1], lambda t: t):
        logits = model(input_ids=ids, position_ids=positions, use_cache=False).logits
        with loss_parallel():
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), ids.roll(-1, 1).flatten())
    for cache in caches:
        for calls in cache.values():
            for entry in calls.values():
                for wrapper in entry if isinstance(entry, (tuple, list)) else (entry,):
                    count(getattr(wrapper, "val", None))
    with loss_parallel():
        loss.backward()
    Path(f"{out}.{rank}").write_text(json.dumps({"rank": rank, "kept": sum(seen.values())}))
    leave()


def predicted(gc: str) -> int:
    """hfmem's rank-0 saved bytes for the same step (TP 2, torch's DTensor sequence parallelism)."""
    config = tiny_config(MODEL, LAYERS)
    arch = read_architecture(config)
    act = estimate_activations(arch, build_inventory(config), ActivationSettings(
        micro_batch_size=B, seq_len=S, attention="sdpa", gradient_checkpointing=gc, dropout_mask_bytes=None))
    return rank_activations(act, arch, Layout(tp=TP, sequence_parallel="dtensor"), 0).saved


def main() -> None:
    print(f"tiny {MODEL} ({LAYERS} layers, b={B}, s={S}, bf16, SDPA, TP {TP} + SP, gloo): bytes kept for backward")
    print(f"{'checkpointing':14} {'rank':>4} {'predicted':>11} {'measured':>11} {'error':>8}")
    for gc in ("full", "op"):
        for result in spawn(_rank, TP, gc):
            pred = predicted(gc)
            print(f"{gc:14} {result['rank']:>4} {pred:11,} {result['kept']:11,} {pred / result['kept'] - 1:+8.2%}")


if __name__ == "__main__":
    main()
