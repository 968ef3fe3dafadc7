"""Per-rank whole-step peak under real DeepSpeed ZeRO-1/2/3 on CPU (gloo, 2 processes) vs hfmem's zero estimate.

    python bench/deepspeed_peak.py              # every case
    python bench/deepspeed_peak.py zero3-full   # the cases whose name contains the word

How each rank runs and is measured: tests/deepspeed_ranks.py. Needs deepspeed (a test extra); about 6 s a case.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from deepspeed_ranks import B, CASES, S, TERMS, WORLD, measure, predicted  # noqa: E402
from rank_report import print_case  # noqa: E402


def main() -> None:
    chosen = [c for c in CASES if not sys.argv[1:] or any(w in f"zero{c[0]}-{c[1]}" for w in sys.argv[1:])]
    for case in chosen:
        stage, method = case
        print_case(f"DeepSpeed ZeRO-{stage} x{WORLD} {method} b={B} s={S}", predicted(case), TERMS, measure(case))


if __name__ == "__main__":
    main()
