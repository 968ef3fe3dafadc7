"""Markdown rendering of a report, safe to paste into GitHub: every value from outside is escaped."""

from __future__ import annotations

from typing import Any

from hfmem.render.common import (
    ARCH_ROWS,
    MARKS,
    METHOD_TITLES,
    layout_lines,
    legend,
    origin_line,
    paged_hint,
    parameter_count,
    settings_line,
    time_line,
)
from hfmem.render.labels import (
    fit_grid,
    host_ram_line,
    offload_line,
    rank0_line,
    serving_labels,
    serving_pick_line,
    serving_title,
    verdict_parts,
)
from hfmem.text import markdown as escape
from hfmem.units import count


def table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def render(report: dict[str, Any]) -> str:
    arch, params, check = report["architecture"], report["parameters"], report["crosscheck"]
    title = f"### {escape(report['model'])}" + (f" @ `{report['sha'][:12]}`" if report.get("sha") else "")
    arch_rows = [[label, escape(arch.get(key))] for key, label in ARCH_ROWS if arch.get(key) not in (None, 0)]
    param_rows = [[escape(c), count(n)] for c, n in params["by_component"].items()]
    param_rows.append(["**total**", f"**{parameter_count(params)}**"])
    if params["checkpoint_total"] is not None:
        param_rows.append(["checkpoint", count(params["checkpoint_total"])])
    out = [title, "", table(["architecture", ""], arch_rows), "", table(["component", "parameters"], param_rows), ""]
    if check["status"] == "exact":
        out.append("Meta model and checkpoint headers agree exactly.")
    elif check["status"] != "unavailable":
        out.append(f"Checkpoint − meta model = {check['difference']:+,}: " + escape(" ".join(check["explanations"])))
    out += [f"> **warning:** {escape(w)}" for w in report.get("warnings", [])]
    out += [f"> {escape(note)}" for note in report["notes"]]
    if report.get("fit"):
        out += ["", fit_markdown(report), "", "assumes: " + escape(settings_line(report))]
        if origin := origin_line(report):
            out += ["", "from " + escape(origin)]
        if timing := time_line(report):
            out += ["", escape(timing)]
        if serving := serving_pick_line(report):
            out += ["", escape(serving)]
        out += [line for text in layout_lines(report) for line in ("", escape(text))]
    return "\n".join(out) + "\n"


def fit_markdown(report: dict[str, Any]) -> str:
    """The fit matrix: GiB per GPU with each cell's verdict mark, then the legend."""
    methods, rows = fit_grid(report)
    serving = serving_labels(report, MARKS)
    body = [[f"{escape(name)} ({usable:g} GiB)"]
            + [f"{MARKS[verdict]} {total} " + escape(rest) for verdict, total, rest in
               (verdict_parts(by_method[m]) for m in methods)]
            + ([escape(serving[name])] if serving else []) for name, usable, by_method in rows]
    # they name GPUs, which a user may have named
    named = (host_ram_line(report), offload_line(report), rank0_line(report))
    hints = "".join(f"\n\n{h}" for h in (paged_hint(report), *(escape(n) for n in named if n)) if h)
    heads = [METHOD_TITLES.get(m, m) for m in methods] + ([serving_title(report)] if serving else [])
    return table(["GPU", *heads], body) + "\n" + legend() + hints
