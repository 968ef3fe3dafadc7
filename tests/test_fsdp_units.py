"""FSDP's gradient shards for LoRA, against real FSDP1 runs on CPU (gloo, 2 ranks, tests/fsdp_ranks.py).

With use_orig_params=True and each adapter in its frozen base's unit, FSDP1 keeps one flat parameter per unit and
its gradient spans the frozen weights too; with the adapters in units of their own (PEFT's fsdp_auto_wrap_policy,
what HF Trainer uses), only the adapters have gradients. Accumulating under no_sync (accelerate, HF Trainer, LitGPT),
each rank holds its units' whole unsharded gradients instead of shards. hfmem's `gradients` term per rank must match
all four.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from fsdp_ranks import measure  # noqa: E402

from hfmem.memory.model_state import ParameterSplit, model_state_bytes  # noqa: E402
from hfmem.memory.settings import TrainingSettings  # noqa: E402

pytestmark = pytest.mark.slow  # real CPU training steps: `-m "not slow"` skips them locally


@pytest.mark.parametrize("no_sync", [False, True], ids=["synced", "no_sync"])
@pytest.mark.parametrize("layout", ["mixed", "apart"])
def test_gradient_shards_per_rank_match_real_fsdp(layout: str, no_sync: bool) -> None:
    run = measure(layout, no_sync)
    total = run["frozen"] + run["trainable"]
    split = ParameterSplit(total=total, trainable=run["trainable"], frozen_16bit=run["frozen"], frozen_quantized=0,
                           trainable_matrices=(), trainable_vectors=0, largest_trainable=run["trainable"],
                           matmul_parameters=total)
    settings = TrainingSettings(method="lora", dtype="fp32", sharding="fsdp_full_shard", num_gpus=2,
                                fsdp_mixed_units=layout == "mixed", gradient_accumulation_steps=2,
                                sync_each_batch=not no_sync).validated()
    state = model_state_bytes(split, settings, hidden_size=64, layer_parameters=run["layer_parameters"],
                              root_parameters=0, largest_root_unit=0, gathered_peak=0)
    for measured in run["gradient_bytes"]:
        assert state.gradients == pytest.approx(measured, rel=0.05), (layout, state.gradients, measured)
