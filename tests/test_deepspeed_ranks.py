"""hfmem's ZeRO-1/2/3 per-GPU peak against real DeepSpeed runs on CPU (2 gloo ranks): never under, at most 20% over.

What each rank runs and how its live bytes are counted: tests/deepspeed_ranks.py; `python bench/deepspeed_peak.py`
prints the terms and what was alive at each rank's peak.
"""

from __future__ import annotations

import pytest

pytest.importorskip("deepspeed")

from deepspeed_ranks import CASES, measure, predicted  # noqa: E402


@pytest.mark.parametrize("case", CASES, ids=[f"zero{stage}-{method}" for stage, method in CASES])
def test_zero_peak_per_rank_is_covered_by_the_estimate(case):
    estimate = predicted(case)["allocated_peak"]
    for rank in measure(case):
        assert rank["peak"] <= estimate <= 1.20 * rank["peak"], (case, estimate, rank["peak"], rank["when"])
