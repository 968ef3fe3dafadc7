"""Real FSDP1 on CPU (gloo, 2 processes): the gradient bytes each rank holds after backward, for LoRA-like layers
wrapped with the adapters in their frozen base's unit (use_orig_params=True) or in units of their own; with
`no_sync`, after an accumulating micro-batch's backward inside FSDP's no_sync() (as accelerate, HF Trainer and
LitGPT accumulate), else after a synchronised one.

    python tests/fsdp_ranks.py OUT.json mixed|apart [no_sync]

Each layer is a frozen 64x64 weight plus trainable rank-8 A and B matrices (fp32), as PEFT builds a LoRA Linear.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from ranks import leave, spawn

HIDDEN, RANK, LAYERS, WORLD = 64, 8, 3, 2


class LoraLinear(torch.nn.Module):
    """A frozen base weight and trainable A, B: y = W x + B A x."""

    def __init__(self) -> None:
        super().__init__()
        self.base = torch.nn.Linear(HIDDEN, HIDDEN, bias=False).requires_grad_(False)
        self.lora_A = torch.nn.Linear(HIDDEN, RANK, bias=False)
        self.lora_B = torch.nn.Linear(RANK, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.lora_B(self.lora_A(x))


def _rank(rank: int, port: int, layout: str, no_sync: bool, out: str) -> None:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(LoraLinear() for _ in range(LAYERS)))
    cpu = torch.device("cpu")
    for i, layer in enumerate(model):
        if layout == "apart":  # PEFT's fsdp_auto_wrap_policy: the adapters are units of their own
            layer.lora_A = FSDP(layer.lora_A, use_orig_params=True, device_id=cpu)
            layer.lora_B = FSDP(layer.lora_B, use_orig_params=True, device_id=cpu)
        model[i] = FSDP(layer, use_orig_params=True, device_id=cpu)
    wrapped = FSDP(model, use_orig_params=True, device_id=cpu)
    with wrapped.no_sync() if no_sync else contextlib.nullcontext():
        wrapped(torch.randn(4, HIDDEN)).sum().backward()
    grads = sum(h.flat_param.grad.nbytes for h in _handles(wrapped) if h.flat_param.grad is not None)
    totals = [torch.tensor([grads]) for _ in range(WORLD)]
    dist.all_gather(totals, torch.tensor([grads]))
    frozen = LAYERS * HIDDEN * HIDDEN
    trainable = LAYERS * 2 * HIDDEN * RANK
    with open(f"{out}.{rank}", "w") as f:
        json.dump({"gradient_bytes": [int(t) for t in totals], "frozen": frozen, "trainable": trainable,
                   "layer_parameters": frozen // LAYERS + trainable // LAYERS}, f)
    leave()


def _handles(module: torch.nn.Module) -> list:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    return [m._handle for m in FSDP.fsdp_modules(module) if m._handle is not None]


def measure(layout: str, no_sync: bool) -> dict[str, Any]:
    """Every rank's gradient bytes and the model's sizes; the ranks fork from this process once it has imported
    FSDP (each rank imported it again, with DTensor and sympy: most of a rank's CPU time)."""
    from torch.distributed.fsdp import FullyShardedDataParallel  # noqa: F401

    return spawn(_rank, WORLD, layout, no_sync, start_method="fork")[0]


def main() -> None:
    out, layout = sys.argv[1], sys.argv[2]
    Path(out).write_text(json.dumps(measure(layout, sys.argv[3:] == ["no_sync"])))


if __name__ == "__main__":
    main()
