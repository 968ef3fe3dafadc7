"""Turn scan records (JSONL) into a CSV table or a markdown summary, optionally filtered by fit.

Filters work on the record shape `hfmem/scan.py` writes; `--fits METHOD:GPU` keeps models whose
report has a `fit[]` entry with that method and GPU and `"fits": true` (see `fit_entries`).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from typing import Any, Iterable

from hfmem import errors
from hfmem.scan import record_key
from hfmem.units import count

_FIT = re.compile(r"^([a-z0-9][a-z0-9._+-]*):([a-z0-9][a-z0-9._+-]*)$")

CSV_COLUMNS = ("model", "status", "repo_id", "revision", "sha", "model_type", "model_class", "parameters",
               "checkpoint_parameters", "checkpoint_bytes", "crosscheck", "fits", "error_type", "error",
               "settings_digest")


@dataclass(frozen=True)
class FitFilter:
    """`--fits METHOD:GPU`, e.g. qlora:rtx4090 (compared case-insensitively)."""

    method: str
    gpu: str

    def __str__(self) -> str:
        return f"{self.method}:{self.gpu}"


def parse_fit_filter(text: str) -> FitFilter:
    """`qlora:rtx4090` -> FitFilter; anything else is a one-line input error."""
    match = _FIT.match(text.strip().lower())
    if not match:
        raise errors.InvalidInputError(f"--fits {text!r}: expected METHOD:GPU, e.g. qlora:rtx4090.")
    return FitFilter(match[1], match[2])


def fit_entries(record: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(method, gpu, fits) for each entry of the record's `report.fit[]`.

    Assumed entry shape (the memory model's): {"method": "qlora", "gpu": "rtx4090", "fits": true, ...};
    entries missing any of these are ignored, so records from before `fit[]` existed match nothing.
    """
    report = record.get("report") or {}
    entries = report.get("fit") or []
    found = []
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("method"), str) and isinstance(entry.get("gpu"), str):
            found.append((entry["method"].lower(), entry["gpu"].lower(), entry.get("fits") is True))
    return found


def matches_fits(record: dict[str, Any], filters: Iterable[FitFilter]) -> bool:
    """True when every filter names a method and GPU the model fits (a failed model fits nothing)."""
    fitting = {(method, gpu) for method, gpu, fits in fit_entries(record) if fits}
    return all((f.method, f.gpu) in fitting for f in filters)


def latest(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per (model, settings digest), the last one written, in first-seen order."""
    by_key: dict[tuple[str, str], dict[str, Any]] = {}
    for record in records:
        by_key[record_key(record)] = record
    return list(by_key.values())


def select(records: Iterable[dict[str, Any]], filters: list[FitFilter]) -> list[dict[str, Any]]:
    """The records an export shows: deduplicated, and with filters only models that fit all of them."""
    unique = latest(records)
    return [r for r in unique if matches_fits(r, filters)] if filters else unique


def csv_row(record: dict[str, Any]) -> dict[str, Any]:
    """One flat CSV row per record; missing values are empty cells."""
    report = record.get("report") or {}
    arch = report.get("architecture") or {}
    params = report.get("parameters") or {}
    error = record.get("error") or {}
    return {
        "model": record["model"], "status": record.get("status"), "repo_id": record.get("repo_id"),
        "revision": record.get("revision"), "sha": record.get("sha"), "model_type": arch.get("model_type"),
        "model_class": arch.get("model_class"), "parameters": params.get("total"),
        "checkpoint_parameters": params.get("checkpoint_total"), "checkpoint_bytes": params.get("checkpoint_bytes"),
        "crosscheck": (report.get("crosscheck") or {}).get("status"), "fits": _fits_text(record),
        "error_type": error.get("type"), "error": error.get("message"), "settings_digest": record["settings_digest"],
    }


def to_csv(records: Iterable[dict[str, Any]]) -> str:
    """The records as CSV text with a header row."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow({k: "" if v is None else v for k, v in csv_row(record).items()})
    return out.getvalue()


def to_markdown(records: list[dict[str, Any]], filters: list[FitFilter]) -> str:
    """A summary: counts, analysed models by size, then failures with their reasons."""
    ok = sorted((r for r in records if r.get("status") == "ok"),
                key=lambda r: (-((r["report"].get("parameters") or {}).get("total") or 0), r["model"]))
    failed = [r for r in records if r.get("status") != "ok"]
    lines = ["# hfmem scan", ""]
    if filters:
        lines += [f"Filtered to models that fit: {', '.join(f'`{f}`' for f in filters)}.", ""]
    lines += [f"{len(records)} models: {len(ok)} analysed, {len(failed)} failed.", ""]
    if ok:
        lines += ["| model | commit | type | parameters | checkpoint | fits |", "|---|---|---|---:|---:|---|"]
        for r in ok:
            row = csv_row(r)
            lines.append("| " + " | ".join(_md(x) for x in (
                row["model"], (row["sha"] or "")[:12], row["model_type"] or "", count(row["parameters"]),
                count(row["checkpoint_parameters"]), row["fits"] or "-")) + " |")
        lines.append("")
    if failed:
        lines += ["## Failures", "", "| model | error | reason |", "|---|---|---|"]
        for r in failed:
            error = r.get("error") or {}
            lines.append(f"| {_md(r['model'])} | {_md(error.get('type', ''))} | {_md(error.get('message', ''))} |")
        lines.append("")
    return "\n".join(lines)


def _fits_text(record: dict[str, Any]) -> str:
    return " ".join(f"{method}:{gpu}" for method, gpu, fits in fit_entries(record) if fits)


def _md(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")
