"""The report's charts as SVG, drawn from the report dict: the fit grid, memory by term, memory against sequence
length and against micro-batch, and cost against time where setups are priced; inline in the HTML report, or each as
a file of its own (`chart_files`).

Every mark that stands for a figure carries the figure's JSON path and value (`data-src`, `data-value`), so what is
drawn can be traced to, and checked against, the JSON.
"""

from __future__ import annotations

from typing import Any

from hfmem.memory.record import cells, estimates as all_estimates, path, pick
from hfmem.render.common import MARKS, METHOD_TITLES, setup_text
from hfmem.render.labels import advice_text, fit_grid, verdict_parts
from hfmem.render.markup import escape, tag, text
from hfmem.render.svg import Scale, chart, frame, legend, reference_lines, standalone, x_axis, y_axis
from hfmem.units import GIB

TERMS = (
    ("weights", "weights"), ("gradients", "gradients"), ("optimizer", "optimizer states + fp32 master"),
    ("sharding_buffers", "sharding buffers"), ("activations", "activations"),
    ("optimizer_step_transient", "optimizer step transient"), ("autocast_weight_copies", "autocast weight copies"),
    ("quantized_weight_copies", "FP8/FP4 weight copies"), ("scaling_state", "FP8 amax history and scales"),
    ("overhead", "fragmentation + CUDA context + NCCL buffers"),
)
"""The per_gpu_bytes terms stacked in a bar, bottom up; their sum less the overlap is the training step's total,
and `total` is the largest of that and the other phases' (hfmem.memory.breakdown)."""
OVERLAP = "gradient_activation_overlap"
PHASES = (("load", "loading the model"), ("evaluation", "an evaluation forward"), ("generation", "generating samples"),
          ("save", "saving a full checkpoint"))
"""The per_gpu_bytes figures of the phases beside the training step, drawn as a mark where one needs more."""
VERDICT_WORDS = {"fits": "fits as asked", "change": "fits one GPU with a change",
                 "gpus": "needs several GPUs", "none": "no fit found"}
CURVE_AXES = {"seq_len": ("sequence length (tokens)", "micro_batch_size", "micro-batch"),
              "micro_batch_size": ("micro-batch size", "seq_len", "sequence length")}
"""Per curve: its x-axis label, and the setting held fixed along it with its name."""


def method_title(method: str) -> str:
    """"full" -> "full fine-tune": the name every table heads a method's column with."""
    return METHOD_TITLES.get(method, method)


def gpu_limits(report: dict[str, Any]) -> list[tuple[str, float]]:
    """Each fitted GPU once, with its usable GiB, largest first; GPUs of the same usable memory share one line."""
    by_usable: dict[float, list[str]] = {}
    for name, usable, _ in fit_grid(report)[1]:
        by_usable.setdefault(usable, []).append(name)
    return [(f"{', '.join(names)} · {usable:g}", usable) for usable, names in sorted(by_usable.items(), reverse=True)]


MARK_UNITS = {"GiB": "{:,.2f} GiB", "USD": "${:,.2f}", "h": "{:,.2f} h", "requests": "{:,.2f} requests"}
"""How a drawn mark's hover title writes its figure, by the unit it is drawn in (bytes are drawn in GiB)."""


def figure_attrs(src: str, value: float, unit: str = "GiB") -> dict[str, Any]:
    """The attributes that tie a drawn mark to its figure in the JSON (and the MARK_UNITS unit its title gives)."""
    return {"data_src": src, "data_value": repr(value), "data_mark": None if unit == "GiB" else unit}


def mark_text(value: float, unit: str) -> str:
    """A drawn mark's figure as its hover title writes it: bytes in GiB, dollars, hours."""
    return MARK_UNITS[unit].format(value / GIB if unit == "GiB" else value)


def cell_title(fit: dict[str, Any], gpu: str, usable: float) -> str:
    """A fit cell in words, for hover and screen readers: what it needs, the verdict, and the change by name."""
    kind, total, _ = verdict_parts(fit)
    head = (f"{method_title(fit['method'])} on {gpu} ({usable:g} GiB usable): {total} GiB per GPU on "
            f"{setup_text(fit)}; {VERDICT_WORDS[kind]}")
    if kind == "fits":
        return f"{head}, micro-batch up to {fit['max_micro_batch_size']:,}, sequence up to {fit['max_seq_len']:,}"
    label, advice = advice_text(fit), fit.get("advice") or {}
    if advice.get("kind") == "change":
        return f"{head}: {label} GiB, {advice['description']}"
    return f"{head}: {label}" if label else head


def fit_grid_chart(report: dict[str, Any], scope: str = "") -> str:
    """GPU rows by method columns, each cell coloured by its verdict, with the GiB it needs and what follows; `scope`
    prefixes its ids (one page, several reports)."""
    methods, rows = fit_grid(report)
    label_w, col_w, row_h, head_h = 190, 200, 24, 26
    width, height = label_w + col_w * len(methods), head_h + row_h * len(rows) + 2
    parts = [text("text", method_title(m), x=label_w + col_w * c + col_w / 2, y=17, class_="col-head",
                  text_anchor="middle") for c, m in enumerate(methods)]
    for r, (name, usable, by_method) in enumerate(rows):
        y = head_h + r * row_h
        parts.append(text("text", f"{name} · {usable:g} GiB", x=label_w - 8, y=y + 16, class_="row-head",
                          text_anchor="end"))
        for c, method in enumerate(methods):
            fit = by_method.get(method)
            if fit is None:
                continue
            kind, total, rest = verdict_parts(fit)
            src = path(fit, "total_bytes")
            figure = tag("tspan", escape(total), **figure_attrs(src, fit["total_bytes"]), data_unit="GiB")
            x = label_w + col_w * c
            parts.append(tag("g", text("title", cell_title(fit, name, usable)),
                             tag("rect", x=x + 1, y=y + 1, width=col_w - 2, height=row_h - 2, rx=3, class_=f"v-{kind}"),
                             tag("text", f"{MARKS[kind]} ", figure, f" {escape(rest)}", x=x + 8, y=y + 16,
                                 class_="cell-text"),
                             class_="cell", data_verdict=kind))
    counts = {k: sum(verdict_parts(f)[0] == k for _, _, by in rows for f in by.values()) for k in VERDICT_WORDS}
    desc = (f"{len(rows)} GPUs by {len(methods)} methods; cells: "
            + ", ".join(f"{n} {VERDICT_WORDS[k]}" for k, n in counts.items() if n)
            + ". Each cell gives the GiB one GPU needs.")
    return chart(f"{scope}chart-fit", width, height, "Fit per GPU and method", desc, *parts)


def terms_chart(report: dict[str, Any], scope: str = "") -> str:
    """One stacked bar per method of the estimates' per-GPU terms in GiB, the overlap as a strip beside the top of
    the stack down to the training step's total, a mark where loading the model needs more, and each GPU's usable
    memory as a line."""
    estimates = all_estimates(report)
    limits = gpu_limits(report)
    tops = [max(sum(e["per_gpu_bytes"][t] for t, _ in TERMS), *(e["per_gpu_bytes"][p] for p, _ in PHASES)) / GIB
            for e in estimates]
    y = Scale(0, max(tops + [v for _, v in limits] + [1]) * 1.06, 330, 30)
    x0, bar_w, gap = 70, 72, 52
    x1 = x0 + gap + len(estimates) * (bar_w + gap)
    used = [(t, label) for t, label in TERMS if any(e["per_gpu_bytes"][t] for e in estimates)]
    parts = [y_axis(y, x0, x1, "GiB"), reference_lines(limits, y, x0, x1, x1 + 28)]
    for i, est in enumerate(estimates):
        terms, bx = est["per_gpu_bytes"], x0 + gap + i * (bar_w + gap)
        base = 0.0
        for term, label in used:
            value = terms[term] / GIB
            if value:
                parts.append(tag("rect", text("title", f"{method_title(est['method'])}: {label} {value:,.2f} GiB"),
                                 x=bx, y=y(base + value), width=bar_w, height=round(y(base) - y(base + value), 1),
                                 class_=f"t-{term}",
                                 **figure_attrs(f"estimates.{est['method']}.per_gpu_bytes.{term}", terms[term])))
            base += value
        step_bytes = sum(terms[t] for t, _ in TERMS) - terms[OVERLAP]
        total, step = terms["total"] / GIB, step_bytes / GIB
        if terms[OVERLAP]:
            parts.append(tag("rect", text("title", f"{method_title(est['method'])}: {terms[OVERLAP] / GIB:,.2f} GiB "
                                                   "of gradients and activations never alive together"),
                             x=bx + bar_w + 2, y=y(base), width=8, height=round(y(step) - y(base), 1), class_="overlap",
                             **figure_attrs(f"estimates.{est['method']}.per_gpu_bytes.{OVERLAP}", terms[OVERLAP])))
        parts.append(tag("line", x1=bx - 6, x2=bx + bar_w + 12, y1=y(step), y2=y(step), class_="total-mark"))
        for phase, words in PHASES:  # loading before sharding, or evaluating a larger batch, can need more
            if terms[phase] > step_bytes:
                parts.append(tag("line", text("title", f"{method_title(est['method'])}: {words} needs "
                                                       f"{terms[phase] / GIB:,.2f} GiB, more than the training step"),
                                 x1=bx - 6, x2=bx + bar_w + 12, y1=y(terms[phase] / GIB), y2=y(terms[phase] / GIB),
                                 class_="phase-mark",
                                 **figure_attrs(f"estimates.{est['method']}.per_gpu_bytes.{phase}", terms[phase])))
        parts.append(text("text", f"{total:,.1f}", x=bx + bar_w / 2, y=y(max(base, total)) - 6, class_="bar-value",
                          text_anchor="middle"))
        parts.append(text("text", method_title(est["method"]), x=bx + bar_w / 2, y=348, class_="col-head",
                          text_anchor="middle"))
    overlap = "not alive at the peak: the bar's top less this is the training step's total (solid line)"
    entries = [(f"t-{t}", label) for t, label in used] + [("overlap", overlap)]
    parts.append(legend(entries, x0, 372, 700))
    desc = ("Per GPU, in GiB: " + "; ".join(f"{method_title(e['method'])} {e['per_gpu_bytes']['total'] / GIB:,.1f} "
                                            "in total" for e in estimates)
            + ". Dashed lines: each GPU's usable memory.")
    return chart(f"{scope}chart-terms", 800, 410, "Memory per GPU by term", desc, *parts)


def curve_chart(report: dict[str, Any], axis: str, scope: str = "") -> str:
    """Required GiB per method at each point of the report's `curves[axis]`, log-log, with each GPU's limit."""
    curve = report["curves"][axis]
    label, fixed_key, fixed_name = CURVE_AXES[axis]
    points, by_method = curve["points"], curve["required_bytes"]
    limits = gpu_limits(report)
    values = [v / GIB for series in by_method.values() for v in series] + [v for _, v in limits]
    y = Scale(min(values) * 0.85, max(values) * 1.15, 320, 24, base=10)
    lo, hi = (points[0], points[-1]) if len(points) > 1 else (points[0] / 2, points[0] * 2)
    x = Scale(lo, hi, 70, 560, base=2)
    as_set = report["curves"][fixed_key][axis]  # the other curve is drawn at this curve's set value
    parts = [y_axis(y, 70, 560, "GiB"), x_axis(x, 320, 24, label), reference_lines(limits, y, 70, 560, 588),
             tag("line", x1=x(as_set), x2=x(as_set), y1=24, y2=320, class_="as-set"),
             text("text", f"as set: {as_set:,}", x=x(as_set) + 4, y=34, class_="tick")]
    for method, series in by_method.items():
        marks = " ".join(f"{x(p)},{y(v / GIB)}" for p, v in zip(points, series, strict=True))
        dots = [tag("circle", text("title", f"{method_title(method)}: {p:,} → {v / GIB:,.2f} GiB"), cx=x(p),
                    cy=y(v / GIB), r=3, **figure_attrs(f"curves.{axis}.required_bytes.{method}.{k}", v))
                for k, (p, v) in enumerate(zip(points, series, strict=True))]
        parts.append(tag("g", tag("polyline", points=marks), *dots, class_=f"m-{method}"))
    parts.append(legend([(f"m-{m} swatch", method_title(m)) for m in by_method], 70, 372, 480, swatch="line"))
    desc = (f"GiB one GPU must hold against {label}, at {fixed_name} {curve[fixed_key]:,}, for "
            f"{', '.join(method_title(m) for m in by_method)}; both axes logarithmic; dashed lines: each GPU's "
            "usable memory, so a curve crosses a line at the largest value that fits.")
    return chart(f"{scope}chart-{axis}", 800, 392, f"Memory against {label}", desc, *parts)


def priced_setups(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(where its time is in the record, setup) for each fit cell timed and priced for a token budget, and each
    layout on a GPU's cost-against-time frontier (`layout_picks`, with -g), fastest first."""
    timed = [(path(c, "time"), pick(c) | {"gpu": c["gpu"]["name"]}) for c in cells(report)  # the GPU by name
             if isinstance(c.get("time"), dict) and c["time"].get("cost_usd") is not None]
    seen = {(p["method"], p["gpu"], p["num_gpus"], p["time"]["hours"], p["time"]["cost_usd"]) for _, p in timed}
    for i, entry in enumerate(report.get("layout_picks") or []):  # a cell's own setup is drawn once, as the cell
        timed += [(f"layout_picks.{i}.frontier.{j}", {"method": entry["method"], "gpu": entry["gpu"],
                                                      "num_gpus": point["num_gpus"], "layout": point["layout"],
                                                      "time": point})
                  for j, point in enumerate(entry["frontier"])
                  if (entry["method"], entry["gpu"], point["num_gpus"], point["hours"], point["cost_usd"]) not in seen]
    return sorted(timed, key=lambda pair: (pair[1]["time"]["hours"], pair[1]["time"]["cost_usd"]))


def frontier(setups: list[tuple[str, dict[str, Any]]]) -> list[int]:
    """The indices (into `setups`, fastest first) of the setups no other is both as fast and cheaper than."""
    kept: list[int] = []
    for k, (_, setup) in enumerate(setups):
        if not kept or setup["time"]["cost_usd"] < setups[kept[-1]][1]["time"]["cost_usd"]:
            kept.append(k)
    return kept


def setup_name(setup: dict[str, Any]) -> str:
    """"LoRA on 1× H100 80GB": the method, the GPU count and the GPU a setup was timed on; a searched layout in its
    words: "full fine-tune on H100 80GB, 512× FSDP, b1"."""
    if "layout" in setup:
        return f"{method_title(setup['method'])} on {setup['gpu']}, {setup['layout']}"
    return f"{method_title(setup['method'])} on {setup['num_gpus']}× {setup['gpu']}"


def time_src(where: str, field: str) -> str:
    """The JSON path of one figure of a setup's step time or budget, e.g. "fit.4.time.cost_usd"."""
    return f"{where}.{field}"


def frontier_chart(report: dict[str, Any], scope: str = "") -> str:
    """Cost against wall hours of every priced setup, log-log, one dot per method and GPU; the frontier (no setup
    both faster and cheaper) joined and numbered, the numbers named under the chart."""
    setups = priced_setups(report)
    hours = [s["time"]["hours"] for _, s in setups]
    costs = [s["time"]["cost_usd"] for _, s in setups]
    tokens = (report.get("plan") or {}).get("tokens") or setups[0][1]["time"]["tokens"]
    x = Scale(min(hours) / 1.3, max(hours) * 1.3, 70, 560, base=10)
    y = Scale(min(costs) / 1.3, max(costs) * 1.3, 300, 24, base=10)
    best = frontier(setups)
    parts = [y_axis(y, 70, 560, "USD"), x_axis(x, 300, 24, f"wall hours for {tokens:.3g} tokens"),
             tag("polyline", points=" ".join(f"{x(hours[k])},{y(costs[k])}" for k in best), class_="frontier")]
    for k in sorted(range(len(setups)), key=lambda k: k in best):  # the frontier's dots drawn last, on top
        where_src, setup = setups[k]
        t = setup["time"]
        where = f", frontier {best.index(k) + 1}" if k in best else ""
        title = (f"{setup_name(setup)}: {mark_text(t['cost_usd'], 'USD')}, {mark_text(t['hours'], 'h')}, "
                 f"{t['tokens_per_s'] / 1000:,.1f}k tokens/s{where}")
        parts.append(tag("circle", text("title", title), cx=x(t["hours"]), cy=y(t["cost_usd"]), r=5 if where else 3.5,
                         class_=f"m-{setup['method']}" + (" on-frontier" if where else ""),
                         **figure_attrs(time_src(where_src, "cost_usd"), t["cost_usd"], "USD")))
        if where:
            parts.append(text("text", str(best.index(k) + 1), x=x(t["hours"]) + 7, y=y(t["cost_usd"]) - 6,
                              class_="bar-value"))
    methods = {s["method"] for _, s in setups}
    parts.append(legend([(f"m-{m}", method_title(m)) for m in METHOD_TITLES if m in methods], 600, 40, 190))
    named = [f"{n}. {setup_name(setups[k][1])}: {costs[k]:,.0f} USD, {hours[k]:,.1f} h" for n, k in enumerate(best, 1)]
    parts += [text("text", line, x=70, y=352 + 16 * i, class_="legend-label") for i, line in enumerate(named)]
    desc = (f"Cost in USD against wall hours for {tokens:.3g} training tokens, both axes logarithmic, for "
            f"{len(setups)} priced setups; the frontier, where no setup is both faster and cheaper: "
            + "; ".join(named) + ".")
    return chart(f"{scope}chart-frontier", 800, 352 + 16 * len(named), "Cost against time", desc, *parts)


GPU_SERIES = 8
"""Colours of the serving chart's GPU series (charts.css g-0 .. g-7), reused past the eighth GPU."""


def serving_chart(report: dict[str, Any], scope: str = "") -> str:
    """Requests each GPU's serving replica holds against the context per request (the report's `serving.curves`),
    log-log, a line per GPU over the contexts where one request fits; the context asked marked."""
    serving = report["serving"]
    curves, asked = serving["curves"], serving["settings"]["context"]
    contexts = curves["contexts"]
    order = curves["gpus"]
    drawn = {gpu: series for gpu, series in zip(order, curves["concurrency"], strict=True)
             if any(v >= 1 for v in series)}
    values = [v for series in drawn.values() for v in series if v >= 1] or [1.0]
    y = Scale(0.8, max(values) * 1.3, 320, 24, base=10)
    lo, hi = (contexts[0], contexts[-1]) if len(contexts) > 1 else (contexts[0] / 2, contexts[0] * 2)
    x = Scale(lo, hi, 70, 720, base=2)
    parts = [y_axis(y, 70, 720, "requests"), x_axis(x, 320, 24, "context per request (tokens)"),
             tag("line", x1=x(asked), x2=x(asked), y1=24, y2=320, class_="as-set"),
             text("text", f"as set: {asked:,}", x=x(asked) - 4, y=34, text_anchor="end", class_="tick")]
    for gpu, series in drawn.items():
        kept = [(k, c, v) for k, (c, v) in enumerate(zip(contexts, series, strict=True)) if v >= 1]
        dots = [tag("circle", text("title", f"{gpu}: {v:,.2f} requests of {c:,} tokens"), cx=x(c), cy=y(v), r=3,
                    **figure_attrs(f"serving.curves.concurrency.{order.index(gpu)}.{k}", v, "requests"))
                for k, c, v in kept]
        line = " ".join(f"{x(c)},{y(v)}" for _, c, v in kept)
        parts.append(tag("g", tag("polyline", points=line), *dots, class_=f"g-{order.index(gpu) % GPU_SERIES}"))
    parts.append(legend([(f"g-{order.index(g) % GPU_SERIES}", g) for g in drawn], 70, 372, 650, swatch="line"))
    engine = serving["engine"]
    left_out = [g for g in order if g not in drawn]
    desc = (f"Requests one replica holds with {engine['name']} {engine['version']} against the tokens per request, "
            f"both axes logarithmic, per GPU: {', '.join(drawn) or 'none'}"
            + (f"; no request fits on {', '.join(left_out)}" if left_out else "") + ".")
    return chart(f"{scope}chart-serving", 800, 392, "Serving: concurrency against context", desc, *parts)


def report_charts(report: dict[str, Any]) -> dict[str, str]:
    """The charts the report has, by name, in the HTML report's order: the fit grid, memory by term, the curves
    when the report was built with them, and the cost/time frontier when setups are timed and priced."""
    drawn = {"fit": fit_grid_chart(report)} if report.get("fit") else {}
    if report.get("estimates"):
        drawn["terms"] = terms_chart(report)
        if report.get("curves"):
            drawn |= {axis.replace("_", "-"): curve_chart(report, axis) for axis in CURVE_AXES}
    if report.get("fit") and priced_setups(report):
        drawn["frontier"] = frontier_chart(report)
    if (report.get("serving") or {}).get("curves"):
        drawn["serving"] = serving_chart(report)
    return drawn


def chart_files(report: dict[str, Any]) -> dict[str, tuple[str, int, int]]:
    """Each chart as a standalone SVG file's text named after the model it draws, with its width and height, by name
    (`fit`, `terms`, `seq-len`, `micro-batch-size`, `frontier`)."""
    return {name: (standalone(markup, f"hfmem · {report['model']}"), *frame(markup)[1:])
            for name, markup in report_charts(report).items()}
