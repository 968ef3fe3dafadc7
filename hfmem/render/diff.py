"""Base vs head markdown for one config.json changed in a pull request: what the architecture change costs.

Rows: the architecture fields that changed, the exact parameter count, peak memory per training
method, and every (method, GPU) whose fit verdict changed. Everything from the pull request (paths,
error texts) goes through `render.markdown.escape`.
"""

from __future__ import annotations

from typing import Any

from hfmem.memory.record import cells, serving_cells
from hfmem.memory.settings import SERVE
from hfmem.render.common import ARCH_ROWS, EMOJI
from hfmem.render.labels import advice_text
from hfmem.render.markdown import escape, table
from hfmem.serving.report import words
from hfmem.units import count, gib

MAX_CELL = 200  # characters of untrusted text per cell, before escaping


def cell(text: Any, limit: int = MAX_CELL) -> str:
    """Escaped, one-line, and cut to `limit` characters so one hostile value cannot fill a comment."""
    flat = " ".join(str(text).split())
    return escape(flat if len(flat) <= limit else flat[:limit - 1] + "…")


def memory_by_method(report: dict[str, Any] | None,
                     entries: dict[tuple[str, str], dict[str, Any]] | None = None) -> dict[str, int]:
    """Peak bytes per GPU of each estimated method: `estimates.METHOD.per_gpu_bytes.total`, else the fit's one-GPU
    total (from `entries`, the report's `fit_entries` where the caller has decoded them already)."""
    found: dict[str, int] = {}
    for entry in (fit_entries(report) if entries is None else entries).values():
        total = entry.get("total_bytes")
        if isinstance(total, int):
            found.setdefault(entry["method"], total)
    for estimate in ((report or {}).get("estimates") or {}).values():
        total = (estimate.get("per_gpu_bytes") or {}).get("total") if isinstance(estimate, dict) else None
        if isinstance(estimate.get("method"), str) and isinstance(total, int):
            found[estimate["method"]] = total
    return found


def gpu_name(entry: dict[str, Any]) -> str:
    gpu = entry.get("gpu")
    return str(gpu.get("name") if isinstance(gpu, dict) else gpu)


def fit_entries(report: dict[str, Any] | None,
                found: list[dict[str, Any]] | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    """(method, GPU name) -> the report's fit cell in full (hfmem.memory.record `cells`; `found`: those cells where
    the caller has decoded them already)."""
    if found is None:
        found = cells(report) if report is not None and isinstance(report.get("fit"), list) else []
        found += serving_cells(report) if report is not None else []
    by_key = {}
    for entry in found:
        if isinstance(entry, dict) and isinstance(entry.get("method"), str) and entry.get("gpu"):
            by_key[(entry["method"], gpu_name(entry))] = entry
    return by_key


def fits(entry: dict[str, Any] | None) -> bool | None:
    """Whether the settings as given train on one GPU (None: not estimated)."""
    return None if entry is None else entry.get("fits") is True


def verdict(entry: dict[str, Any] | None) -> str:
    """A short cell: the verdict's mark (render.common.EMOJI) and, where it does not fit as set, what would."""
    if entry is None:
        return "—"
    if entry.get("method") == SERVE:  # the serving column: its words say the pool and concurrency too
        return f"{EMOJI[entry['verdict']]} {cell(words(entry, entry['context']), 40)}".rstrip()
    if fits(entry):
        return EMOJI["fits"]
    advice = advice_text(entry)
    return f"{EMOJI[entry['verdict']]} {cell(advice, 40)}" if advice else EMOJI["none"]


def regressions(base: dict[str, Any] | None, head: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(method, GPU) pairs that fit one GPU at the base commit and no longer do at head."""
    before, after = fit_entries(base), fit_entries(head)
    return [key for key, entry in before.items() if fits(entry) and fits(after.get(key)) is False]


def _signed(delta: float, unit: Any) -> str:
    return ("+" if delta > 0 else "−" if delta < 0 else "±") + unit(abs(delta))


def _change(before: float | None, after: float | None, unit: Any) -> str:
    if before is None or after is None:
        return ""
    percent = f" ({(after - before) / before:+.1%})" if before else ""
    return _signed(after - before, unit) + percent if after != before else "unchanged"


def render_diff(path: str, status: str, base: dict[str, Any] | None, head: dict[str, Any] | None,
                base_error: str | None = None, head_error: str | None = None) -> str:
    """A heading and a base | head | change table for one changed config file."""
    label = {"added": "new file", "modified": "changed"}.get(status, status)
    out = [f"#### {cell(path)} ({label})", ""]
    if base_error or head_error:
        rows = [[side, cell(err)] for side, err in (("base", base_error), ("head", head_error)) if err]
        out += [table(["version", "error"], rows), ""]
    if head is None:
        return "\n".join(out)
    rows = []
    base_arch, head_arch = (base or {}).get("architecture") or {}, head.get("architecture") or {}
    for key, name in ARCH_ROWS:
        before, after = base_arch.get(key), head_arch.get(key)
        if base is not None and before != after:
            numeric = all(isinstance(v, int) and not isinstance(v, bool) for v in (before, after))
            shown = [f"{v:,}" if numeric else cell(v) for v in (before, after)]
            rows.append([name, *shown, _change(before, after, lambda n: f"{n:,}") if numeric else ""])
    base_total = base["parameters"]["total"] if base else None
    head_total = head["parameters"]["total"]
    rows.append(["**parameters**", count(base_total), f"**{count(head_total)}**",
                 _change(base_total, head_total, count)])
    base_memory, head_memory = memory_by_method(base), memory_by_method(head)
    for method in dict.fromkeys([*head_memory, *base_memory]):
        before, after = base_memory.get(method), head_memory.get(method)
        rows.append([f"memory, {cell(method)}", gib(before), gib(after), _change(before, after, gib)])
    before_fit, after_fit = fit_entries(base), fit_entries(head)
    changed = [key for key in after_fit if base is not None and verdict(before_fit.get(key)) != verdict(after_fit[key])]
    for method, gpu in changed:
        was, now = fits(before_fit.get((method, gpu))), fits(after_fit[(method, gpu)])
        note = "**no longer fits**" if was and not now else "now fits" if now and was is False else ""
        rows.append([f"{cell(method)} on {cell(gpu)}", verdict(before_fit.get((method, gpu))),
                     verdict(after_fit[(method, gpu)]), note])
    if base is not None and after_fit and not changed:
        rows.append(["fit", "", "", "unchanged on every GPU"])
    out += [table(["", "base", "head", "change"], rows), ""]
    return "\n".join(out)
