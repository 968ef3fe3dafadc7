"""Rich terminal rendering of a report: architecture, parameters, cross-check, and the fit matrix."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from hfmem.units import count

_ARCH_ROWS = [
    ("model_type", "model type"), ("model_class", "class"), ("num_layers", "layers"), ("hidden_size", "hidden"),
    ("num_attention_heads", "heads"), ("num_key_value_heads", "KV heads"), ("head_dim", "head dim"),
    ("attention_kind", "attention"), ("intermediate_size", "intermediate"), ("vocab_size", "vocab"),
    ("num_experts", "experts"), ("experts_per_token", "experts / token"), ("moe_intermediate_size", "expert width"),
    ("max_position_embeddings", "max positions"), ("sliding_window", "sliding window"), ("dtype", "stored dtype"),
]


def architecture_table(report: dict[str, Any]) -> Table:
    arch = report["architecture"]
    table = Table(title="Architecture", show_header=False, title_justify="left", box=None, pad_edge=False)
    table.add_column(style="dim")
    table.add_column()
    for key, label in _ARCH_ROWS:
        value = arch.get(key)
        if value in (None, 0) and key in {"num_experts", "experts_per_token", "moe_intermediate_size", "sliding_window"}:
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
    table.add_row(Text("total", style="bold"), Text(count(params["total"]), style="bold"))
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


def render(report: dict[str, Any], console: Console, details: bool = False) -> None:
    title = Text(f"{report['model']}", style="bold")
    if report.get("sha"):
        title.append(f" @ {report['sha'][:12]}", style="dim")
    parts: list[Any] = [title]
    parts += [architecture_table(report), parameters_table(report), notes_text(report)]
    console.print(Group(*parts))
