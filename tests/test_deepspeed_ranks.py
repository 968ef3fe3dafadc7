"""hfmem's ZeRO-1/2/3 per-GPU peak against real DeepSpeed runs on CPU (2 gloo ranks, two cases on 4 too): at most 3%
under, 20% over.

The 3%: with gradient accumulation, ZeRO-2's second rank briefly holds one more buffer the size of its gradient
partition while it accumulates: measured −0.4% on the tiny model alone, −2.1% (30,983,320 B against 30,331,140)
when the full suite shares the two cores, as reduce buckets wait longer for gloo. A known gap, not modelled.

What each rank runs and how its live bytes are counted: tests/deepspeed_ranks.py; `python bench/deepspeed_peak.py`
prints the terms and what was alive at each rank's peak.
"""

from __future__ import annotations

import pytest

pytest.importorskip("deepspeed")

from deepspeed_ranks import CASES, WIDE, WORLD, case_name, measure, predicted  # noqa: E402

pytestmark = pytest.mark.slow  # real CPU training steps: `-m "not slow"` skips them locally

RUNS = [(c, WORLD) for c in CASES] + [(c, 4) for c in WIDE]


@pytest.mark.parametrize(("case", "world"), RUNS, ids=[f"{case_name(c)}-x{w}" for c, w in RUNS])
def test_zero_peak_per_rank_is_covered_by_the_estimate(case, world):
    estimate = predicted(case, world)["allocated_peak"]
    for rank in measure(case, world):
        assert 0.97 * rank["peak"] <= estimate <= 1.20 * rank["peak"], (case, world, estimate, rank["peak"],
                                                                        rank["when"])
