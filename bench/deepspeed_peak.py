"""Per-rank whole-step peak under real DeepSpeed ZeRO-1/2/3 on CPU (gloo, 2 or 4 processes) vs hfmem's zero estimate.

    python bench/deepspeed_peak.py              # every case on 2 ranks, then the WIDE cases on 4
    python bench/deepspeed_peak.py zero3-full   # the cases whose name contains the word

How each rank runs and is measured: tests/deepspeed_ranks.py. Needs deepspeed (a test extra); about 6 s a case.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from deepspeed_ranks import B, CASES, S, TERMS, WIDE, WORLD, case_name, measure, predicted  # noqa: E402
from rank_report import print_case  # noqa: E402


def main() -> None:
    runs = [(c, WORLD) for c in CASES] + [(c, 4) for c in WIDE]
    for case, world in runs:
        if not sys.argv[1:] or any(w in case_name(case) for w in sys.argv[1:]):
            print_case(f"DeepSpeed {case_name(case)} x{world} b={B} s={S}", predicted(case, world), TERMS,
                       measure(case, world))


if __name__ == "__main__":
    main()
