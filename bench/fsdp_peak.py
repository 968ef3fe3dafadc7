"""Per-rank whole-step peak under real FSDP2 on CPU (gloo, 2 processes) vs hfmem's fsdp_full_shard estimate.

    python bench/fsdp_peak.py

A tiny Llama (tests/tiny_models.py), each decoder layer and then the root wrapped by
torch.distributed.fsdp.fully_shard on a CPU device mesh, trains two steps (full or PEFT LoRA r=8 on q_proj,
v_proj; pure bf16; AdamW, fused, as hfmem's adamw is; with "accum", two micro-batches a step, the first
under set_requires_gradient_sync(False) as accelerate's no_sync does for FSDP2); every rank's second-step peak of
live tensors comes from LiveBytes (tests/live_peak.py: sharded parameters, states and gradients by their local
shards, FSDP2's unsharded parameters followed through their storage resizes). Not a test: two processes per case.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from live_peak import LiveBytes  # noqa: E402
from ranks import leave, spawn  # noqa: E402
from rank_report import print_case  # noqa: E402
from saved_activations import build_model  # noqa: E402
from step_peak import LORA_TARGETS, cpu_prediction, lora_model  # noqa: E402
from tiny_models import tiny_config  # noqa: E402

from hfmem.memory.settings import TrainingSettings  # noqa: E402

MODEL = "meta-llama/Meta-Llama-3-8B"
WORLD = 2
CASES = [("full", 2, 128, False, False), ("full", 2, 128, True, False), ("lora", 2, 128, False, False),
         ("lora", 4, 128, False, False), ("lora", 2, 128, True, False), ("full", 2, 128, False, True),
         ("lora", 2, 128, False, True)]
"""(method, micro-batch, sequence, checkpointing, two micro-batches a step with the first under no_sync)."""
TERMS = ("weights", "gradients", "optimizer", "sharding_buffers", "activations", "gradient_activation_overlap",
         "allocated_peak")


def _rank(rank: int, port: int, case: tuple[str, int, int, bool, bool], out: str) -> None:
    """One rank: wrap, train two steps under LiveBytes, write its peak and what was alive then."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    method, b, s, checkpointing, accumulate = case
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    mesh = init_device_mesh("cpu", (WORLD,))
    model = lora_model(MODEL, 2, "sdpa", 0.0) if method == "lora" else build_model(tiny_config(MODEL, 2), "sdpa")
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if method == "lora":
            model.enable_input_require_grads()
    for layer in model.get_decoder().layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, fused=True)  # hfmem's adamw: no step temporaries
    ids = torch.randint(0, model.config.vocab_size, (b, s), generator=torch.Generator().manual_seed(rank))
    live = LiveBytes()
    with live:
        live.adopt(list(model.parameters()) + list(model.buffers()), "weights (shard)")
        for step in range(2):
            if step == 1:
                live.reset_peak()
            for micro in range(2 if accumulate else 1):
                model.set_requires_gradient_sync(micro == 1 or not accumulate)
                with live.phase("forward"):
                    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
                with live.phase("backward"):
                    loss.backward()
                del loss
            with live.phase("step"):
                optimizer.step()
            live.mark([p.grad for p in trainable], "gradients (shard)")
            live.mark([optimizer.state[p] for p in trainable], "optimizer states (shard)")
            optimizer.zero_grad(set_to_none=True)
    Path(f"{out}.{rank}").write_text(json.dumps({"peak": live.peak, "when": live.peak_op,
                                                 "breakdown": list(live.breakdown().items())}))
    leave()



def measure(case: tuple[str, int, int, bool, bool]) -> list[dict[str, Any]]:
    """Every rank's peak for the case."""
    return spawn(_rank, WORLD, case)


def predicted(case: tuple[str, int, int, bool, bool]) -> dict[str, int]:
    """hfmem's per-GPU terms for the case (FSDP full shard over WORLD GPUs)."""
    method, b, s, checkpointing, accumulate = case
    lora = {"lora_rank": 8, "lora_targets": LORA_TARGETS} if method == "lora" else {}
    settings = TrainingSettings(method=method, dtype="bf16-pure", optimizer="adamw", micro_batch_size=b, seq_len=s,
                                attention="sdpa", gradient_checkpointing="full" if checkpointing else "off",
                                sharding="fsdp_full_shard", num_gpus=WORLD,
                                gradient_accumulation_steps=2 if accumulate else 1, **lora)
    return cpu_prediction(tiny_config(MODEL, 2), settings).to_dict()


def main() -> None:
    for case in CASES:
        method, b, s, checkpointing, accumulate = case
        title = (f"FSDP2 x{WORLD} {method} b={b} s={s}{' ckpt' if checkpointing else ''}"
                 f"{' accum 2, no_sync' if accumulate else ''}")
        print_case(title, predicted(case), TERMS,
                   measure(case), top=10)


if __name__ == "__main__":
    main()
