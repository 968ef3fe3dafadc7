"""hfmem against published per-GPU memory of TP/PP/CP/EP training runs (fixtures/parallel_published.json).

Each row is a hfmem command line with the layout's flags (--tp, --pp, --pp-schedule, --vpp, --cp, --ep,
--sequence-parallel); the figure is read as the source's metric says (bench/published.py METRIC). A row whose flags
the CLI refuses (a setting hfmem does not have yet, e.g. --expert-tp or --dtype fp8-te) is a miss, printed with the
CLI's one-line error: it counts against the coverage, never silently. Bounds (an out-of-memory run, a run that fit)
are checked as bounds. A row marked `not_scored` (its own config is not knowable from its source) is run and printed
with its reason, outside the medians. Prints every row, the median |error| overall, per source and per split.

    python bench/parallel.py
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import published  # noqa: E402  (bench/published.py beside this file: the same CLI runner and metric map)

FIXTURE = published.FIXTURES / "parallel_published.json"


def source_of(entry: dict) -> str:
    """The source a row comes from, for the per-source medians: its URL's repository or host."""
    url = entry["provenance"]["url"].split("://", 1)[-1]
    parts = url.split("/")
    return "/".join(parts[:3]) if parts[0] == "github.com" else parts[0]


def main() -> None:
    entries = json.loads(FIXTURE.read_text())["entries"]
    rows, misses, bounds, unscored = [], [], [], []
    for entry in entries:
        if entry["run"] is None:
            misses.append((entry["id"], "; ".join(entry["unmodelled"]) or "no run"))
            continue
        try:
            report = published.cli_report(published.argv(entry))
        except RuntimeError as err:
            misses.append((entry["id"], str(err)[-160:]))
            continue
        predicted = published.figure_gib(report, entry["provenance"]["metric"])
        measured = float(entry["measured_gib"])
        if entry.get("not_scored"):
            unscored.append((entry, predicted))
        elif entry["kind"] == "measured":
            rows.append((entry, predicted, predicted / measured - 1))
        else:  # lower_bound: the run ran out of memory above measured; upper_bound: it fit below it
            holds = predicted > measured if entry["kind"] == "lower_bound" else predicted <= measured
            bounds.append((entry["id"], entry["kind"], measured, predicted, holds))
    print(f"{'id':64} {'split':8} {'meas GiB':>9} {'pred GiB':>9} {'error':>8}")
    for entry, predicted, error in rows:
        print(f"{entry['id'][:64]:64} {entry['split']:8} {entry['measured_gib']:9.2f} {predicted:9.2f} {error:+8.1%}")
    for name, kind, measured, predicted, holds in bounds:
        print(f"{name[:64]:64} {kind:8} {measured:9.2f} {predicted:9.2f} {'holds' if holds else 'VIOLATED':>8}")
    for entry, predicted in unscored:
        print(f"{entry['id'][:64]:64} {entry['split']:8} {entry['measured_gib']:9.2f} {predicted:9.2f} not scored: "
              f"{entry['not_scored'][12:120]}...")
    for name, why in misses:
        print(f"{name[:64]:64} not run: {why}")
    if rows:
        errors = [abs(e) for _, _, e in rows]
        print(f"\nscored rows: {len(rows)} of {len(entries)}; median |error| {statistics.median(errors):.1%}; "
              f"under -25%: {sum(e < -0.25 for _, _, e in rows)}")
        for key, of in (("source", source_of), ("split", lambda e: e["split"])):
            groups: dict[str, list[float]] = defaultdict(list)
            for entry, _, error in rows:
                groups[of(entry)].append(abs(error))
            print(f"median |error| per {key}: " + "; ".join(
                f"{name} {statistics.median(v):.1%} ({len(v)})" for name, v in sorted(groups.items())))
    print(f"not scored: {len(unscored)}; not run: {len(misses)}; bounds held: {sum(b[-1] for b in bounds)} of {len(bounds)}")


if __name__ == "__main__":
    main()
