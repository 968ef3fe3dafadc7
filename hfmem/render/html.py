"""One model's report as a self-contained HTML page: the fit grid, memory by term, memory against sequence length
and micro-batch (when the report has `curves`), cost against time (when setups are priced), then the parameters,
assumptions, notes and versions.

Charts are inline SVG (hfmem.render.charts), each followed by a table of its figures; no script, no network.
Every value from outside is escaped (hfmem.render.markup.escape); every figure taken from the report is a
<data> element naming its JSON path.
"""

from __future__ import annotations

from typing import Any

from hfmem import __version__
from hfmem.memory.record import estimates as all_estimates, path
from hfmem.render.charts import (
    CURVE_AXES,
    OVERLAP,
    PHASES,
    TERMS,
    VERDICT_WORDS,
    curve_chart,
    fit_grid_chart,
    frontier,
    frontier_chart,
    method_title,
    priced_setups,
    serving_chart,
    setup_name,
    terms_chart,
    time_src,
)
from hfmem.render.common import (
    ARCH_ROWS,
    MARKS,
    legend,
    napkin_line,
    origin_line,
    paged_hint,
    parameter_count,
    settings_line,
    time_line,
)
from hfmem.render.labels import fit_grid, serving_labels, serving_pick_line, verdict_parts
from hfmem.render.markup import document, escape, number, tag, text
from hfmem.units import GIB


def gib_number(n_bytes: int, src: str | None, digits: int = 1) -> str:
    """Bytes from the report shown in GiB, traced to their JSON path (where there is one)."""
    return number(f"{n_bytes / GIB:,.{digits}f}", n_bytes, src, "GiB")


def term_path(method: str, term: str) -> str:
    """Where a method's estimate's breakdown term is in the report."""
    return f"estimates.{method}.per_gpu_bytes.{term}"


def count_number(n: int, src: str) -> str:
    """A count from the report shown with thousands separators, traced to its JSON path."""
    return number(f"{n:,}", n, src, "count")


def table(caption: str, headers: list[str], rows: list[list[str]], css_class: str = "") -> str:
    """A table of cells that are already markup under plain-text headers; the first column heads each row."""
    head = tag("tr", *(text("th", h, scope="col") for h in headers))
    body = [tag("tr", tag("th", row[0], scope="row"), *(tag("td", c) for c in row[1:])) for row in rows]
    return tag("table", text("caption", caption), tag("thead", head), tag("tbody", *body), class_=css_class or None)


def data_table(caption: str, headers: list[str], rows: list[list[str]], css_class: str = "") -> str:
    """A chart's figures as a table, folded under its caption (the chart's text alternative)."""
    return tag("details", text("summary", f"Table: {caption}"), table(caption, headers, rows, css_class),
               class_="data")


def section(section_id: str, title: str, *parts: str) -> str:
    """A titled part of the page that links can point to (#fit, #terms, #curves ...)."""
    return tag("section", text("h2", title), *parts, id=section_id)


def header(report: dict[str, Any]) -> str:
    """The model, its commit, the parameter total and shape, and the settings every figure assumes."""
    arch, params = report["architecture"], report["parameters"]
    total = number(parameter_count(params), params["total"], "parameters.total", "count")
    shape = f"{arch.get('num_layers')} layers, hidden {arch.get('hidden_size'):,}, {arch.get('attention_kind')}"
    lines = [tag("p", total, " parameters · ", escape(shape), class_="lead")]
    if report.get("sha"):
        lines.insert(0, tag("p", "commit ", text("code", report["sha"]), class_="commit"))
    if report.get("estimates"):
        lines.append(tag("p", "assumes: ", escape(settings_line(report)), class_="assumes"))
        origin = origin_line(report)
        extra = (f"from {origin}" if origin else "", time_line(report))
        lines += [tag("p", escape(line), class_="assumes") for line in extra if line]
    return tag("header", text("h1", report["model"]), *lines)


def messages(report: dict[str, Any]) -> str:
    """Warnings first, then the cross-check against the checkpoint and the model's notes."""
    check = report["crosscheck"]
    items = [tag("li", text("strong", "warning: "), escape(w), class_="warning") for w in report.get("warnings", [])]
    if check["status"] == "exact":
        items.append(text("li", "Meta model and checkpoint headers agree exactly.", class_="ok"))
    elif check["status"] != "unavailable":
        items.append(tag("li", "checkpoint − meta model = ", number(f"{check['difference']:+,}", check["difference"],
                                                                   "crosscheck.difference", "count"),
                         ": ", escape(" ".join(check["explanations"]))))
    items += [text("li", note) for note in report["notes"]]
    return tag("ul", *items, class_="messages") if items else ""


def fit_cell_text(fit: dict[str, Any]) -> str:
    """A fit cell as text: mark, GiB, and the batch room or the change, named in full."""
    kind, _, rest = verdict_parts(fit)
    figure = gib_number(fit["total_bytes"], path(fit, "total_bytes"))
    out = [f"{MARKS[kind]} ", figure, " GiB ", escape(rest)]
    advice = fit.get("advice") or {}
    if kind == "change":
        out.append(tag("span", escape(f"({advice['description']})"), class_="change"))
    elif kind in ("gpus", "none"):
        out.append(tag("span", escape(f"({VERDICT_WORDS[kind]})"), class_="change"))
    return tag("span", *out, class_=f"v-{kind}-text")


def fit_section(report: dict[str, Any], scope: str = "") -> str:
    """The grid, its legend and the same cells in a table; then the largest length and batch that fit."""
    methods, rows = fit_grid(report)
    head = ["GPU (usable GiB)"] + [method_title(m) for m in methods]
    cells = [[escape(f"{name} ({usable:g})")] + [fit_cell_text(by[m]) if m in by else "-"
                                                  for m in methods] for name, usable, by in rows]
    limits = [[escape(name)] + [limit_text(by[m]) if m in by else "-" for m in methods]
              for name, _, by in rows]
    caption = " · ".join(x for x in (legend(), paged_hint(report)) if x)
    figure = tag("figure", fit_grid_chart(report, scope), text("figcaption", caption))
    return section(f"{scope}fit", "Fit per GPU", figure,
                   data_table("the fit grid in text: GiB per GPU as asked, and the batch room or the change that "
                              "makes it fit", head, cells, "fit-table"),
                   data_table("largest micro-batch (at the set sequence length) and sequence length (at the set "
                              "micro-batch) that fit as asked", ["GPU"] + [method_title(m) for m in methods], limits))


def serving_section(report: dict[str, Any], scope: str = "") -> str:
    """The serving column (--method serve): each GPU's verdict and figures, the cheapest pick, and concurrency
    against context when the report has its curves; absent without one."""
    serving = report.get("serving")
    if not serving:
        return ""
    labels = serving_labels(report, MARKS)
    rows = []
    for k, c in enumerate(serving["cells"]):
        src = f"serving.cells.{k}"
        rows.append([escape(c["gpu"]), tag("span", escape(labels[c["gpu"]]), class_=f"v-{c['verdict']}-text"),
                     gib_number(c["weights_bytes"], f"{src}.weights_bytes"),
                     gib_number(c["kv_bytes"], f"{src}.kv_bytes"),
                     count_number(c["kv_tokens"], f"{src}.kv_tokens"),
                     number(f"{c['concurrency_at_context']:,.2f}", c["concurrency_at_context"],
                            f"{src}.concurrency_at_context", "requests"),
                     count_number(c["context_at_concurrency"], f"{src}.context_at_concurrency")])
    s = serving["settings"]
    head = ["GPU", "verdict", "weights GiB", "KV pool GiB", "KV tokens", f"requests at {s['context']:,}",
            f"context for {s['concurrency']:,} request" + ("s" if s["concurrency"] > 1 else "")]
    parts = [table(f"Serving with {serving['engine']['name']} {serving['engine']['version']}, one replica per GPU "
                   f"(TP{s['tp']})", head, rows, "serving-table")]
    if line := serving_pick_line(report):
        parts.append(text("p", line, class_="assumes"))
    curves = serving.get("curves")
    if curves:
        points = [[count_number(c, f"serving.curves.contexts.{k}")]
                  + [number(f"{series[k]:,.2f}", series[k], f"serving.curves.concurrency.{i}.{k}", "requests")
                     for i, series in enumerate(curves["concurrency"])] for k, c in enumerate(curves["contexts"])]
        parts += [tag("figure", serving_chart(report, scope)),
                  data_table("requests one replica holds at each context, per GPU", ["context", *curves["gpus"]],
                             points)]
    return section(f"{scope}serving", "Serving", *parts)


def limit_text(fit: dict[str, Any]) -> str:
    """The largest micro-batch and sequence length a fit cell found, as text."""
    batch = number(f"{fit['max_micro_batch_size']:,}", fit["max_micro_batch_size"], path(fit, "max_micro_batch_size"),
                   "count")
    seq = number(f"{fit['max_seq_len']:,}", fit["max_seq_len"], path(fit, "max_seq_len"), "count")
    capped = " (the model's maximum)" if fit["max_seq_len_capped"] else ""
    return tag("span", "batch ≤ ", batch, " · seq ≤ ", seq, escape(capped))


def terms_section(report: dict[str, Any], scope: str = "") -> str:
    """The stacked bars and every term of each estimate in GiB."""
    estimates = all_estimates(report)
    names = dict(TERMS) | {OVERLAP: "minus: not alive at the peak (overlap)", "total": "total",
                           "required": "must stay resident (the fit compares this)",
                           "paged_optimizer": "of which paged optimizer states"}
    names |= {phase: f"{words} (the total where it needs more)" for phase, words in PHASES}
    keys = [t for t, _ in TERMS] + [OVERLAP, *(p for p, _ in PHASES), "total", "required", "paged_optimizer"]
    rows = [[escape(names[k])] + [gib_number(e["per_gpu_bytes"][k], term_path(e["method"], k), 2)
                                  for e in estimates]
            for k in keys if any(e["per_gpu_bytes"][k] for e in estimates) or k in ("total", "required")]
    rows.append([escape("trainable parameters")] + [count_number(e["parameters"]["trainable"],
                                                                 f"estimates.{e['method']}.parameters.trainable")
                                                    for e in estimates])
    caption = napkin_line(report) if report.get("fit") else ""
    figure = tag("figure", terms_chart(report, scope), text("figcaption", caption))
    return section(f"{scope}terms", "Memory per GPU by term", figure,
                   data_table("memory per GPU by term (GiB) for each method's estimate",
                              ["term"] + [method_title(e["method"]) for e in estimates], rows))


def curves_section(report: dict[str, Any], scope: str = "") -> str:
    """Both curves and their points; absent when the report was built without curves."""
    if not report.get("curves"):
        return ""
    parts = []
    for axis, (label, fixed_key, fixed_name) in CURVE_AXES.items():
        curve = report["curves"][axis]
        methods = list(curve["required_bytes"])
        rows = [[number(f"{p:,}", p, f"curves.{axis}.points.{k}", "count")]
                + [gib_number(curve["required_bytes"][m][k], f"curves.{axis}.required_bytes.{m}.{k}", 2)
                   for m in methods] for k, p in enumerate(curve["points"])]
        parts += [tag("figure", curve_chart(report, axis, scope)),
                  data_table(f"GiB one GPU must hold against {label} ({fixed_name} {curve[fixed_key]:,})",
                             [label] + [method_title(m) for m in methods], rows)]
    return section(f"{scope}curves", "Memory against sequence length and micro-batch", *parts)


def frontier_section(report: dict[str, Any], scope: str = "") -> str:
    """Cost against time of the priced setups and their figures; absent without --tokens and --price."""
    setups = priced_setups(report)
    if not setups:
        return ""
    best = frontier(setups)
    rows = [[escape(setup_name(setup))]
            + [number(f"{setup['time'][f]:,.{d}f}", setup["time"][f], time_src(where, f), unit)
               for f, d, unit in (("tokens_per_s", 1, "tokens/s"), ("hours", 1, "h"), ("gpu_hours", 1, "GPU-h"),
                                  ("cost_usd", 2, "USD"))]
            + [escape(f"yes ({best.index(k) + 1})" if k in best else "no")]
            for k, (where, setup) in enumerate(setups)]
    head = ["setup", "tokens/s", "wall hours", "GPU-hours", "USD", "on the frontier"]
    return section(f"{scope}frontier", "Cost against time", tag("figure", frontier_chart(report, scope)),
                   data_table("every priced setup, fastest first: throughput, hours and cost for the token budget",
                              head, rows))


def parameters_section(report: dict[str, Any], scope: str = "") -> str:
    """The architecture that decides memory and the exact parameter count by component."""
    arch, params = report["architecture"], report["parameters"]
    arch_rows = [[escape(label), escape(f"{arch[key]:,}" if type(arch[key]) is int else arch[key])]
                 for key, label in ARCH_ROWS if arch.get(key) not in (None, 0)]
    param_rows = [[escape(c), count_number(n, f"parameters.by_component.{c}")]
                  for c, n in params["by_component"].items()]
    param_rows.append(["total", count_number(params["total"], "parameters.total")])
    if params.get("checkpoint_total") is not None:
        param_rows.append(["checkpoint", count_number(params["checkpoint_total"], "parameters.checkpoint_total")])
        param_rows += [[escape(f"checkpoint {d}"), count_number(n, f"parameters.by_dtype.{d}")]
                       for d, n in params["by_dtype"].items()]
    if params.get("tied"):
        param_rows.append(["tied", escape(", ".join(f"{a} = {b}" for a, b in params["tied"]))])
    return section(f"{scope}parameters", "Architecture and parameters",
                   tag("div", table("Architecture", ["", "value"], arch_rows),
                       table("Parameters by component", ["component", "parameters"], param_rows), class_="pair"))


def flat(prefix: str, value: Any) -> list[tuple[str, Any]]:
    """A nested assumptions dict as (dotted key, leaf) pairs."""
    if isinstance(value, dict):
        return [pair for key, inner in value.items() for pair in flat(f"{prefix}.{key}" if prefix else key, inner)]
    return [(prefix, value)]


def shown(value: Any) -> str:
    """An assumption's value in words: "-" for none, yes/no, lists joined."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "-"
    return str(value)


def assumptions_section(report: dict[str, Any], scope: str = "") -> str:
    """Every assumption of each method's estimate, and the estimates' notes (a note shared by all, once)."""
    estimates = all_estimates(report)
    by_method = [dict(flat("", e["assumptions"])) for e in estimates]
    keys = list(dict.fromkeys(k for d in by_method for k in d))
    rows = [[escape(k)] + [escape(shown(d.get(k))) for d in by_method] for k in keys]
    notes: dict[str, list[str]] = {}
    for e in estimates:
        for note in e["notes"]:
            notes.setdefault(note, []).append(method_title(e["method"]))
    items = [tag("li", *(() if len(who) == len(estimates) else (text("strong", ", ".join(who) + ": "),)), escape(note))
             for note, who in notes.items()]
    head = ["setting"] + [method_title(e["method"]) for e in estimates]
    return section(f"{scope}assumptions", "Assumptions and notes",
                   table("What each method's estimate assumes", head, rows, "assumptions"),
                   tag("ul", *items, class_="notes") if items else "")


def footer(report: dict[str, Any]) -> str:
    """Where the figures come from: hfmem's version, the JSON schema, the model's source and revision."""
    items = [("hfmem", __version__), ("JSON schema", report.get("schema_version")), ("source", report.get("source")),
             ("revision", report.get("revision") or "-"), ("commit", report.get("sha") or "-")]
    return tag("footer", text("h2", "Versions"),
               tag("dl", *(text("dt", k) + text("dd", v) for k, v in items)),
               text("p", f"Made by hfmem {__version__}: a single file with no scripts and no network access; "
                         "every figure equals the report's JSON (hfmem MODEL --format json).", class_="made-by"))


def article(report: dict[str, Any], scope: str = "") -> list[str]:
    """One report's parts, in page order; `scope` prefixes every id, so several reports can share a page."""
    body = [header(report), messages(report)]
    if report.get("fit"):
        body += [fit_section(report, scope), serving_section(report, scope)]
    if report.get("estimates"):
        body += [terms_section(report, scope), curves_section(report, scope)]
    if report.get("fit"):
        body.append(frontier_section(report, scope))
    body.append(parameters_section(report, scope))
    if report.get("estimates"):
        body.append(assumptions_section(report, scope))
    body.append(footer(report))
    return body


def render(report: dict[str, Any]) -> str:
    """The whole page for a report dict (`with_estimates(..., curves=True)` adds the curve charts)."""
    return document(f"hfmem · {report['model']}", tag("main", *article(report)))


def render_all(title: str, entries: list[tuple[str, dict[str, Any] | None, str | None]]) -> str:
    """One page for several (label, report, error) entries: a list linking each report, or giving its error, then
    each report as an article whose ids start with `r{n}-`."""
    items = [tag("li", tag("a", escape(label), href=f"#r{n}") if report is not None
                 else tag("span", escape(label), ": ", escape(error or "not analysed"), class_="warning"))
             for n, (label, report, error) in enumerate(entries, 1)]
    nav = tag("nav", text("h1", title), tag("ul", *items, class_="messages"))
    articles = [tag("article", *article(report, f"r{n}-"), id=f"r{n}")
                for n, (_, report, _) in enumerate(entries, 1) if report is not None]
    return document(title, tag("main", nav, *articles))
