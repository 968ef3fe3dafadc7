"""Predicted vs published peak training memory: every row of fixtures/published_memory.json through hfmem's CLI.

    python bench/published.py            # the table; per-source, per-framework, per-split and overall medians
    python bench/published.py --json     # the rows as JSON
    python bench/published.py --write-baseline   # record each row's error in fixtures/published_baseline.json
    python bench/published.py --write-markdown   # rewrite fixtures/published_memory.md's table from the JSON

A row's run is `hfmem MODEL ARGS --format json` (its `run.model`, `run.args` and `run.config` as --config), called
in-process through `hfmem.cli.main.run`, the function the `hfmem` command calls. The figure read from the JSON is
the one matching the source's metric: max_memory_allocated / peak_memory_active / unknown -> the allocated peak
(what torch.cuda.max_memory_allocated, the usual printout, reports); reserved -> allocated + fragmentation;
nvidia-smi, capacity and estimates -> the total with the CUDA context.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hfmem.cli.main import run
from hfmem.memory.record import estimates
from hfmem.units import GIB

FIXTURES = ROOT / "fixtures"
MARKDOWN = FIXTURES / "published_memory.md"
"""The fixture as a table to read; its rows are generated from the JSON (--write-markdown), a test keeps them equal."""
KINDS = {"measured": "M", "capacity_limit": "C", "upper_bound": "U", "estimate": "E"}
BASELINE = FIXTURES / "published_baseline.json"
"""Each measured row's signed error when it was last accepted: tests/test_published.py fails on a row 3 points
worse or a higher median, so a change that helps one row and hurts five shows."""

HELD_OUT = "held_out"
"""The `split` of rows kept out of the tuning of hfmem's settings (the rule is in the fixture's schema_notes)."""

METRIC = {"max_memory_allocated": "allocated_peak", "peak_memory_active": "allocated_peak",
          "max_memory_reserved": "reserved_peak", "nvidia-smi": "total", "unknown": "allocated_peak"}
"""The per_gpu_bytes key of hfmem's JSON that each source metric reads; any other metric reads `total`."""


@dataclass
class Row:
    """One entry's outcome: the measured and predicted GiB, and which of its settings the source did not state."""

    id: str
    source: str
    framework: str
    split: str
    method: str
    kind: str
    metric: str
    measured_gib: float
    predicted_gib: float | None = None
    error: float | None = None
    inferred: list[str] = field(default_factory=list)
    unmodelled: list[str] = field(default_factory=list)
    skipped: str | None = None


def load_entries() -> list[dict[str, Any]]:
    return json.loads((FIXTURES / "published_memory.json").read_text())["entries"]


def argv(entry: dict[str, Any]) -> list[str]:
    """The command line of an entry's run, without the program name (its fixture paths made absolute)."""
    spec = entry["run"]
    config = ["--config", str(ROOT / spec["config"])] if spec.get("config") else []
    return [str(ROOT / spec["model"]), *spec["args"], *config, "--format", "json"]


def cli_report(args: list[str]) -> dict[str, Any]:
    """hfmem's JSON report for a command line, from the CLI's own entry point run in-process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = run(args)
    if status != 0:
        raise RuntimeError(f"hfmem {' '.join(args)} exited with status {status}")
    return json.loads(out.getvalue())


def figure_gib(report: dict[str, Any], metric: str) -> float:
    """The figure a report gives for a source metric, in GiB (the report's one estimate: each run names one method)."""
    (estimate,) = estimates(report)
    return estimate["per_gpu_bytes"][METRIC.get(metric, "total")] / GIB


def predict(entry: dict[str, Any]) -> Row:
    """Run one entry through the CLI; an entry without a run says why."""
    provenance = entry["provenance"]
    row = Row(id=entry["id"], source=provenance["section"], framework=entry["framework"]["name"], split=entry["split"],
              method=entry["run"]["args"][1] if entry["run"] else "-", kind=entry["kind"], metric=provenance["metric"],
              measured_gib=float(entry["measured_gib"]), inferred=[i["setting"] for i in entry["inferred"]],
              unmodelled=list(entry["unmodelled"]))
    if entry["run"] is None:
        row.skipped = "; ".join(row.unmodelled) or "no run"
        return row
    row.predicted_gib = figure_gib(cli_report(argv(entry)), row.metric)
    row.error = row.predicted_gib / row.measured_gib - 1
    return row


def rows() -> list[Row]:
    return [predict(e) for e in load_entries()]


def scored(table: list[Row]) -> list[Row]:
    """The rows that count: measured peaks with a prediction."""
    return [r for r in table if r.kind == "measured" and r.error is not None]


def median_abs_error(table: list[Row]) -> float:
    """Median |predicted/measured - 1| over the measured rows."""
    return statistics.median(abs(r.error) for r in scored(table))


def medians_by(table: list[Row], key: str) -> dict[str, tuple[int, float]]:
    """Row count and median absolute error of the measured rows per value of `key` (source, framework or split)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for r in scored(table):
        groups[getattr(r, key)].append(abs(r.error))
    return {name: (len(errors), statistics.median(errors)) for name, errors in sorted(groups.items())}


def render(table: list[Row]) -> str:
    header = (f"{'id':50} {'method':6} {'metric':21} {'meas GiB':>9} {'pred GiB':>9} {'error':>8}  not stated by the "
              "source / not modelled")
    lines = [header]
    for r in table:
        pred = f"{r.predicted_gib:9.2f}" if r.predicted_gib is not None else f"{'-':>9}"
        err = f"{r.error:+8.1%}" if r.error is not None else f"{'-':>8}"
        extra = ", ".join(r.inferred) if r.inferred else "all stated"
        if r.unmodelled:
            extra += " | not modelled: " + "; ".join(u.split(":")[0] for u in r.unmodelled)
        if r.skipped:
            extra = "NOT RUN: " + r.skipped
        kind = "" if r.kind == "measured" else f" [{r.kind}]"
        lines.append(f"{r.id[:50]:50} {r.method:6} {r.metric[:21]:21} {r.measured_gib:9.2f} {pred} {err}  {extra}{kind}")
    held_out = [r for r in table if r.split == HELD_OUT]
    for title, part, key in (("per source", table, "source"), ("per framework", table, "framework"),
                             ("per split", table, "split"), ("per framework, held-out rows only", held_out, "framework")):
        lines += ["", f"median absolute error {title} (measured rows):"]
        lines += [f"  {median:6.1%}  {count:3} rows  {name}" for name, (count, median) in medians_by(part, key).items()]
    lines.append(f"\nmedian absolute error over {len(scored(table))} measured entries: {median_abs_error(table):.2%}")
    return "\n".join(lines)


def markdown_row(entry: dict[str, Any]) -> str:
    """One entry as a line of published_memory.md's table: what it measured and its hfmem command line."""
    spec = entry["run"]
    config = ["--config", spec["config"]] if spec and spec.get("config") else []
    command = f"`{' '.join([spec['model'], *spec['args'], *config])}`" if spec else "-"
    cells = (f"`{entry['id']}`", entry["model"], entry["framework"]["name"], f"{entry['measured_gib']:.2f}",
             entry["provenance"]["metric"], KINDS[entry["kind"]], str(len(entry["inferred"])), entry["split"], command)
    return "| " + " | ".join(cells) + " |"


def markdown(text: str, entries: list[dict[str, Any]]) -> str:
    """published_memory.md with its entry count and table rows made from the entries (prose kept as written)."""
    lines = text.splitlines()
    table = [i for i, line in enumerate(lines) if line.startswith("| `")]
    lines[table[0]:table[-1] + 1] = [markdown_row(e) for e in entries]
    count = next(i for i, line in enumerate(lines) if line.endswith(" entries."))
    lines[count] = f"{len(entries)} entries."
    return "\n".join(lines) + "\n"


def baseline(table: list[Row]) -> dict[str, Any]:
    """The errors to record: each measured row's, rounded to 0.1 point, and the median."""
    errors = {r.id: round(r.error * 100, 1) for r in scored(table)}
    return {"median_abs_error_pct": round(median_abs_error(table) * 100, 2), "rows_error_pct": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--write-baseline", action="store_true", help=f"write {BASELINE.name} from this run")
    parser.add_argument("--write-markdown", action="store_true", help=f"rewrite {MARKDOWN.name}'s table")
    args = parser.parse_args()
    if args.write_markdown:
        MARKDOWN.write_text(markdown(MARKDOWN.read_text(), load_entries()))
    table = rows()
    if args.write_baseline:
        BASELINE.write_text(json.dumps(baseline(table), indent=1, sort_keys=True) + "\n")
    if args.json:
        print(json.dumps([r.__dict__ for r in table], indent=1))
    else:
        print(render(table))


if __name__ == "__main__":
    main()
