"""The report's GPUs, estimates and fit matrix as JSON (schema 7, hfmem/report.schema.json), and the few joins readers
share: every figure is written by name, so `jq` reads it as a renderer does.

Written (`gpu_table`, `fit_cells`): the GPUs once, by name; each estimate complete under its method; the fit matrix
as a list of named cells (memory.fit `Fit.to_dict` plus its `time`), each with its verdict and advice as the fit
search decided them (never recomputed here). The fastest, cheapest and ranked setups are written in full. A compact
record (`hfmem scan --compact`) keeps only a row per cell, positional, where a scan of thousands of models makes size
matter. Read (`cells`, `estimates`, `picks`, `ranked`): the cells with their GPU's entry joined, the estimates in
method order, the picks as written."""

from __future__ import annotations

from typing import Any

from hfmem.memory.fit import VERDICTS, Fit, timed_gpus
from hfmem.memory.settings import SERVE

COMPACT_COLUMNS = ("method", "gpu", "verdict", "total_bytes", "max_micro_batch_size", "gpus_needed", "suggestion")
"""A cell of a compact scan record (`hfmem scan --compact`): the verdict, the total, the fewest GPUs with the
settings as asked (multi_gpu's num_gpus) and the suggestion. Written grouped by method (`compact_tables`)."""
COMPACT_ROW = ("gpu", "verdict", "max_micro_batch_size", "gpus_needed", "suggestion", "total_bytes")
"""A compact row under its method, in this order: the GPU as its index in the record's `gpus` list, the verdict as
its index in `fit.verdicts` (memory.fit VERDICTS); total_bytes only where it differs from the method's, and no
suggestion before it where there is none (a cell that fits)."""
PICK_TIME = ("setup", "seconds", "tokens_per_s", "hfu_assumed", "low_precision", "tokens", "hours", "gpu_hours",
             "usd_per_gpu_hour", "cost_usd", "flops")
"""What a pick (fastest, cheapest, ranked) copies of its cell's time; the rest, its verdict and advice are the cell's
(`fit[]` by method and GPU)."""


def changed(base: dict[str, Any], full: dict[str, Any]) -> dict[str, Any]:
    """The entries of `full` whose value differs from (or is missing in) `base`."""
    return {k: v for k, v in full.items() if k not in base or base[k] != v}


def gpu_table(fits: list[Fit]) -> dict[str, dict[str, Any]]:
    """The report's `gpus`: per GPU of the matrix in order, its usable GiB and bytes, architecture, whether the user
    defined it, and the defaults it cannot run (memory.gpu_defaults, from its first cell)."""
    table: dict[str, dict[str, Any]] = {}
    for fit in fits:
        g = fit.gpu
        entry = table.setdefault(g.name, {"usable_gib": g.usable_gib, "usable_bytes": g.usable_bytes, "arch": g.arch}
                                 | ({"user_defined": True} if g.user_defined else {}))
        if fit.gpu_defaults is not None:
            entry.setdefault("gpu_defaults", fit.gpu_defaults)
    return table


def pick(cell: dict[str, Any], terms: dict[str, Any] | None = None) -> dict[str, Any]:
    """A timed cell as a setup (the report's fastest, cheapest and ranked entries): method, GPU, the GPUs it runs
    on (its advice's where it needs more) and its time's headline figures (with the roofline terms where kept)."""
    return {"method": cell["method"], "gpu": cell["gpu"], "num_gpus": timed_gpus(cell, cell["time"]["setup"]),
            "time": pick_time(cell["time"], terms)}


def pick_time(time: dict[str, Any], terms: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a pick keeps of a cell's or a searched layout's time: PICK_TIME's figures, and the roofline terms where
    given."""
    return {k: time[k] for k in PICK_TIME if k in time} | ({"terms": terms} if terms is not None else {})


def training(report: dict[str, Any]) -> dict[str, Any]:
    """The plan's training settings (every setting, as written)."""
    return (report.get("plan") or {}).get("training") or {}


def estimates(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each estimate in full, in the plan's method order."""
    return list((report.get("estimates") or {}).values())


def cells(report: dict[str, Any], *, skip_bad: bool = False) -> list[dict[str, Any]]:
    """Every fit cell as written, joined with what it shares: `gpu` the GPU's entry in `gpus` (with its name), that
    entry's gpu_defaults, `settings` its method's estimate's with those defaults and its machine's host RAM (`nodes`)
    applied (and its NVMe), `per_gpu_bytes` the
    estimate's where the cell has none of its own, and `src` where the cell is in the record ("fit.3"). A compact
    record's cells hold what its columns give. With `skip_bad`, a cell that does
    not read (an edited or foreign file) is left out."""
    table = report.get("fit")
    if isinstance(table, dict):
        return _compact_cells(report, table, skip_bad)
    if not isinstance(table, list):
        return []
    entries, ests = report.get("gpus") or {}, report.get("estimates") or {}
    machines = (report.get("nodes") or {}).get("by_gpu") or {}
    out = []
    for i, cell in enumerate(table):
        try:
            gpu = {"name": cell["gpu"]} | entries.get(cell["gpu"], {})
            est = ests.get(cell["method"]) or {}
            own = gpu.get("gpu_defaults")
            machine = machines.get(cell["gpu"]) or {}
            host = {k: machine[k] for k in ("host_ram_gib", "nvme_gib") if k in machine}
            out.append({"per_gpu_bytes": est.get("per_gpu_bytes")} | cell | {
                "gpu": gpu, "gpu_defaults": own, "src": f"fit.{i}",
                "settings": (est.get("settings") or {}) | (own or {}).get("changes", {}) | host})
        except (KeyError, TypeError, AttributeError):
            if not skip_bad:
                raise
    return out


def serving_cells(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The serving column's cells (--method serve) as fit cells of method "serve": the GPU's entry joined (name and
    usable GiB, from `gpus` or a compact record's [name, GiB] pairs), the context they are judged at, and `src`
    ("serving.cells.2"); none without a serving column."""
    serving = report.get("serving")
    if not isinstance(serving, dict):
        return []
    table = report.get("gpus") or {}
    usable = ({row[0]: row[1] for row in table} if isinstance(table, list)
              else {name: g.get("usable_gib") for name, g in table.items()})
    context = (serving.get("settings") or {}).get("context")
    return [c | {"method": SERVE, "gpu": {"name": c["gpu"], "usable_gib": usable.get(c["gpu"])}, "context": context,
                 "src": f"serving.cells.{k}"} for k, c in enumerate(serving.get("cells") or [])]


def path(cell: dict[str, Any], column: str) -> str:
    """Where a cell's figure is in the record, e.g. "fit.4.total_bytes" (a chart's data-src)."""
    return f"{cell['src']}.{column}"


def picks(report: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    """`fastest_and_cheapest`: each a `pick` (None where no cell qualifies) with its cell's advice."""
    return {label: None if p is None else _with_advice(report, p)
            for label, p in (report.get("fastest_and_cheapest") or {}).items()}


def ranked(report: dict[str, Any]) -> list[dict[str, Any]] | None:
    """`fit_ranking`: `pick`s best first, each with its cell's advice; None without --rank."""
    found = report.get("fit_ranking")
    return None if found is None else [_with_advice(report, p) for p in found]


def _with_advice(report: dict[str, Any], chosen: dict[str, Any]) -> dict[str, Any]:
    """A pick joined with its cell's advice (the change or GPUs it is timed with)."""
    cell = next(c for c in report["fit"] if (c["method"], c["gpu"]) == (chosen["method"], chosen["gpu"]))
    return chosen | {"advice": cell["advice"]}


def suggestion(cell: dict[str, Any]) -> list[Any] | None:
    """What a cell that does not fit as asked recommends: [its mitigation's name, or "N×SHARDING" for GPUs, its total
    bytes per GPU]; None where it fits or nothing does."""
    advice = cell.get("advice")
    if not advice:
        return None
    name = advice["mitigation"] or f"{advice['num_gpus']}×{advice['sharding']}"
    return [name, advice["total_bytes"]]


def compact_report(report: dict[str, Any]) -> dict[str, Any]:
    """A report cut to what a scan of many models reads (`hfmem scan --compact`): the model, its parameter totals,
    the cross-check's status, each GPU's usable GiB and the fit table as COMPACT_COLUMNS; no breakdowns."""
    rows = []
    for c in cells(report):
        values = c | {"gpu": c["gpu"]["name"], "gpus_needed": (c["multi_gpu"] or {}).get("num_gpus"),
                      "suggestion": suggestion(c)}
        rows.append([values[k] for k in COMPACT_COLUMNS])
    arch, params = report["architecture"], report["parameters"]
    return {k: report[k] for k in ("schema_version", "model", "source", "revision", "sha", "warnings")} | {
        "architecture": {k: arch[k] for k in ("model_type", "model_class")},
        "parameters": {k: params[k] for k in ("total", "approximate", "checkpoint_total", "checkpoint_bytes")},
        "crosscheck": {"status": report["crosscheck"]["status"]},
        **compact_tables(rows, {name: g["usable_gib"] for name, g in (report.get("gpus") or {}).items()})} | (
        {"serving": report["serving"]} if "serving" in report else {})  # --method serve's column, a row per GPU


def compact_tables(rows: list[list[Any]], usable_gib: dict[str, float]) -> dict[str, Any]:
    """Cells as COMPACT_COLUMNS lists, on GPUs of these usable GiB, to a compact record's `gpus` ([name, usable GiB]
    pairs) and `fit` (per method its total once and COMPACT_ROW rows)."""
    order = {name: i for i, name in enumerate(usable_gib)}
    methods: dict[str, dict[str, Any]] = {}
    for row in rows:
        c = dict(zip(COMPACT_COLUMNS, row, strict=True))
        group = methods.setdefault(c["method"], {"total_bytes": c["total_bytes"], "rows": []})
        own = [order[c["gpu"]], VERDICTS.index(c["verdict"])] + [c[k] for k in COMPACT_ROW[2:]]
        if c["total_bytes"] == group["total_bytes"]:
            own = own[:-2] if c["suggestion"] is None else own[:-1]
        group["rows"].append(own)
    return {"gpus": [[name, gib] for name, gib in usable_gib.items()],
            "fit": {"columns": list(COMPACT_ROW), "verdicts": list(VERDICTS), "methods": methods}}


def _compact_cells(report: dict[str, Any], table: dict[str, Any], skip_bad: bool) -> list[dict[str, Any]]:
    """A compact record's rows as cells: method, GPU entry (name and usable GiB), verdict, fits, total bytes, largest
    micro-batch, the fewest GPUs and the suggestion."""
    names = [row[0] for row in report.get("gpus") or []]
    usable = {row[0]: row[1] for row in report.get("gpus") or []}
    out = []
    for method, group in (table.get("methods") or {}).items():
        for j, row in enumerate(group["rows"]):
            try:
                c = {"total_bytes": group["total_bytes"], "suggestion": None} | dict(
                    zip(table["columns"], row, strict=False))  # a row is cut after its last non-default column
                name, verdict = names[c["gpu"]], table["verdicts"][c["verdict"]]
                out.append(c | {"method": method, "gpu": {"name": name, "usable_gib": usable[name]},
                                "verdict": verdict, "fits": verdict == "fits", "src": f"fit.methods.{method}.rows.{j}"})
            except (KeyError, TypeError, ValueError, AttributeError, IndexError):
                if not skip_bad:
                    raise
    return out
