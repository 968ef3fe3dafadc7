"""Real checkpoint saves of a sharded model on CPU (gloo, 2 processes): what rank 0's host holds, and each rank's
peak of live tensors while the state dicts are built.

A tiny Llama (tests/tiny_models.py), full or with PEFT LoRA (r=8 on q_proj, v_proj), is sharded with FSDP2
(`fully_shard` per decoder layer, then the root) or FSDP1 (one unit per decoder layer, use_orig_params=True, as
accelerate wraps it), takes one AdamW step (so the optimizer states exist) and saves a full state dict as HF Trainer
and accelerate do by default: FSDP1 under FULL_STATE_DICT with rank0_only, FSDP2 through
torch.distributed.checkpoint.state_dict with full_state_dict and cpu_offload (rank 0 alone receives it). FSDP1's
offload_to_cpu stays off: on a CPU-only process the copy is on the host already, and that path crashes there
(SIGSEGV, torch 2.13). The model's
state dict is built and dropped, then the optimizer's, as `save_model` and `_save_optimizer_and_scheduler` run one
after the other.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from live_peak import LiveBytes
from ranks import leave, spawn
from saved_activations import build_model
from step_peak import lora_model
from tiny_models import tiny_config

MODEL = "meta-llama/Meta-Llama-3-8B"
WORLD, LAYERS, B, S = 2, 2, 2, 32
CASES = [("fsdp2", "full", "fp32"), ("fsdp2", "lora", "fp32"), ("fsdp2", "full", "bf16"), ("fsdp1", "full", "fp32"),
         ("fsdp1", "lora", "fp32")]
"""(FSDP version, method, the dtype the sharded parameters are kept in: fp32, as under mixed precision, or bf16)."""


def case_name(case: tuple[str, str, str]) -> str:
    """e.g. "fsdp2-full-fp32"."""
    return "-".join(case)


def _model(method: str, dtype: torch.dtype) -> Any:
    """The tiny Llama, full or with PEFT LoRA adapters (its base frozen), all in `dtype`."""
    if method == "lora":
        return lora_model(MODEL, LAYERS, "sdpa", 0.0).to(dtype)
    return build_model(tiny_config(MODEL, LAYERS), "sdpa", dtype)


def _nbytes(tree: Any) -> int:
    """Bytes of every tensor in a nested state dict (a DTensor counts its local shard)."""
    if isinstance(tree, torch.Tensor):
        local = getattr(tree, "to_local", None)
        return (local() if local else tree).nbytes
    if isinstance(tree, dict):
        return sum(_nbytes(v) for v in tree.values())
    if isinstance(tree, list | tuple):
        return sum(_nbytes(v) for v in tree)
    return 0


def _layers(model: Any) -> list[Any]:
    """The decoder layers of the tiny Llama, with or without PEFT's wrapper."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return list(inner.model.layers)


def _shard(model: Any, version: str) -> Any:
    """The model sharded over the process group, one unit per decoder layer and the root."""
    if version == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for layer in _layers(model):
            fully_shard(layer)
        fully_shard(model)
        return model
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    kind = type(_layers(model)[0])
    return FSDP(model, auto_wrap_policy=ModuleWrapPolicy({kind}), use_orig_params=True,
                device_id=torch.device("cpu"))


def _state_dicts(model: Any, optimizer: torch.optim.Optimizer, version: str) -> tuple[Any, Any]:
    """Callables building the full model and optimizer state dicts the way the trainers save them."""
    if version == "fsdp2":
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                             get_optimizer_state_dict)

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return (lambda: get_model_state_dict(model, options=options),
                lambda: get_optimizer_state_dict(model, optimizer, options=options))
    from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    def model_sd() -> Any:
        with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT,
                                  FullStateDictConfig(offload_to_cpu=False, rank0_only=True),
                                  FullOptimStateDictConfig(offload_to_cpu=False, rank0_only=True)):
            return model.state_dict()

    def optim_sd() -> Any:
        with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT,
                                  FullStateDictConfig(offload_to_cpu=False, rank0_only=True),
                                  FullOptimStateDictConfig(offload_to_cpu=False, rank0_only=True)):
            return FSDP.optim_state_dict(model, optimizer)

    return model_sd, optim_sd


def _rank(rank: int, port: int, case: tuple[str, str, str], out: str) -> None:
    """One rank: shard, take one step, then build and drop each full state dict under LiveBytes; write the bytes
    each returned and the peak of live tensors over the resident state while it was built."""
    version, method, dtype = case
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    model = _shard(_model(method, getattr(torch, {"fp32": "float32", "bf16": "bfloat16"}[dtype])), version)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    ids = torch.randint(0, 128, (B, S), generator=torch.Generator().manual_seed(rank))
    model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    result: dict[str, Any] = {}
    for name, build in zip(("model", "optimizer"), _state_dicts(model, optimizer, version), strict=True):
        live = LiveBytes()
        with live:
            live.adopt(list(model.parameters()) + list(model.buffers()), "resident")
            for state in optimizer.state.values():
                live.adopt([t for t in state.values() if isinstance(t, torch.Tensor)], "resident")
            resident = live.current
            live.reset_peak()
            state_dict = build()
            result[name] = {"bytes": _nbytes(state_dict), "peak_over_resident": live.peak - resident}
        del state_dict
    Path(f"{out}.{rank}").write_text(json.dumps(result))
    leave()


def measure(case: tuple[str, str, str]) -> list[dict[str, Any]]:
    """Every rank's state dict bytes and peaks for the case; the ranks fork from this process once it has imported
    the modules they use (transformers', PEFT's, FSDP's and the state-dict helpers; each rank imported them again)."""
    import torch.distributed.checkpoint.state_dict  # noqa: F401
    import torch.distributed.fsdp  # noqa: F401

    _model(case[1], torch.float32)
    return spawn(_rank, WORLD, case, start_method="fork")


if __name__ == "__main__":
    for c in CASES:
        print(case_name(c), measure(c))
