"""Turn scan records (JSONL) into a CSV table, a markdown summary or the dashboard's data, optionally filtered by fit.

Filters work on the record shape `hfmem/scan/runner.py` writes; `--fits METHOD:GPU` keeps models whose
report's fit table says that method fits on one such GPU with the scan's settings (see `fit_cells`).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from hfmem import errors
from hfmem.memory.record import cells, serving_cells
from hfmem.memory.settings import ALL_METHODS, METHOD_ALIASES, SERVE, TrainingSettings
from hfmem.model.load import READABLE_SCHEMA_VERSIONS
from hfmem.scan.runner import record_key
from hfmem.text import csv_cell, markdown
from hfmem.units import GIB, count

_FIT = re.compile(r"^\s*([A-Za-z][A-Za-z_-]*)\s*:\s*(\S.*?)\s*$")

METHOD_COLUMNS = tuple(f"{m}_{c}" for m in ALL_METHODS for c in ("gib_per_gpu", "fits_on"))
"""Per method (every --method value, PEFT's other methods included; empty where the scan did not ask for it): the GiB
one GPU needs at the scan's settings, and the smallest GPU it fits on (or N× the GPU needing the fewest, when one is
not enough)."""
SERVE_COLUMNS = ("serve_weights_gib", "serve_fits_on", "serve_cheapest")
"""The serving column's (--method serve): the weights' GiB per GPU, the smallest GPU one replica fits on as asked
(else the fewest tensor-parallel GPUs its advice names, "TP2× T4"), and the cheapest replicas for the concurrency
with their USD per hour ("4× L4 $3.20/h")."""
CSV_COLUMNS = ("model", "status", "repo_id", "revision", "sha", "model_type", "model_class", "parameters",
               "checkpoint_parameters", "checkpoint_bytes", "crosscheck", "smallest_fit", "fits", *METHOD_COLUMNS,
               *SERVE_COLUMNS, "settings", "error_type", "error", "settings_digest")


DASHBOARD_COLUMNS = (("model", "model", "text"), ("status", "status", "text"), ("model_type", "type", "text"),
                     ("parameters", "parameters", "count"),
                     *(column for m in ALL_METHODS for column in ((f"{m}_gib_per_gpu", f"{m} GiB/GPU", "gib"),
                                                                   (f"{m}_fits_on", f"{m} fits on", "text"))),
                     ("error", "error", "text"))
"""The dashboard's columns: (CSV row key, header, kind: text, count or gib); `error` is the type and message. A
method's two columns are shown when some row has its figure (dashboard_data)."""
SERVE_DASHBOARD_COLUMNS = (("serve_weights_gib", "serve weights GiB/GPU", "gib"),
                           ("serve_fits_on", "serve fits on", "text"), ("serve_cheapest", "serve cheapest", "text"))
"""The serving column's (SERVE_COLUMNS), before `error` in a scan with --method serve."""


@dataclass(frozen=True)
class FitFilter:
    """`--fits METHOD:GPU`, e.g. qlora:rtx4090; the GPU by catalogue name or alias, or a custom GPU's name."""

    method: str
    gpu: str

    def __str__(self) -> str:
        return f"{self.method}:{self.gpu}"


class FitCell(NamedTuple):
    """One cell of a report's fit table, as the filters and exports read it."""

    method: str
    gpu: str
    gpu_keys: frozenset[str]
    usable_gib: float
    fits: bool


def parse_fit_filter(text: str) -> FitFilter:
    """`qlora:rtx4090` -> FitFilter("qlora", "RTX 4090"); anything else is a one-line input error."""
    from hfmem.hardware.gpus import find_gpu

    match = _FIT.match(text)
    method = METHOD_ALIASES.get(match[1].lower(), match[1].lower()) if match else ""
    if not match or method not in (*ALL_METHODS, SERVE):
        raise errors.InvalidInputError(f"--fits {text!r}: expected METHOD:GPU with METHOD one of "
                                       f"{', '.join((*ALL_METHODS, SERVE))}, e.g. qlora:rtx4090.")
    try:
        gpu = find_gpu(match[2]).name
    except errors.InvalidInputError:  # a custom GPU (--gpu name=GiB) is matched by its name
        gpu = match[2]
    return FitFilter(method, gpu)


def fit_cells(record: dict[str, Any]) -> list[FitCell]:
    """The record's fit cells (hfmem.memory.record `cells`, full or `--compact`); none for failed records.

    Read: `method`, the GPU's name and usable GiB (the record's `gpus` table) and whether it fits as asked with
    the scan's settings, no mitigation. Cells missing any of them are skipped.
    """
    return _fit_cells(_cells(record))


def _fit_cells(entries: list[dict[str, Any]]) -> list[FitCell]:
    found = []
    for entry in entries:
        try:
            gpu = entry["gpu"]
            found.append(FitCell(entry["method"], gpu["name"], frozenset({gpu_key(gpu["name"])}),
                                 float(gpu["usable_gib"]), entry["fits"] is True))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return found


def _cells(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The record's fit cells in full, row by row: none where the report is missing or of another schema, and no
    row that does not read (a file handed to --csv may be edited or foreign)."""
    report = record.get("report")
    if (not isinstance(report, dict) or not isinstance(report.get("fit"), (dict, list))
            or report.get("schema_version") not in READABLE_SCHEMA_VERSIONS):
        return []
    try:
        return cells(report, skip_bad=True) + serving_cells(report)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):  # the estimates or GPUs do not read
        return []


def matches_fits(record: dict[str, Any], filters: Iterable[FitFilter]) -> bool:
    """True when, for every filter, the record's report fits that method on that GPU (a failed model fits nothing)."""
    return _matches(fit_cells(record), filters)


def _matches(found: list[FitCell], filters: Iterable[FitFilter]) -> bool:
    fitting = [c for c in found if c.fits]
    return all(any(c.method == f.method and gpu_key(f.gpu) in c.gpu_keys for c in fitting) for f in filters)


def _smallest_fits(found: list[FitCell]) -> dict[str, str]:
    """Per method, the GPU with the least memory the model fits on: the short answer to "what card do I need"."""
    best: dict[str, FitCell] = {}
    for cell in found:
        if cell.fits and (cell.method not in best or cell.usable_gib < best[cell.method].usable_gib):
            best[cell.method] = cell
    return {method: cell.gpu for method, cell in best.items()}


def _method_figures(entries: list[dict[str, Any]], smallest: dict[str, str]) -> dict[str, tuple[float | None, str]]:
    """Per method of the record's fit matrix: (GiB per GPU as set, where it fits: "RTX 4090", "4× H100 80GB")."""
    by_method: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        by_method.setdefault(entry["method"], []).append(entry)
    return {method: (_gib(entries), smallest.get(method) or _fewest_gpus(entries))
            for method, entries in by_method.items()}


def _gib(entries: list[dict[str, Any]]) -> float | None:
    total = entries[0].get("total_bytes")
    return round(total / GIB, 2) if isinstance(total, (int, float)) else None


def _fewest_gpus(entries: list[dict[str, Any]]) -> str:
    """Where one GPU is not enough: the fewest GPUs of any kind (the larger card on a tie), else "no fit"."""
    needed = {id(e): e["gpus_needed"] if "gpus_needed" in e else (e.get("multi_gpu") or {}).get("num_gpus")
              for e in entries}  # a compact cell's column, a full cell's multi-GPU search
    multi = [e for e in entries if isinstance(needed[id(e)], int)]
    if not multi:
        return "no fit"
    usable = {id(e): e["gpu"].get("usable_gib") for e in multi}
    best = min(multi, key=lambda e: (needed[id(e)], -usable[id(e)] if isinstance(usable[id(e)], (int, float)) else 0))
    return f"{needed[id(best)]}× {best['gpu'].get('name')}"


def settings_text(record: dict[str, Any]) -> str:
    """The training settings a record was estimated with, in one short line (its `settings.plan.training`)."""
    training = ((record.get("settings") or {}).get("plan") or {}).get("training")
    if not isinstance(training, dict):
        return ""
    training = TrainingSettings().to_dict() | training  # a compact record keeps what differs from the defaults
    seq = training.get("seq_len") or "default"
    return (f"{training.get('dtype')} · {training.get('resolved_optimizer') or training.get('optimizer')} · "
            f"seq {seq} · micro-batch {training.get('micro_batch_size')} · checkpointing "
            f"{training.get('gradient_checkpointing')} · {training.get('attention')}")


def summarise(records: Iterable[dict[str, Any]], filters: list[FitFilter]) -> list[tuple[dict[str, Any], bool]]:
    """(CSV row, fits every filter) for the last record of each (model, settings digest), in first-seen order.

    Streams: only the small rows are kept, never the full reports; each record's fit cells are read once.
    """
    latest: dict[tuple[str, str], tuple[dict[str, Any], bool]] = {}
    for record in records:
        entries = _cells(record)
        found = _fit_cells(entries)
        latest[record_key(record)] = csv_row(record, entries, found), _matches(found, filters)
    return list(latest.values())


def csv_row(record: dict[str, Any], entries: list[dict[str, Any]], found: list[FitCell]) -> dict[str, Any]:
    """One flat CSV row per record, from the record and its fit cells (full and as FitCells); missing values are
    None."""
    report = record.get("report") or {}
    arch = report.get("architecture") or {}
    params = report.get("parameters") or {}
    error = record.get("error") or {}
    smallest = _smallest_fits(found)
    return {
        "model": record["model"], "status": record.get("status"), "repo_id": record.get("repo_id"),
        "revision": record.get("revision"), "sha": record.get("sha"), "model_type": arch.get("model_type"),
        "model_class": arch.get("model_class"), "parameters": params.get("total"),
        "checkpoint_parameters": params.get("checkpoint_total"), "checkpoint_bytes": params.get("checkpoint_bytes"),
        "crosscheck": (report.get("crosscheck") or {}).get("status"),
        "smallest_fit": "; ".join(f"{method}: {gpu}" for method, gpu in smallest.items()),
        "fits": "; ".join(f"{c.method}:{c.gpu}" for c in found if c.fits),
        **_method_columns(_method_figures(entries, smallest)),
        **_serve_columns(report, [e for e in entries if e["method"] == SERVE], smallest.get(SERVE)),
        "settings": settings_text(record) or None,
        "error_type": error.get("type"), "error": error.get("message"), "settings_digest": record["settings_digest"],
    }


def _method_columns(figures: dict[str, tuple[float | None, str]]) -> dict[str, Any]:
    columns: dict[str, Any] = {}
    for name in METHOD_COLUMNS:
        method, _, what = name.partition("_")
        gib, fits_on = figures.get(method, (None, None))
        columns[name] = gib if what == "gib_per_gpu" else fits_on
    return columns


def _serve_columns(report: dict[str, Any], entries: list[dict[str, Any]], smallest: str | None) -> dict[str, Any]:
    """SERVE_COLUMNS of one record; None without a serving column."""
    if not entries:
        return dict.fromkeys(SERVE_COLUMNS)
    needs = [(e["advice"]["num_gpus"], -(e["gpu"]["usable_gib"] or 0), e["gpu"]["name"]) for e in entries
             if e["verdict"] == "gpus" and e.get("advice")]
    fits_on = smallest or (f"TP{min(needs)[0]}× {min(needs)[2]}" if needs else "no fit")
    pick = report["serving"].get("cheapest")
    cheapest = f"{pick['num_gpus']}× {pick['gpu']} ${pick['usd_per_hour']:,.2f}/h" if pick else None
    return {"serve_weights_gib": round(entries[0]["weights_bytes"] / GIB, 2), "serve_fits_on": fits_on,
            "serve_cheapest": cheapest}


def to_csv(rows: Iterable[dict[str, Any]]) -> str:
    """Rows (from csv_row) as CSV text with a header row. Text is quoted (a bare carriage return would end a row in
    a spreadsheet) and starts with `'` where a spreadsheet would run it as a formula (hfmem.text.csv_cell); numbers
    are written bare, as they are."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else csv_cell(v) for k, v in row.items()})
    return out.getvalue()


def to_markdown(rows: list[dict[str, Any]], filters: list[FitFilter]) -> str:
    """A summary of rows (from csv_row): counts, analysed models largest first, then failures with reasons; every cell
    and line from the rows or the filters escaped for GitHub's markdown (hfmem.text.markdown)."""
    ok = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: (-(r["parameters"] or 0), r["model"]))
    failed = [r for r in rows if r["status"] != "ok"]
    lines = ["# hfmem scan", ""]
    if filters:
        lines += [f"Filtered to models that fit: {', '.join(markdown(f) for f in filters)}.", ""]
    lines += [f"{len(rows)} models: {len(ok)} analysed, {len(failed)} failed.", ""]
    lines += [f"Settings: {markdown(text)}" for text in dict.fromkeys(r["settings"] for r in ok if r["settings"])]
    lines += [""] if any(r["settings"] for r in ok) else []
    if ok:
        lines += ["| model | commit | type | parameters | checkpoint | smallest GPU it fits on, per method | "
                  "GiB per GPU, and where it fits |", "|---|---|---|---:|---:|---|---|"]
        for r in ok:
            lines.append("| " + " | ".join(markdown(x) for x in (
                r["model"], (r["sha"] or "")[:12], r["model_type"] or "", count(r["parameters"]),
                count(r["checkpoint_parameters"]), r["smallest_fit"] or "-", _memory_text(r) or "-")) + " |")
        lines.append("")
    if failed:
        lines += ["## Failures", "", "| model | error | reason |", "|---|---|---|"]
        for r in failed:
            failure = (r["model"], r["error_type"] or "", r["error"] or "")
            lines.append("| " + " | ".join(markdown(x) for x in failure) + " |")
        lines.append("")
    return "\n".join(lines)


def dashboard_data(rows: list[dict[str, Any]], filters: list[FitFilter]) -> dict[str, Any]:
    """Rows (from csv_row) as the scan dashboard's data: columns, one list of values per row, and the summary
    and settings lines shown above the table."""
    failed = sum(r["status"] != "ok" for r in rows)
    summary = [f"{len(rows):,} models: {len(rows) - failed:,} analysed, {failed:,} failed."]
    if filters:
        summary.insert(0, f"Filtered to models that fit: {', '.join(str(f) for f in filters)}.")
    served = any(r.get("serve_fits_on") for r in rows)  # the serving columns only for a scan with --method serve
    trained = [c for c in DASHBOARD_COLUMNS[:-1] if c[0] not in METHOD_COLUMNS
               or any(r[f"{c[0].partition('_')[0]}_gib_per_gpu"] is not None for r in rows)]
    columns = [*trained, *(SERVE_DASHBOARD_COLUMNS if served else ()), *DASHBOARD_COLUMNS[-1:]]
    values = [[_dashboard_value(r, key) for key, _, _ in columns] for r in rows]
    return {"columns": [{"key": key, "label": label, "kind": kind} for key, label, kind in columns],
            "rows": values, "summary": summary,
            "settings": list(dict.fromkeys(r["settings"] for r in rows if r["settings"]))}


def _dashboard_value(row: dict[str, Any], key: str) -> Any:
    """A CSV row's value for a dashboard column; `error` joins the error's type and message."""
    if key == "error":
        return ": ".join(x for x in (row["error_type"], row["error"]) if x) or None
    return row[key]


def _memory_text(row: dict[str, Any]) -> str:
    """E.g. "full 134 GiB: 8× H100 80GB · lora 35.3 GiB: A100 40GB" from a row's method columns."""
    parts = []
    for method in ALL_METHODS:
        gib, fits_on = row.get(f"{method}_gib_per_gpu"), row.get(f"{method}_fits_on")
        if gib is not None:
            parts.append(f"{method} {gib:g} GiB: {fits_on}")
    return " · ".join(parts)


def gpu_key(name: str) -> str:
    """GPU names compare as the catalogue does: case, spaces, dashes and underscores ignored."""
    return re.sub(r"[\s_\-]+", "", name.lower())
