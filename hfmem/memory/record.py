"""The report's GPUs, estimates and fit matrix as a compact record, and back: what cells share is written once.

Written (`gpu_table`, `compact_estimates`, `fit_table`): the GPUs once, keyed by name; each estimate's settings as
those that differ from the plan's, its assumptions as those that differ from its settings and the first estimate's;
the fit matrix as rows under `columns`. A cell whose settings, assumptions or per-GPU breakdown differ from its
method's estimate (a GPU without bf16) names a `variants` entry shared by every cell that differs the same way;
mitigations are named, their description and setting changes kept once. Read (`gpus`, `estimates`, `cells`): each
GPU, estimate and cell in full, rebuilt from those tables, so every reader sees one figure for one total.
"""

from __future__ import annotations

import json
from typing import Any

from hfmem.hardware.gpus import Gpu
from hfmem.memory.advice import fewest_gpus, recommended, timed_setup
from hfmem.memory.breakdown import MemoryBreakdown
from hfmem.memory.estimate import phases
from hfmem.memory.fit import EQUIVALENT, STATUSES, shortfall

FIT_COLUMNS = ("method", "gpu", "status", "total_bytes", "max_micro_batch_size", "max_seq_len", "max_seq_len_capped",
               "variant", "gpu_defaults", "multi_gpu", "multi_gpu_with_checkpointing", "mitigations", "time")
"""A row of the full record's fit table, in this order (README.md, hfmem/report.schema.json)."""
COMPACT_COLUMNS = ("method", "gpu", "status", "total_bytes", "max_micro_batch_size", "gpus_needed", "suggestion")
"""A cell of a compact scan record (`hfmem scan --compact`): the verdict, the total, the fewest GPUs with the
settings as asked (multi_gpu's num_gpus) and the suggestion. Written grouped by method (`compact_fit`)."""
COMPACT_ROW = ("gpu", "status", "max_micro_batch_size", "gpus_needed", "suggestion", "total_bytes")
"""A compact row under its method, in this order: the GPU as its index in the record's `gpus` list, the status as
its index in `fit.statuses` (memory.fit STATUSES); total_bytes only where it differs from the method's, and no
suggestion before it where there is none (a cell that fits)."""
MULTI_FIELDS = ("num_gpus", "sharding", "offload_optimizer", "offload_params", "total_bytes", "required_bytes")
"""A multi-GPU suggestion as a list in this order; required_bytes left out where it equals total_bytes."""
MITIGATION_FIELDS = ("name", "total_bytes", "required_bytes")
MITIGATION_WORDS = ("description", "settings_changes")
"""What a mitigation says in words, kept once in the `mitigations` table where every cell says the same."""
"""A working mitigation in a row: its name where the `mitigations` table's entry (description, settings changes and
these figures, as the first cell that tried it found them) says it all; else a list in this order, required_bytes
left out where it equals total_bytes, and its own {description, settings_changes} last where they differ."""
GPU_FIELDS = ("usable_gib", "vendor_memory", "vendor_unit", "arch")
"""What the record keeps of a GPU, with user_defined where true; usable_bytes follows from usable_gib (`hfmem gpus`
lists vendors, aliases and where each figure comes from)."""
TIME_FIELDS = ("seconds", "tokens_per_s", "mfu", "hfu", "bound", "dtype", "tokens", "hours", "gpu_hours",
               "usd_per_gpu_hour", "cost_usd")
"""A cell's step time (reporting.timing) as a list in this order (tokens, hours and gpu_hours only with --tokens, the
cost where the GPU has a price too: the report's `prices`); a string where there is none (why); the roofline terms
are in `fastest_and_cheapest`."""


def changed(base: dict[str, Any], full: dict[str, Any]) -> dict[str, Any]:
    """The entries of `full` whose value differs from (or is missing in) `base`."""
    return {k: v for k, v in full.items() if k not in base or base[k] != v}


def gpu_table(found: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The GPUs of full cells (memory.fit `Fit.to_dict`) by name, each with the defaults it cannot run."""
    table: dict[str, dict[str, Any]] = {}
    for cell in found:
        gpu = cell["gpu"]
        entry = table.setdefault(gpu["name"], {k: gpu[k] for k in GPU_FIELDS} | (
            {"user_defined": True} if gpu["user_defined"] else {}))
        if cell["gpu_defaults"] is not None:
            entry.setdefault("gpu_defaults", cell["gpu_defaults"])
    return table


def gpus(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The record's GPUs in full: name and usable_bytes put back (where usable_gib is a number); a compact record
    lists [name, usable GiB] pairs."""
    out = {}
    table = report.get("gpus") or {}
    pairs = table.items() if isinstance(table, dict) else ((name, {"usable_gib": gib}) for name, gib in table)
    for name, g in pairs:
        usable = g.get("usable_gib")
        number = isinstance(usable, (int, float)) and not isinstance(usable, bool)
        out[name] = {"name": name, **g} | ({"usable_bytes": Gpu(name, usable).usable_bytes} if number else {})
    return out


def compact_estimates(ests: list[dict[str, Any]], training: dict[str, Any]) -> list[dict[str, Any]]:
    """Estimate dicts (memory.estimate) for the record: settings that differ from the plan's `training`,
    assumptions that differ from their settings and the first estimate's; no GiB copy of the byte terms and no
    `model` (the report's architecture and parameters say it)."""
    out = []
    for est in ests:
        base = est["settings"] | (ests[0]["assumptions"] if out else {})
        out.append({k: v for k, v in est.items() if k not in ("per_gpu_gib", "model")}
                   | {"settings": changed(training, est["settings"]), "assumptions": changed(base, est["assumptions"])})
    return out


def estimates(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each estimate with its settings, assumptions and model in full (what `compact_estimates` left out)."""
    training = (report.get("plan") or {}).get("training") or {}
    arch = report.get("architecture") or {}
    model = {"model_type": arch.get("model_type"), "architecture": arch.get("architecture"),
             "parameters": (report.get("parameters") or {}).get("total"), "num_layers": arch.get("num_layers")}
    out: list[dict[str, Any]] = []
    for est in report.get("estimates") or []:
        settings = training | est["settings"]
        first = out[0]["assumptions"] if out else {}
        out.append({"model": model} | est | {"settings": settings, "assumptions": settings | first | est["assumptions"]})
    return out


def fit_table(found: list[dict[str, Any]], ests: list[dict[str, Any]], gpu_entries: dict[str, dict[str, Any]],
              hfu_assumed: dict[str, float]) -> dict[str, Any]:
    """The `fit` table of full cells (memory.fit `Fit.to_dict` plus `time`) whose methods' full estimates are
    `ests` and whose GPUs are `gpu_entries` (gpu_table); `hfu_assumed`: the utilisation a GPU is timed at, by its
    architecture (the `arch` of its gpu_table entry)."""
    by_method = {e["method"]: e for e in ests}
    mitigations: dict[str, dict[str, Any]] = {}
    variants: dict[str, int] = {}
    rows = []
    for cell in found:
        own = cell["gpu_defaults"]
        values = cell | {"gpu": cell["gpu"]["name"], "total_bytes": cell["asked"]["total_bytes"],
                         "variant": _variant(cell, by_method[cell["method"]], variants),
                         "gpu_defaults": own if own is None or own != gpu_entries[cell["gpu"]["name"]].get(
                             "gpu_defaults") else True,
                         "multi_gpu": _multi(cell["multi_gpu"]),
                         "multi_gpu_with_checkpointing": _multi(cell["multi_gpu_with_checkpointing"]),
                         "mitigations": [_mitigation(m, mitigations) for m in cell["mitigations"]],
                         "time": _time(cell["time"])}
        rows.append([values[c] for c in FIT_COLUMNS])
    return {"columns": list(FIT_COLUMNS), "rows": rows, "variants": [json.loads(v) for v in variants],
            "mitigations": mitigations, "hfu_assumed": hfu_assumed}


def compact_report(report: dict[str, Any]) -> dict[str, Any]:
    """A report cut to what a scan of many models reads (`hfmem scan --compact`): the model, its parameter totals,
    the cross-check's status, each GPU's usable GiB and the fit table as COMPACT_COLUMNS; no breakdowns."""
    rows = []
    for c in cells(report):
        values = c | {"gpu": c["gpu"]["name"], "total_bytes": c["asked"]["total_bytes"]}
        rows.append([values[k] for k in COMPACT_COLUMNS])
    arch, params = report["architecture"], report["parameters"]
    return {k: report[k] for k in ("schema_version", "model", "source", "revision", "sha", "warnings")} | {
        "architecture": {k: arch[k] for k in ("model_type", "model_class")},
        "parameters": {k: params[k] for k in ("total", "approximate", "checkpoint_total", "checkpoint_bytes")},
        "crosscheck": {"status": report["crosscheck"]["status"]},
        **compact_tables(rows, {name: g["usable_gib"] for name, g in report["gpus"].items()})}


def compact_tables(rows: list[list[Any]], usable_gib: dict[str, float]) -> dict[str, Any]:
    """Cells as COMPACT_COLUMNS lists, on GPUs of these usable GiB, to a compact record's `gpus` ([name, usable GiB]
    pairs) and `fit` (per method its total once and COMPACT_ROW rows)."""
    order = {name: i for i, name in enumerate(usable_gib)}
    methods: dict[str, dict[str, Any]] = {}
    for row in rows:
        c = dict(zip(COMPACT_COLUMNS, row))
        group = methods.setdefault(c["method"], {"total_bytes": c["total_bytes"], "rows": []})
        own = [order[c["gpu"]], STATUSES.index(c["status"])] + [c[k] for k in COMPACT_ROW[2:]]
        if c["total_bytes"] == group["total_bytes"]:
            own = own[:-2] if c["suggestion"] is None else own[:-1]
        group["rows"].append(own)
    return {"gpus": [[name, gib] for name, gib in usable_gib.items()],
            "fit": {"columns": list(COMPACT_ROW), "statuses": list(STATUSES), "methods": methods}}


def _rows(table: dict[str, Any]) -> list[tuple[str | None, dict[str, Any] | None, Any]]:
    """(method, its group, row) for each row: a full record's `rows` (no group), a compact one's under `methods`."""
    if "methods" not in table:
        return [(None, None, row) for row in table.get("rows") or []]
    return [(method, group, row) for method, group in table["methods"].items() for row in group["rows"]]


def _row_values(table: dict[str, Any], names: list[str], method: str | None, group: dict[str, Any] | None,
                row: list[Any]) -> dict[str, Any]:
    """A row as a dict by column; in a compact record with its method's total, and GPU and status indices put back
    as names (`names`: the record's GPUs in order)."""
    c = dict(zip(table["columns"], row))
    if group is None:
        return c
    c = {"total_bytes": group["total_bytes"], "suggestion": None} | c
    return c | {"method": method, "gpu": names[c["gpu"]], "status": table["statuses"][c["status"]]}


def suggestion(cell: dict[str, Any]) -> list[Any] | None:
    """What a cell that does not fit as asked recommends (memory.advice): [mitigation name or GPU setup such as
    "16×ZeRO-3+ckpt", its total bytes per GPU]; None where it fits or nothing does."""
    if cell["asked"]["fits"]:
        return None
    text, mitigation = recommended(cell)
    if mitigation is not None:
        return [mitigation["name"], mitigation["total_bytes"]]
    multi = fewest_gpus(cell)
    return [text, multi["total_bytes"]] if text and multi else None


def _variant(cell: dict[str, Any], est: dict[str, Any], seen: dict[str, int]) -> int | None:
    """The index of the cell's differences from its estimate in `seen` (added if new); None where there are none."""
    settings = changed(est["settings"], cell["settings"])
    assumptions = changed(est["assumptions"] | settings, cell["assumptions"])
    own = cell["asked"]["per_gpu_bytes"]
    if not settings and not assumptions and own == est["per_gpu_bytes"]:
        return None
    key = json.dumps({"method": cell["method"], "settings": settings, "assumptions": assumptions,
                      "per_gpu_bytes": None if own == est["per_gpu_bytes"] else own})
    return seen.setdefault(key, len(seen))


def _time(time: dict[str, Any] | None) -> list[Any] | str | None:
    """A step time as TIME_FIELDS, or the reason there is none."""
    if time is None or time["seconds"] is None:
        return None if time is None else time["reason"]
    return [time[k] for k in TIME_FIELDS if k in time]


def _time_of(values: list[Any] | str | None, cell: dict[str, Any], hfu_assumed: float | None) -> dict[str, Any] | None:
    """A row's time in full: its figures by name, or its reason, and the setup it is for (memory.advice.timed_setup
    of the cell, as when it was timed)."""
    if values is None:
        return None
    setup = {"setup": timed_setup(cell)[0]}
    if isinstance(values, str):
        return {"seconds": None, "reason": values} | setup
    return dict(zip(TIME_FIELDS, values)) | setup | {"hfu_assumed": hfu_assumed}


def _multi(multi: dict[str, Any] | None) -> list[Any] | None:
    if multi is None:
        return None
    values = [multi[k] for k in MULTI_FIELDS]
    return values[:-1] if multi["required_bytes"] == multi["total_bytes"] else values


def _mitigation(m: dict[str, Any], table: dict[str, dict[str, Any]]) -> str | list[Any]:
    """A mitigation as its name (all of it in `table`) or as MITIGATION_FIELDS with what differs from `table`."""
    mine = {k: m[k] for k in (*MITIGATION_WORDS, *MITIGATION_FIELDS[1:])}
    shared = table.setdefault(m["name"], mine)
    if mine == shared:
        return m["name"]
    own = [m[k] for k in MITIGATION_FIELDS]
    own = own[:-1] if m["required_bytes"] == m["total_bytes"] else own
    words = {k: mine[k] for k in MITIGATION_WORDS}
    return own if words == {k: shared[k] for k in words} else [*own, words]


def cells(report: dict[str, Any], *, skip_bad: bool = False) -> list[dict[str, Any]]:
    """Every fit cell in full: its row, method, `gpu` (its table entry), status, `asked` (fits, setup, totals,
    headroom, host bytes, shortfall, phase, per-GPU breakdown), searches, mitigations, suggestion, settings,
    assumptions, time. With `skip_bad`, a row that does not read (an edited or foreign file) is left out.
    A compact record's cells hold what its columns give (no breakdown, settings or mitigations)."""
    table = report.get("fit")
    if not isinstance(table, dict):
        return []
    gpu_entries = gpus(report)
    names = list(gpu_entries)
    by_method = {e["method"]: e for e in estimates(report)}
    out = []
    for i, (method, group, row) in enumerate(_rows(table)):
        try:
            out.append(_cell(i, _row_values(table, names, method, group, row), gpu_entries, by_method, table))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            if not skip_bad:
                raise
    return out


def _cell(i: int, c: dict[str, Any], gpu_entries: dict[str, dict[str, Any]], by_method: dict[str, dict[str, Any]],
          table: dict[str, Any]) -> dict[str, Any]:
    """One row's cell in full (`cells`)."""
    variants = table.get("variants") or []
    shared = table.get("mitigations") or {}
    gpu = gpu_entries.get(c["gpu"], {"name": c["gpu"]})
    est = by_method.get(c["method"])
    variant = variants[c["variant"]] if c.get("variant") is not None else {}
    fits = c["status"] == "fits"
    asked: dict[str, Any] = {"fits": fits, "total_bytes": c["total_bytes"]}
    settings = assumptions = None
    if est is not None:
        settings = est["settings"] | variant.get("settings", {})
        assumptions = est["assumptions"] | variant.get("settings", {}) | variant.get("assumptions", {})
        b = variant.get("per_gpu_bytes") or est["per_gpu_bytes"]
        asked |= {"num_gpus": settings["num_gpus"], "sharding": settings["resolved_sharding"],
                  "offload_optimizer": settings["offload_optimizer"], "offload_params": settings["offload_params"],
                  "required_bytes": b["required"], "headroom_bytes": gpu["usable_bytes"] - b["required"],
                  "host_per_node_bytes": b["host_per_node"],
                  "short_of": shortfall(fits, b["required"], b["host_per_node"], gpu["usable_bytes"],
                                        settings["host_ram_gib"]),
                  "phase": phases(MemoryBreakdown(**b))["largest"], "per_gpu_bytes": b}
    mitigations = [_mitigation_of(m, shared) for m in c.get("mitigations") or []]
    cell = {
        "row": i, "method": c["method"], "gpu": gpu, "status": c["status"], "asked": asked,
        "max_micro_batch_size": c.get("max_micro_batch_size"), "max_seq_len": c.get("max_seq_len"),
        "max_seq_len_capped": c.get("max_seq_len_capped"),
        "multi_gpu": _multi_of(c.get("multi_gpu"), (settings or {}).get("gradient_checkpointing")),
        "multi_gpu_with_checkpointing": _multi_of(c.get("multi_gpu_with_checkpointing"), "full"),
        "mitigation": mitigations[0] if mitigations else None, "mitigations": mitigations,
        "settings": settings, "assumptions": assumptions,
        "gpu_defaults": gpu.get("gpu_defaults") if c.get("gpu_defaults") is True else c.get("gpu_defaults"),
    }
    hfu = table.get("hfu_assumed")  # schema 4: by GPU architecture; schema 3: one number
    cell["time"] = _time_of(c.get("time"), cell, hfu.get(gpu.get("arch")) if isinstance(hfu, dict) else hfu)
    return cell | {"suggestion": c["suggestion"] if "suggestion" in c else suggestion(cell),
                   "gpus_needed": c["gpus_needed"] if "gpus_needed" in c else (cell["multi_gpu"] or {}).get("num_gpus")}


def path(cell: dict[str, Any], column: str) -> str:
    """Where a decoded cell's figure is in the record, e.g. "fit.rows.4.3" (a chart's data-src)."""
    return f"fit.rows.{cell['row']}.{FIT_COLUMNS.index(column)}"


def _multi_of(values: list[Any] | None, checkpointing: str | None) -> dict[str, Any] | None:
    if values is None:
        return None
    multi = dict(zip(MULTI_FIELDS, values))
    return multi | {"required_bytes": multi.get("required_bytes", multi["total_bytes"]),
                    "gradient_checkpointing": checkpointing, "equivalent": EQUIVALENT.get(multi["sharding"])}


def _mitigation_of(values: str | list[Any], shared: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if isinstance(values, str):
        return {"name": values} | shared.get(values, {})
    own = values[-1] if isinstance(values[-1], dict) else {
        k: v for k, v in shared.get(values[0], {}).items() if k in MITIGATION_WORDS}
    figures = [v for v in values[1:] if not isinstance(v, dict)]
    return dict(zip(MITIGATION_FIELDS, (values[0], figures[0], figures[-1]))) | own
