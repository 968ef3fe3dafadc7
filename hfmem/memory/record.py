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
from hfmem.memory.advice import fewest_gpus, recommended
from hfmem.memory.breakdown import MemoryBreakdown
from hfmem.memory.estimate import phases
from hfmem.memory.fit import EQUIVALENT, shortfall

FIT_COLUMNS = ("method", "gpu", "status", "total_bytes", "max_micro_batch_size", "max_seq_len", "max_seq_len_capped",
               "variant", "gpu_defaults", "multi_gpu", "multi_gpu_with_checkpointing", "mitigations", "time")
"""A row of the full record's fit table, in this order (README.md, hfmem/report.schema.json)."""
COMPACT_COLUMNS = ("method", "gpu", "status", "total_bytes", "max_micro_batch_size", "gpus_needed", "suggestion")
"""A row of a compact scan record (`hfmem scan --compact`): the verdict, the total, the fewest GPUs with the
settings as asked (multi_gpu's num_gpus) and the suggestion."""
MULTI_FIELDS = ("num_gpus", "sharding", "offload_optimizer", "offload_params", "total_bytes", "required_bytes")
"""A multi-GPU suggestion as a list in this order; required_bytes left out where it equals total_bytes."""
MITIGATION_FIELDS = ("name", "total_bytes", "required_bytes")
"""A working mitigation as a list in this order; required_bytes left out where it equals total_bytes, and its own
{description, settings_changes} last where they differ from the `mitigations` table's."""
GPU_FIELDS = ("usable_gib", "vendor_memory", "vendor_unit", "arch")
"""What the record keeps of a GPU, with user_defined where true; usable_bytes follows from usable_gib (`hfmem gpus`
lists vendors, aliases and where each figure comes from)."""
TIME_FIELDS = ("seconds", "tokens_per_s", "mfu", "hfu", "bound", "dtype", "tokens", "hours", "gpu_hours",
               "usd_per_gpu_hour", "cost_usd")
"""A cell's step time (reporting.timing) as a list in this order (tokens, hours and gpu_hours only with --tokens, the
cost with a --price too); a string where there is none (why); the roofline terms are in `fastest_and_cheapest`."""


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
    """The record's GPUs in full: name and usable_bytes put back (where usable_gib is a number)."""
    out = {}
    for name, g in (report.get("gpus") or {}).items():
        usable = g.get("usable_gib")
        number = isinstance(usable, (int, float)) and not isinstance(usable, bool)
        out[name] = {"name": name, **g} | ({"usable_bytes": Gpu(name, usable).usable_bytes} if number else {})
    return out


def compact_estimates(ests: list[dict[str, Any]], training: dict[str, Any]) -> list[dict[str, Any]]:
    """Estimate dicts (memory.estimate) for the record: settings that differ from the plan's `training`,
    assumptions that differ from their settings and the first estimate's, no GiB copy of the byte terms."""
    out = []
    for est in ests:
        base = est["settings"] | (ests[0]["assumptions"] if out else {})
        out.append({k: v for k, v in est.items() if k != "per_gpu_gib"}
                   | {"settings": changed(training, est["settings"]), "assumptions": changed(base, est["assumptions"])})
    return out


def estimates(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each estimate with its settings and assumptions in full (what `compact_estimates` left out, put back)."""
    training = (report.get("plan") or {}).get("training") or {}
    out: list[dict[str, Any]] = []
    for est in report.get("estimates") or []:
        settings = training | est["settings"]
        first = out[0]["assumptions"] if out else {}
        out.append(est | {"settings": settings, "assumptions": settings | first | est["assumptions"]})
    return out


def fit_table(found: list[dict[str, Any]], ests: list[dict[str, Any]], gpu_entries: dict[str, dict[str, Any]],
              hfu_assumed: float | None) -> dict[str, Any]:
    """The `fit` table of full cells (memory.fit `Fit.to_dict` plus `time`) whose methods' full estimates are
    `ests` and whose GPUs are `gpu_entries` (gpu_table)."""
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
        "gpus": {name: {"usable_gib": g["usable_gib"]} for name, g in report["gpus"].items()},
        "fit": {"columns": list(COMPACT_COLUMNS), "rows": rows}}


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


def _time_of(values: list[Any] | str | None, fits: bool, hfu_assumed: float | None) -> dict[str, Any] | None:
    if values is None:
        return None
    setup = {"setup": "asked" if fits else "suggested GPUs"}
    if isinstance(values, str):
        return {"seconds": None, "reason": values} | setup
    return dict(zip(TIME_FIELDS, values)) | setup | {"hfu_assumed": hfu_assumed}


def _multi(multi: dict[str, Any] | None) -> list[Any] | None:
    if multi is None:
        return None
    values = [multi[k] for k in MULTI_FIELDS]
    return values[:-1] if multi["required_bytes"] == multi["total_bytes"] else values


def _mitigation(m: dict[str, Any], table: dict[str, dict[str, Any]]) -> list[Any]:
    """A mitigation as MITIGATION_FIELDS, its description and changes in `table` (in the row if they differ)."""
    shared = table.setdefault(m["name"], {"description": m["description"], "settings_changes": m["settings_changes"]})
    own = [m[k] for k in MITIGATION_FIELDS]
    own = own[:-1] if m["required_bytes"] == m["total_bytes"] else own
    mine = {"description": m["description"], "settings_changes": m["settings_changes"]}
    return own if mine == shared else [*own, mine]


def cells(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every fit cell in full: its row, method, `gpu` (its table entry), status, `asked` (fits, setup, totals,
    headroom, host bytes, shortfall, phase, per-GPU breakdown), searches, mitigations, suggestion, settings,
    assumptions, time.
    A compact record's cells hold what its columns give (no breakdown, settings or mitigations)."""
    table = report.get("fit")
    if not isinstance(table, dict):
        return []
    gpu_entries = gpus(report)
    by_method = {e["method"]: e for e in estimates(report)}
    variants = table.get("variants") or []
    shared = table.get("mitigations") or {}
    out = []
    for i, row in enumerate(table.get("rows") or []):
        c = dict(zip(table["columns"], row))
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
            "time": _time_of(c.get("time"), fits, table.get("hfu_assumed")),
        }
        out.append(cell | {"suggestion": c["suggestion"] if "suggestion" in c else suggestion(cell),
                           "gpus_needed": c["gpus_needed"] if "gpus_needed" in c else (
                               cell["multi_gpu"] or {}).get("num_gpus")})
    return out


def path(cell: dict[str, Any], column: str) -> str:
    """Where a decoded cell's figure is in the record, e.g. "fit.rows.4.3" (a chart's data-src)."""
    return f"fit.rows.{cell['row']}.{FIT_COLUMNS.index(column)}"


def _multi_of(values: list[Any] | None, checkpointing: str | None) -> dict[str, Any] | None:
    if values is None:
        return None
    multi = dict(zip(MULTI_FIELDS, values))
    return multi | {"required_bytes": multi.get("required_bytes", multi["total_bytes"]),
                    "gradient_checkpointing": checkpointing, "equivalent": EQUIVALENT.get(multi["sharding"])}


def _mitigation_of(values: list[Any], shared: dict[str, dict[str, Any]]) -> dict[str, Any]:
    own = values[-1] if isinstance(values[-1], dict) else shared.get(values[0], {})
    figures = [v for v in values[1:] if not isinstance(v, dict)]
    return dict(zip(MITIGATION_FIELDS, (values[0], figures[0], figures[-1]))) | own
