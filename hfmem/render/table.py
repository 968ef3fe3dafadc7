"""Rich terminal rendering of a report: architecture, parameters, cross-check, and the fit matrix."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from hfmem.memory.record import estimates
from hfmem.render.charts import PHASES
from hfmem.render.common import (
    ARCH_ROWS,
    MARKS,
    METHOD_TITLES,
    layout_lines,
    legend,
    napkin_line,
    origin_line,
    paged_hint,
    parameter_count,
    settings_line,
    time_cell,
    time_line,
    wants_time_table,
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
from hfmem.units import count, gib, size


def architecture_table(report: dict[str, Any]) -> Table:
    arch = report["architecture"]
    table = Table(title="Architecture", show_header=False, title_justify="left", box=None, pad_edge=False)
    table.add_column(style="dim")
    table.add_column()
    for key, label in ARCH_ROWS:
        value = arch.get(key)
        optional = {"num_experts", "experts_per_token", "moe_intermediate_size", "sliding_window"}
        if value in (None, 0) and key in optional:
            continue
        table.add_row(label, f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value))
    if len(arch.get("layer_types") or {}) > 1:
        table.add_row("layer kinds", ", ".join(f"{n}× {k}" for k, n in arch["layer_types"].items()))
    if arch.get("mla"):
        table.add_row("MLA ranks", ", ".join(f"{k}={v}" for k, v in arch["mla"].items()))
    return table


def parameters_table(report: dict[str, Any]) -> Table:
    params = report["parameters"]
    table = Table(title="Parameters", title_justify="left", box=None, pad_edge=False)
    table.add_column("component", style="dim")
    table.add_column("parameters", justify="right")
    for component, n in params["by_component"].items():
        table.add_row(component, count(n))
    table.add_row(Text("total", style="bold"), Text(parameter_count(params), style="bold"))
    if params["checkpoint_total"] is not None:
        dtypes = ", ".join(f"{d} {count(n)}" for d, n in params["by_dtype"].items())
        table.add_row("checkpoint", f"{count(params['checkpoint_total'])} in {params['checkpoint_files']} file(s)")
        table.add_row("by dtype", dtypes)
    if params["tied"]:
        table.add_row("tied", ", ".join(f"{a} = {b}" for a, b in params["tied"]))
    return table


def notes_text(report: dict[str, Any]) -> Text:
    check = report["crosscheck"]
    lines = Text()
    style = {"exact": "green", "explained": "yellow", "unexplained": "red"}.get(check["status"], "dim")
    if check["status"] == "exact":
        lines.append("✓ meta model and checkpoint headers agree exactly\n", style=style)
    elif check["status"] != "unavailable":
        lines.append(f"checkpoint − meta model = {check['difference']:+,}: ", style=style)
        lines.append(" ".join(check["explanations"]) + "\n")
    for note in report["notes"]:
        lines.append(f"note: {note}\n", style="dim")
    return lines


def fit_cell(fit: dict[str, Any]) -> Text:
    """One method on one GPU in one line: GiB needed, then the batch room or what would make it fit."""
    verdict, total, rest = verdict_parts(fit)
    colour = {"fits": "green", "change": "yellow"}.get(verdict, "red")
    return Text.assemble((f"{MARKS[verdict]} {total}", colour), (f" {rest}", "dim" if verdict == "fits" else "yellow"))


def grid_table(report: dict[str, Any], title: str, first: str, gpu: Any, cell: Any,
               serving: dict[str, str] | None = None) -> Table:
    """GPU rows by method columns of the fit matrix: `gpu(name, usable)` labels a row, `cell(fit)` fills a cell;
    `serving`: the serving column's cells by GPU name, last."""
    methods, rows = fit_grid(report)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column(first)
    for method in methods:
        table.add_column(METHOD_TITLES.get(method, method))
    if serving:
        table.add_column(serving_title(report))
    for name, usable, by_method in rows:
        extra = [serving_text(serving[name])] if serving else []
        table.add_row(gpu(name, usable), *(cell(by_method[m]) for m in methods), *extra)
    return table


def serving_text(label: str) -> Text:
    """A serving cell coloured as a training cell of its verdict: the mark and its words."""
    mark, _, words = label.partition(" ")
    colour = {MARKS["fits"]: "green", MARKS["change"]: "yellow"}.get(mark, "red")
    return Text.assemble((mark, colour), (f" {words}" if words else "", "dim" if mark == MARKS["fits"] else "yellow"))


def _gpu_label(name: str, usable: float) -> Text:
    return Text.assemble(name, (f" {usable:g}", "dim"))


def fit_table(report: dict[str, Any]) -> Table:
    return grid_table(report, "Fit per GPU (GiB)", "GPU (usable GiB)", _gpu_label, fit_cell,
                      serving_labels(report, MARKS))


def stacked_fit_tables(report: dict[str, Any]) -> Group:
    """The fit matrix one method at a time (GPU, cell): for terminals too narrow for the grid's rows."""
    methods, rows = fit_grid(report)
    tables = []
    for method in methods:
        table = Table(title=f"Fit per GPU (GiB): {METHOD_TITLES.get(method, method)}", title_justify="left",
                      box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, show_header=False)
        table.add_column(no_wrap=True)
        table.add_column()
        for name, usable, by_method in rows:
            table.add_row(_gpu_label(name, usable), fit_cell(by_method[method]))
        tables.append(table)
    if serving := serving_labels(report, MARKS):
        table = Table(title=f"Fit per GPU: {serving_title(report)}", title_justify="left", box=box.SIMPLE_HEAD,
                      pad_edge=False, show_edge=False, show_header=False)
        table.add_column(no_wrap=True)
        table.add_column()
        for name, usable, _ in rows:
            table.add_row(_gpu_label(name, usable), serving_text(serving[name]))
        tables.append(table)
    return Group(*tables)


def fit_view(report: dict[str, Any], console: Console) -> Table | Group:
    """The grid when its rows fit the terminal unwrapped, else the matrix stacked one method at a time."""
    grid = fit_table(report)
    natural = console.measure(grid, options=console.options.update_width(1 << 16)).maximum
    return grid if natural <= console.width else stacked_fit_tables(report)


def time_table(report: dict[str, Any]) -> Table:
    """Speed, hours and cost of each fitting cell, shown when a token budget or a price was given."""
    return grid_table(report, "Time per fitting setup (roofline)", "GPU", lambda name, _: name,
                      lambda fit: time_cell(fit) or "–")


def breakdown_table(report: dict[str, Any]) -> Table:
    """Per-GPU bytes by term for each method's estimate."""
    table = Table(title="Memory per GPU by term", title_justify="left", box=None, pad_edge=False)
    table.add_column("term", style="dim")
    ests = estimates(report)
    for est in ests:
        table.add_column(METHOD_TITLES.get(est["method"], est["method"]), justify="right")
    phases = [p for p, _ in PHASES if any(e["per_gpu_bytes"][p] for e in ests)]  # the total where larger
    recipe = [t for t in ("quantized_weight_copies", "scaling_state") if any(e["per_gpu_bytes"].get(t) for e in ests)]
    nccl = ["nccl"] if any(e["per_gpu_bytes"].get("nccl") for e in ests) else []  # part of overhead, outside torch
    terms = ["weights", "gradients", "optimizer", "activations", *recipe, "overhead", *nccl, *phases, "total"]
    for term in terms:
        label = "  of which NCCL" if term == "nccl" else term.replace("_", " ")
        table.add_row(Text(label, style="bold" if term == "total" else ""),
                      *(gib(e["per_gpu_bytes"].get(term, 0)) for e in ests))
    if any(e["per_gpu_bytes"].get("nvme_per_node") for e in ests):  # offload_device nvme: not GPU memory
        table.add_row("NVMe per machine", *(gib(e["per_gpu_bytes"].get("nvme_per_node", 0)) for e in ests))
    table.add_row("trainable params", *(count(e["parameters"]["trainable"]) for e in ests))
    for key, words in (("model", "FLOPs/token (model)"), ("hardware", "FLOPs/token (executed)")):
        table.add_row(words, *(f"{e['flops_per_token'][key]:.3g}" for e in ests))
    return table


def activations_table(report: dict[str, Any]) -> Table:
    first = estimates(report)[0]
    act = first["activations"]
    table = Table(title=f"Activations ({first['method']}, per micro-batch)", title_justify="left",
                  box=None, pad_edge=False)
    table.add_column("part", style="dim")
    table.add_column("bytes", justify="right")
    for layer in act["per_layer"]:
        table.add_row(f"{layer['kind']} layer × {layer['count']}", f"{size(layer['bytes'])} each")
    for key in ("embedding", "loss_peak", "stored", "peak"):
        table.add_row(key.replace("_", " "), size(act[key]))
    return table


def headline(report: dict[str, Any]) -> Text:
    params = report["parameters"]
    text = Text(f"{report['model']}", style="bold")
    if report.get("sha"):
        text.append(f" @ {report['sha'][:12]}", style="dim")
    text.append(f" · {parameter_count(params)} parameters")
    arch = report["architecture"]
    text.append(f" · {arch['num_layers']} layers, hidden {arch['hidden_size']:,}, {arch['attention_kind']}",
                style="dim")
    if arch.get("num_experts"):
        text.append(f", {arch['num_experts']} experts (top-{arch['experts_per_token']})", style="dim")
    return text


def render(report: dict[str, Any], console: Console, details: bool = False) -> None:
    """One screen by default: headline, cross-check, the fit matrix and its assumptions; --details adds the rest."""
    warnings = (Text(f"warning: {w}", style="bold yellow") for w in report.get("warnings", []))
    parts: list[Any] = [headline(report), *warnings,
                        notes_text(report)]
    if details:
        parts += [architecture_table(report), parameters_table(report)]
    if report.get("fit"):
        parts.append(fit_view(report, console))
        parts.append(Text(legend(), style="dim"))
        machine = offload_line(report) if details else ""  # the default view stays one screen
        parts += [Text(hint, style="dim") for hint in (paged_hint(report), host_ram_line(report, nvme=details), machine,
                                                       rank0_line(report)) if hint]
        parts.append(Text("assumes: " + settings_line(report), style="dim"))
        if origin := origin_line(report):
            parts.append(Text("from " + origin, style="dim"))
        if wants_time_table(report):
            parts.append(time_table(report))
        if timing := time_line(report):
            parts.append(Text(timing, style="dim"))
        if serving := serving_pick_line(report):
            parts.append(Text(serving, style="dim"))
        parts += [Text(line, style="dim") for line in layout_lines(report)]
        parts.append(Text(napkin_line(report), style="dim"))
        if details:
            parts += [breakdown_table(report), activations_table(report)]
        else:
            parts.append(Text("--details: architecture, parameters, memory by term, activations · --format json",
                              style="dim"))
    console.print(Group(*parts))
