"""Case counts of the fuzz suites (tests/test_fuzz.py), printed at the end of the pytest run by conftest.py.

``record(target, ok)`` counts one generated case; ``ok`` is False when a case produced a traceback,
an internal error (exit 70) or more than one line of error output. Set HFMEM_FUZZ_REPORT=path to
also write the counts there as JSON.
"""

from __future__ import annotations

import json
import os

COUNTS: dict[str, list[int]] = {}


def record(target: str, ok: bool) -> None:
    cases = COUNTS.setdefault(target, [0, 0])
    cases[0] += 1
    cases[1] += 0 if ok else 1


def summary_lines() -> list[str]:
    if not COUNTS:
        return []
    total = sum(c for c, _ in COUNTS.values())
    bad = sum(b for _, b in COUNTS.values())
    lines = [f"fuzz: {total} cases, {bad} with a traceback or internal error"]
    lines += [f"  {target}: {cases} cases, {bad} bad" for target, (cases, bad) in sorted(COUNTS.items())]
    if path := os.environ.get("HFMEM_FUZZ_REPORT"):
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"total": total, "bad": bad, "targets": COUNTS}, handle, indent=2)
    return lines
