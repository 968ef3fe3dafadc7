"""The most-loaded-rank model (hfmem.memory.parallel) against real runs on CPU (gloo, tests/layout_ranks.py): each
rank's whole-step peak of live tensors under torch's tensor parallelism (with and without sequence parallelism),
pipeline schedules (GPipe, 1F1B, interleaved 1F1B) and FSDP2 x TP, and the terms the layout splits (weights, optimizer states)."""

from __future__ import annotations

import pytest
from layout_ranks import config, measure

from hfmem.memory.estimate import Context, rank_estimate
from hfmem.memory.parallel import Layout
from hfmem.memory.settings import TrainingSettings
from hfmem.model.architecture import read_architecture
from hfmem.model.meta import build_inventory

pytestmark = pytest.mark.slow  # real CPU training steps: `-m "not slow"` skips them locally

LAYOUTS = {"tp": {"tp": 2}, "tp-sp": {"tp": 2, "sequence_parallel": "dtensor"},
           "fsdp-tp": {"tp": 2, "sequence_parallel": "dtensor", "num_gpus": 4, "sharding": "fsdp_full_shard"},
           "pp-gpipe": {"pp": 2, "pp_schedule": "gpipe"}, "pp-1f1b": {"pp": 2, "pp_schedule": "1f1b"},
           "pp-interleaved": {"pp": 2, "pp_schedule": "interleaved", "vpp": 2}}


def _predicted(kind: str, b: int, s: int, micro: int, stage: int) -> dict[str, int]:
    """hfmem's terms for a rank of `stage`: the case as layout_ranks.py runs it (pure bf16, AdamW, SDPA)."""
    cfg = config(kind)
    settings = TrainingSettings(method="full", dtype="bf16-pure", optimizer="adamw", micro_batch_size=b, seq_len=s,
                                attention="sdpa", gradient_accumulation_steps=micro, **LAYOUTS[kind]).validated()
    ctx = Context(read_architecture(cfg), build_inventory(cfg))
    return rank_estimate(ctx, settings, s, Layout.of(settings), stage)[3].to_dict()


def _category(result: dict, name: str) -> int:
    """Bytes alive at the peak under a LiveBytes category (weights, gradients, optimizer states)."""
    return dict(result["breakdown"]).get(name, 0)


def _check(kind: str, ranks: list[dict], b: int, s: int, micro: int, tolerance: float = 0.05) -> None:
    for rank, result in enumerate(ranks):
        terms = _predicted(kind, b, s, micro, rank if kind.startswith("pp") else 0)
        assert terms["allocated_peak"] == pytest.approx(result["peak"], rel=tolerance), (rank, result["when"])
        # weights and AdamW's two moments, each by its local shard (buffers and step counters aside)
        assert terms["weights"] == pytest.approx(_category(result, "weights"), rel=0.01)
        assert terms["optimizer_states"] == pytest.approx(_category(result, "optimizer states"), rel=0.01)


@pytest.mark.parametrize("kind", ["tp", "tp-sp"])
def test_tensor_parallel_ranks_match_real_torch_tp(kind: str) -> None:
    ranks = measure((kind, 2, 128, 1))
    _check(kind, ranks, 2, 128, 1)
    # sequence parallelism splits the norms' saved tensors: less per rank than TP alone
    if kind == "tp-sp":
        assert ranks[0]["peak"] < _predicted("tp", 2, 128, 1, 0)["allocated_peak"]


@pytest.mark.parametrize("kind", ["pp-gpipe", "pp-1f1b", pytest.param("pp-interleaved", marks=pytest.mark.slow)])
def test_pipeline_stages_match_real_torch_pipelining(kind: str) -> None:
    ranks = measure((kind, 2, 128, 4))
    _check(kind, ranks, 2, 128, 4)


@pytest.mark.slow
def test_fsdp_by_tp_ranks_match_real_fsdp2_on_a_2d_mesh() -> None:
    """FSDP2 over dp_shard x TP 2 (4 ranks): the layout's weights and states exactly, and the peak (in the last
    layer's backward, the root and two layers gathered, no unit's unsharded gradients reduce-scattered yet)."""
    ranks = measure(("fsdp-tp", 2, 128, 1))
    _check("fsdp-tp", ranks, 2, 128, 1)
