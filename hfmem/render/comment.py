"""The Action's markdown: the pull-request comment and the job summary, from one list of report items.

Sections: base vs head for each changed config file, the fit matrix (one row per model and method,
one column per GPU; a serving row and its cheapest pick where methods name serve), with a token budget or prices
the time and cost of each fitting cell in the same grid and each model's fastest and cheapest setup, then what
could not be analysed. Rows past the first few are folded into `<details>`; if the text still exceeds the budget
(GitHub refuses comments over 65,536 characters), trailing rows are left out with a note. Only fixed text goes
inside HTML tags; every value from outside is escaped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hfmem.memory.record import cells, serving_cells
from hfmem.render.common import EMOJI, legend, parameter_count, time_cell, time_line, wants_time_table
from hfmem.render.diff import cell, fit_entries, memory_by_method, render_diff, verdict
from hfmem.render.labels import serving_pick_line
from hfmem.render.markdown import table
from hfmem.units import count, gib

VISIBLE_DIFFS = 3
VISIBLE_MODELS = 10
LEGEND = legend(EMOJI, batch=False)  # the comment's cells carry no batch size


@dataclass
class Item:
    """One model or config file: its head report (and base report for a changed config) or the errors."""

    label: str
    kind: str  # "model" or "config"
    status: str = "listed"  # configs: added, modified, no-base, outside (see github.pr_configs.ConfigFile)
    head: dict[str, Any] | None = None
    head_error: str | None = None
    base: dict[str, Any] | None = None
    base_error: str | None = None

    @property
    def changed(self) -> bool:
        return self.head is not None and self.status in {"added", "modified"}

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Listed:
    """A model or config with a report, its fit cells decoded once (decoding them is the expensive part of a
    comment): (method, GPU) -> cell, peak bytes per method, and its time line ("" when nothing is timed)."""

    item: Item
    entries: dict[tuple[str, str], dict[str, Any]]
    memory: dict[str, int]
    line: str

    @classmethod
    def of(cls, item: Item) -> Listed:
        head = item.head or {}  # listed items are the ones with a report
        entries = fit_entries(head, cells(head) + serving_cells(head))
        return cls(item, entries, memory_by_method(head, entries), time_line(head))


def columns(listed: list[Listed]) -> tuple[list[str], list[str]]:
    """Methods and GPUs in first-seen order across every report (the fit matrix's rows and columns)."""
    methods: dict[str, None] = {}
    gpus: dict[str, None] = {}
    for model in listed:
        for method in model.memory:
            methods.setdefault(method)
        for method, gpu in model.entries:
            methods.setdefault(method)
            gpus.setdefault(gpu)
    return list(methods), list(gpus)


def matrix_rows(model: Listed, methods: list[str], gpus: list[str]) -> list[list[str]]:
    """One row per method: model and parameters on the first, then peak memory and a verdict per GPU."""
    params = (model.item.head or {}).get("parameters") or {}
    first = [cell(model.item.label), parameter_count(params) if "total" in params else count(None)]
    if not methods:
        return [first]
    rows = []
    for i, method in enumerate(methods):
        verdicts = [verdict(model.entries.get((method, g))) for g in gpus]
        rows.append((first if i == 0 else ["", ""]) + [cell(method), gib(model.memory.get(method))] + verdicts)
    return rows


def time_rows(model: Listed, methods: list[str], gpus: list[str]) -> list[list[str]]:
    """One row per method the model has: its tokens/s, wall time and cost per GPU where it fits (with the change or
    GPUs it is timed on), why not where it cannot be timed, "—" where nothing fits (render.common.time_cell)."""
    rows: list[list[str]] = []
    for method in methods:
        found = [model.entries.get((method, g)) for g in gpus]
        if any(found):
            rows.append([cell(model.item.label) if not rows else "", cell(method)]
                        + [cell(time_cell(e)) if e and time_cell(e) else "—" for e in found])
    return rows


def _fold(summary: str, blocks: list[str]) -> list[str]:
    """`blocks` inside <details>; blank lines around so GitHub renders the markdown within."""
    return ["<details><summary>" + summary + "</summary>", "", *blocks, "", "</details>", ""] if blocks else []


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"


def problem_lines(problems: list[str], shown: int = 20) -> list[str]:
    """The violated fail-on conditions as a list, escaped, the first `shown` of them."""
    if not problems:
        return []
    lines = [f"**❌ fail-on: {_plural(len(problems), 'problem')}**", ""] + [f"- {cell(p)}" for p in problems[:shown]]
    return lines + ([f"- and {len(problems) - shown} more"] if len(problems) > shown else []) + [""]


def render(items: list[Item], settings: str, budget: int, header: str = "", footer: str = "",
           problems: list[str] | None = None) -> str:
    """The whole markdown, at most `budget` characters: as many items as fit, in section order."""
    diffs = [i for i in items if i.changed]
    listed = [Listed.of(i) for i in items if i.head is not None]
    failed = [i for i in items if i.head is None]
    units = len(diffs) + len(listed) + len(failed)
    # Every piece is rendered once; the search below only chooses how many of them to show.
    blocks = [render_diff(i.label, i.status, i.base, i.head, i.base_error, i.head_error) for i in diffs]
    methods, gpus = columns(listed)
    matrix = [matrix_rows(m, methods, gpus) for m in listed]
    grids = [time_rows(m, methods, gpus) if m.line and wants_time_table(m.item.head or {}) else None for m in listed]
    errors = [[cell(i.label), cell(i.head_error or "not analysed")] for i in failed]

    def build(keep: int) -> str:
        shown_diffs = blocks[:keep]
        n_listed = max(0, keep - len(diffs))
        shown_failed = errors[:max(0, keep - len(diffs) - len(listed))]
        out = [*([header] if header else []), "## hfmem: will it train?", "", settings, "",
               *problem_lines(problems or [])]
        if diffs:
            out += [f"### Config changes in this pull request ({len(diffs)})", ""]
            out += shown_diffs[:VISIBLE_DIFFS]
            out += _fold(_plural(len(shown_diffs) - VISIBLE_DIFFS, 'more changed config'), shown_diffs[VISIBLE_DIFFS:])
        if listed:
            per_method = ["method", "peak memory / GPU", *(cell(g) for g in gpus)] if methods else []
            headers = ["model", "parameters", *per_method]
            rows = matrix[:n_listed]
            visible = [r for group in rows[:VISIBLE_MODELS] for r in group]
            folded = [r for group in rows[VISIBLE_MODELS:] for r in group]
            out += [f"### Fit matrix ({_plural(len(listed), 'model')})", ""]
            out += [table(headers, visible), ""] if visible else []
            out += _fold(_plural(len(rows) - VISIBLE_MODELS, "more model"), [table(headers, folded)] if folded else [])
            out += [LEGEND, ""] if methods else []
            served = [(m, serving_pick_line(m.item.head or {})) for m in listed[:n_listed]]
            out += [f"- **{cell(m.item.label)}**: {cell(line)}" for m, line in served if line]
            out += [""] if any(line for _, line in served) else []
            timed = [m for m in listed[:n_listed] if m.line]
            if timed:  # the CLI's time table and line per model: each fitting cell, the fastest and the cheapest
                out += ["### Time and cost", ""]
                shown_grids = [g for g in grids[:n_listed] if g is not None]
                shown = [r for group in shown_grids[:VISIBLE_MODELS] for r in group]
                more = [r for group in shown_grids[VISIBLE_MODELS:] for r in group]
                heads = ["model", "method"] + [cell(g) for g in gpus]
                out += [table(heads, shown), ""] if shown else []
                out += _fold(_plural(len(shown_grids) - VISIBLE_MODELS, "more timed model"),
                             [table(heads, more)] if more else [])
                out += [f"- **{cell(m.item.label)}**: {cell(m.line)}" for m in timed] + [""]
        if failed:
            out += [f"### Could not analyse ({len(failed)})", ""]
            out += [table(["model or file", "error"], shown_failed), ""] if shown_failed else []
        if keep < units:
            out += [f"_{_plural(units - keep, 'more entry')} left out to stay under GitHub's size limit; "
                    "the JSON report has them all._", ""]
        if footer:
            out += [footer, ""]
        return "\n".join(out)

    low, high = 0, units
    while low < high:  # the largest number of items whose rendering fits the budget
        mid = (low + high + 1) // 2
        low, high = (mid, high) if len(build(mid)) <= budget else (low, mid - 1)
    return build(low)
