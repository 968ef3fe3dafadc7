"""The checkpoint-save phase of a sharded run against real full state dicts on CPU (FSDP1 and FSDP2, 2 gloo ranks).

What each rank runs: tests/save_ranks.py. Rank 0's host copy is the larger of the whole model's state dict and the
whole optimizer state (built one after the other): hfmem's `host_save_bytes` must be within 5% of it, and the other
ranks must receive nothing. While the model's state dict is built, each rank unshards one unit (FSDP1) or one
parameter (FSDP2) at a time: hfmem's `save_gathered` (the root unit and one layer's, in the sharded dtype) must
cover it. FSDP1's full optimizer state dict holds more on a rank: both moments of a unit unsharded (full
fine-tune: 6.8 MB against 5.5 MB on this model), or with LoRA the unit's flat parameter unsharded beside its
concatenated shards (8.6 MB). A known gap, below the training step's gathered units, gradients and activations, so it
changes no verdict; it is asserted as a miss so that a fix shows.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from save_ranks import CASES, MODEL, case_name, measure  # noqa: E402
from step_peak import LORA_TARGETS  # noqa: E402
from tiny_models import tiny_config  # noqa: E402

from hfmem.memory.estimate import Context, state_for  # noqa: E402
from hfmem.memory.model_state import ModelState  # noqa: E402
from hfmem.memory.settings import TrainingSettings  # noqa: E402
from hfmem.model.architecture import read_architecture  # noqa: E402
from hfmem.model.meta import build_inventory  # noqa: E402

pytestmark = pytest.mark.slow  # real CPU training steps: `-m "not slow"` skips them locally

DTYPES = {"fp32": "fp32", "bf16": "bf16-pure"}
"""The runs' sharded dtype as an hfmem precision: fp32 parameters and states (as under mixed precision), or bf16
parameters and states with no master copy."""


def predicted(case: tuple[str, str, str], state_dict_type: str = "full") -> ModelState:
    """hfmem's model state for the case: FSDP full shard over 2 GPUs, AdamW."""
    _, method, dtype = case
    config = tiny_config(MODEL, 2)
    lora = {"lora_rank": 8, "lora_targets": LORA_TARGETS} if method == "lora" else {}
    settings = TrainingSettings(method=method, dtype=DTYPES[dtype], optimizer="adamw", sharding="fsdp_full_shard",
                                num_gpus=2, state_dict_type=state_dict_type, **lora).validated()
    return state_for(Context(read_architecture(config), build_inventory(config)), settings)


@pytest.fixture(scope="module", params=CASES, ids=[case_name(c) for c in CASES])
def run(request) -> tuple[tuple[str, str, str], list[dict]]:
    return request.param, measure(request.param)


def test_rank0_host_copy_is_the_larger_full_state_dict(run) -> None:
    case, ranks = run
    first, *others = ranks
    host = max(first["model"]["bytes"], first["optimizer"]["bytes"])
    assert predicted(case).host_save_bytes == pytest.approx(host, rel=0.05), (case, first)
    assert all(r["model"]["bytes"] == r["optimizer"]["bytes"] == 0 for r in others)  # rank0_only / cpu_offload


def test_each_rank_unshards_no_more_than_the_save_phase_counts(run) -> None:
    case, ranks = run
    gathered = predicted(case).save_gathered
    for r in ranks:
        assert r["model"]["peak_over_resident"] - r["model"]["bytes"] <= gathered, (case, r)
    optimizer = max(r["optimizer"]["peak_over_resident"] - r["optimizer"]["bytes"] for r in ranks)
    if case[0] == "fsdp1":
        assert optimizer > gathered, "FSDP1's full optimizer state dict is now covered: update the docstring"
    else:
        assert optimizer <= gathered, (case, ranks)


def test_sharded_saves_add_nothing() -> None:
    state = predicted(CASES[0], "sharded")
    assert state.host_save_bytes == state.save_gathered == 0
