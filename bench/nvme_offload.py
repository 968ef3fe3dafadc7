"""ZeRO-Infinity on NVMe under real DeepSpeed (CPU accelerator, gloo, 1 or 2 ranks) vs hfmem: the bytes each rank
swaps to its NVMe files and the pinned host buffers of its optimizer and parameter swappers.

    python bench/nvme_offload.py          # 1 rank and 2 ranks

A Llama of two 1,024-wide layers (tests/tiny_models.py's shape, widened so every matrix passes DeepSpeed's 1 MiB
swap threshold) trains two steps with offload_optimizer and offload_param on device "nvme" into a temporary folder,
bf16 on, torch's AdamW (zero_force_ds_cpu_optimizer off: no cpu_adam build). Measured: the size of every swap file
after the second step, and the swappers' pinned buffers (SwapBufferManager, the parameter swapper's `buffers`).
Needs deepspeed with its async_io op (libaio-dev; DeepSpeed builds the op on first use, minutes).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402

from hfmem.memory.estimate import Context, state_for  # noqa: E402
from hfmem.memory.settings import TrainingSettings  # noqa: E402
from ranks import deepspeed_rank, leave, spawn  # noqa: E402
from saved_activations import build_model  # noqa: E402
from step_peak import _model  # noqa: E402
from tiny_models import tiny_config  # noqa: E402

MODEL = "meta-llama/Meta-Llama-3-8B"
WIDE = {"hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 8, "num_key_value_heads": 2,
        "head_dim": 128}
"""Every decoder matrix at least 1 MiB in bf16 (DeepSpeed swaps a tensor of at least aio block_size bytes)."""
B, S = 1, 64
SUB_GROUP, MAX_IN_CPU = 4_000_000, 0
"""Small enough that the sub-groups and the parameters on NVMe are the general case, not the whole model."""
PARAM_BUFFERS, PARAM_BUFFER_SIZE = 8, 4_000_000
"""Enough parameter buffers for a decoder layer's fetch (DeepSpeed's 5 assert "Not enough buffers" here), each
above the largest matrix; the default 1e8 elements would pin 200 MB apiece."""


def _config() -> dict[str, Any]:
    """tiny_config's Llama at WIDE width, two layers."""
    return tiny_config(MODEL, 2, **WIDE)


def _ds_config(folder: str) -> dict[str, Any]:
    """ZeRO-3 with both offloads on NVMe in `folder`, DeepSpeed's buffer defaults, the small sub-groups above."""
    nvme = {"device": "nvme", "nvme_path": folder}
    return {"train_micro_batch_size_per_gpu": B, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
            "zero_optimization": {"stage": 3, "sub_group_size": SUB_GROUP, "stage3_prefetch_bucket_size": 0,
                                  "stage3_max_live_parameters": 0, "stage3_max_reuse_distance": 0,
                                  "offload_optimizer": nvme,
                                  "offload_param": nvme | {"max_in_cpu": MAX_IN_CPU, "buffer_count": PARAM_BUFFERS,
                                                           "buffer_size": PARAM_BUFFER_SIZE}},
            "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False, "steps_per_print": 10**9}


def _swapped(folder: str, rank: int) -> dict[str, int]:
    """Bytes of the rank's swap files under `folder`, optimizer and parameters apart."""
    out = {"optimizer": 0, "params": 0}
    for path in Path(folder).rglob("*"):
        if path.is_file() and f"rank{rank}" in str(path):
            out["params" if "params" in str(path.relative_to(folder)) else "optimizer"] += path.stat().st_size
    return out


def _rank(rank: int, port: int, world: int, out: str) -> None:
    """One rank: two steps on NVMe offload, then its swap files and pinned buffers."""
    deepspeed = deepspeed_rank(rank, port, world)
    with tempfile.TemporaryDirectory() as folder:
        config = _ds_config(folder)
        with deepspeed.zero.Init(config_dict_or_path=config):  # built partitioned, its shards swapped out
            model = build_model(_config(), "sdpa", torch.float32)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        ids = torch.randint(0, model.config.vocab_size, (B, S), generator=torch.Generator().manual_seed(rank))
        for _ in range(2):
            loss = engine(input_ids=ids, labels=ids, use_cache=False).loss
            engine.backward(loss)
            engine.step()
        zero = engine.optimizer
        manager = zero.optimizer_swapper.swap_buffer_manager
        optimizer_buffers = manager.num_elems * manager.count * 4
        swapper = next(p.nvme_swapper for p in engine.module.parameters() if getattr(p, "nvme_swapper", None))
        param_buffers = swapper.buffers.numel() * swapper.buffers.element_size()
        Path(f"{out}.{rank}").write_text(json.dumps(_swapped(folder, rank) | {
            "optimizer_buffers": optimizer_buffers, "param_buffers": param_buffers}))
    leave()


def predicted(world: int) -> dict[str, int]:
    """hfmem's per-rank NVMe bytes (optimizer and parameters apart) and pinned host buffers for the same run."""
    settings = TrainingSettings(method="full", dtype="bf16", optimizer="adamw", micro_batch_size=B, seq_len=S,
                                attention="sdpa", sharding="zero3", num_gpus=world, offload_optimizer=True,
                                offload_params=True, offload_device="nvme", sub_group_size=SUB_GROUP,
                                param_max_in_cpu=MAX_IN_CPU, param_swap_buffers=PARAM_BUFFERS,
                                param_swap_buffer_size=PARAM_BUFFER_SIZE).validated()
    state = state_for(Context(*_model(_config())), settings)
    buffers = state.cpu_bytes  # max_in_cpu 0: the host keeps the two swappers' buffers only
    param_buffers = settings.param_swap_buffers * settings.param_swap_buffer_size * 2
    return {"optimizer": state.nvme_bytes - state.nvme_param_bytes, "params": state.nvme_param_bytes,
            "optimizer_buffers": round(buffers - param_buffers), "param_buffers": round(param_buffers)}


def main() -> None:
    import deepspeed  # noqa: F401  (imported once, before the ranks fork)

    for world in (1, 2):
        want = predicted(world)
        for rank, got in enumerate(spawn(_rank, world, world, start_method="fork")):
            print(f"ZeRO-Infinity NVMe x{world} rank {rank}")
            for key, value in want.items():
                print(f"  {key:18} measured {got[key] / 2**20:9.2f} MiB  hfmem {value / 2**20:9.2f} MiB  "
                      f"{(value - got[key]) / got[key]:+.1%}")


if __name__ == "__main__":
    main()
