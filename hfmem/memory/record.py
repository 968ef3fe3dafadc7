"""The report's GPUs, estimates and fit matrix as a compact record, and back: what cells share is written once.

Written (`gpu_rows`, `compact_estimates`, `fit_table`): the GPUs once, as rows in the order cells index them. Each
estimate with its settings as those that differ from the plan's, its assumptions as those that differ from its
settings and the previous estimate's, its breakdown as `written`, its activation figures and each layer's terms as
they differ from the previous estimate's, its notes as indices into the report's `estimate_notes`. The fit matrix as
rows under each method, the GPU, status and mitigations as indices; a cell's total is its breakdown's. A cell whose
settings, assumptions or breakdown differ from its method's estimate (a GPU without bf16) names a `variants` entry
shared by every cell that differs the same way; a mitigation's setting changes are kept once by name (its words
follow from them), a time's missing reason once in `reasons`; a time's token budget follows from the plan and the
GPU's price. The fastest, cheapest and ranked setups as references to their rows. Read (`gpus`, `estimates`,
`cells`, `picks`, `ranked`): each GPU, estimate, cell and setup in full, rebuilt from those tables, so every reader
sees one figure for one total."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from hfmem.hardware.gpus import Gpu
from hfmem.memory.activations.result import FIGURES as ACTIVATION_FIGURES
from hfmem.memory.advice import fewest_gpus, picked_setup, recommended, timed_gpus, timed_setup
from hfmem.memory.breakdown import MemoryBreakdown
from hfmem.memory.estimate import phases
from hfmem.memory.fit import EQUIVALENT, STATUSES, shortfall
from hfmem.memory.mitigations import describe
from hfmem.memory.settings import TrainingSettings
from hfmem.units import budget

FIT_COLUMNS = ("gpu", "status", "max_micro_batch_size", "max_seq_len", "multi_gpu", "multi_gpu_with_checkpointing",
               "mitigations", "time", "variant", "gpu_defaults", "max_seq_len_capped")
"""A row of the full record's fit table under its method, in this order: the GPU as its index in the record's
`gpus`, the status as its index in `fit.statuses`, the mitigations as indices into `fit.tried`; cut after its last
field that is not the default (ROW_DEFAULTS) (README.md, hfmem/report.schema.json)."""
ROW_DEFAULTS = {"variant": None, "gpu_defaults": None, "max_seq_len_capped": False}
"""What a fit row's last columns are where the row leaves them out."""
COMPACT_COLUMNS = ("method", "gpu", "status", "total_bytes", "max_micro_batch_size", "gpus_needed", "suggestion")
"""A cell of a compact scan record (`hfmem scan --compact`): the verdict, the total, the fewest GPUs with the
settings as asked (multi_gpu's num_gpus) and the suggestion. Written grouped by method (`compact_tables`)."""
COMPACT_ROW = ("gpu", "status", "max_micro_batch_size", "gpus_needed", "suggestion", "total_bytes")
"""A compact row under its method, in this order: the GPU as its index in the record's `gpus` list, the status as
its index in `fit.statuses` (memory.fit STATUSES); total_bytes only where it differs from the method's, and no
suggestion before it where there is none (a cell that fits)."""
MULTI_FIELDS = ("num_gpus", "sharding", "total_bytes", "required_bytes", "offload_optimizer", "offload_params")
"""A multi-GPU suggestion as a list in this order, cut after its last field that is not the default
(required_bytes: total_bytes; the offloads: false)."""
MITIGATION_WORDS = ("settings_changes",)
"""What a mitigation changes, kept once by name in `fit.mitigations` where every cell says the same; its description
follows from its name and changes (memory.mitigations.describe)."""
MITIGATION_FIELDS = ("name", "total_bytes", "required_bytes")
"""A mitigation a cell tried, as an entry of `fit.tried`: a list in this order, required_bytes left out where it
equals total_bytes, and its own {settings_changes} last where they differ from `fit.mitigations`."""
GPU_FIELDS = ("name", "usable_gib", "arch")
"""A row of the record's `gpus`, in this order, then {user_defined, gpu_defaults} where it has either; usable_bytes
follows from usable_gib (`hfmem gpus` lists vendors, their memory figures, aliases and where each comes from)."""
BREAKDOWN_FIELDS = tuple(f.name for f in fields(MemoryBreakdown))
"""A breakdown's terms: the record writes the ones that are not zero."""
TIME_FIELDS = ("seconds", "tokens_per_s", "mfu", "hfu", "bound", "dtype", "cost_usd")
"""A cell's step time (reporting.timing) as a list in this order, the cost only with a token budget (--tokens) on a
GPU with a price (the report's `prices`); the index in `fit.reasons` of why there is none. The budget's tokens,
hours, GPU-hours and price follow from the plan's tokens, the throughput and the GPU's price (units.budget) and are
put back on reading; the roofline terms are in `fastest_and_cheapest`."""


def changed(base: dict[str, Any], full: dict[str, Any]) -> dict[str, Any]:
    """The entries of `full` whose value differs from (or is missing in) `base`."""
    return {k: v for k, v in full.items() if k not in base or base[k] != v}


def written(b: dict[str, int]) -> dict[str, int]:
    """A breakdown as the record writes it: its terms that are not zero."""
    return {k: v for k, v in b.items() if v != 0}


def gpu_rows(found: list[dict[str, Any]]) -> list[list[Any]]:
    """The GPUs of full cells (memory.fit `Fit.to_dict`) as GPU_FIELDS rows in the cells' order, each with the
    defaults it cannot run."""
    table: dict[str, list[Any]] = {}
    for cell in found:
        gpu = cell["gpu"]
        row = table.setdefault(gpu["name"], [gpu[k] for k in GPU_FIELDS] + [
            {"user_defined": True} if gpu["user_defined"] else {}])
        if cell["gpu_defaults"] is not None:
            row[-1].setdefault("gpu_defaults", cell["gpu_defaults"])
    return [row if row[-1] else row[:-1] for row in table.values()]


def gpus(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The record's GPUs in full by name, in the order rows index them: usable_bytes put back (where usable_gib is
    a number); a compact record lists [name, usable GiB] pairs."""
    out = {}
    for row in report.get("gpus") or []:
        g = dict(zip(GPU_FIELDS, row)) | (row[len(GPU_FIELDS)] if len(row) > len(GPU_FIELDS) else {})
        usable = g.get("usable_gib")
        number = isinstance(usable, (int, float)) and not isinstance(usable, bool)
        out[g["name"]] = g | ({"usable_bytes": Gpu(g["name"], usable).usable_bytes} if number else {})
    return out


def compact_estimates(ests: list[dict[str, Any]], training: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Estimate dicts (memory.estimate) for the record, and the notes they index (the report's `estimate_notes`):
    settings that differ from the plan's `training`, assumptions that differ from their settings and the previous
    estimate's, no zero byte term, its activation figures and each layer's terms as they differ from the previous
    estimate's (its layer of the same kind), notes as indices; no GiB copy of the byte terms, no `phases` (they
    follow from the byte terms) and no `model` (the report's architecture and parameters say it)."""
    out = []
    notes: dict[str, int] = {}
    for previous, est in zip([None, *ests], ests):
        base = (previous["assumptions"] if previous else {}) | est["settings"]
        act = _activations(est["activations"], previous["activations"] if previous else None)
        out.append({k: v for k, v in est.items() if k not in ("per_gpu_gib", "model", "phases")}
                   | {"settings": changed(training, est["settings"]), "assumptions": changed(base, est["assumptions"]),
                      "per_gpu_bytes": written(est["per_gpu_bytes"]),
                      "activations": act | {"notes": [notes.setdefault(n, len(notes)) for n in act["notes"]]},
                      "notes": [notes.setdefault(n, len(notes)) for n in est["notes"]]})
    return out, list(notes)


def _activations(act: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
    """An estimate's activations as written: the first estimate's (`previous` None) without its zero figures; the
    others' settings, figures, layers and each layer's terms where they differ from the previous estimate's (its
    layer of the same kind), null for a term it lacks."""
    kinds = {layer["kind"]: layer for layer in (previous or {}).get("per_layer", [])}
    layers = []
    for layer in act["per_layer"]:
        base = kinds.get(layer["kind"], {"terms": {}})
        terms = changed(base["terms"], layer["terms"]) | {k: None for k in base["terms"] if k not in layer["terms"]}
        layers.append({"kind": layer["kind"]} | changed(base, layer) | {"terms": terms})
    same = previous or {k: 0 for k in ACTIVATION_FIGURES}
    return changed(same, act) | {"per_layer": layers, "notes": act["notes"]}


def _activations_of(act: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
    """An estimate's activations in full (what `_activations` left out put back from the previous estimate's)."""
    kinds = {layer["kind"]: layer for layer in (previous or {}).get("per_layer", [])}
    layers = []
    for layer in act["per_layer"]:
        base = kinds.get(layer["kind"], {"terms": {}})
        terms = {k: v for k, v in (base["terms"] | layer["terms"]).items() if v is not None}
        layers.append(base | layer | {"terms": terms})
    same = {k: v for k, v in (previous or {}).items() if k not in ("per_layer", "notes")}
    return {k: 0 for k in ACTIVATION_FIGURES} | same | act | {"per_layer": layers}


def breakdown(terms: dict[str, int]) -> dict[str, int]:
    """A breakdown as written (`written`) in full: every MemoryBreakdown term."""
    return {k: terms.get(k, 0) for k in BREAKDOWN_FIELDS}


def written_training(training: dict[str, Any]) -> dict[str, Any]:
    """The plan's training settings as the record writes them: those that differ from hfmem's defaults."""
    return changed(TrainingSettings().to_dict(), training)


def training(report: dict[str, Any]) -> dict[str, Any]:
    """The plan's training settings in full (what `written_training` left out put back)."""
    return TrainingSettings().to_dict() | ((report.get("plan") or {}).get("training") or {})


def estimates(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each estimate with its settings, assumptions, byte terms, activations and model in full (what
    `compact_estimates` left out)."""
    plan = training(report)
    arch = report.get("architecture") or {}
    model = {"model_type": arch.get("model_type"), "architecture": arch.get("architecture"),
             "parameters": (report.get("parameters") or {}).get("total"), "num_layers": arch.get("num_layers")}
    notes = report.get("estimate_notes") or []
    out: list[dict[str, Any]] = []
    for est in report.get("estimates") or []:
        settings = plan | est["settings"]
        previous = out[-1] if out else {}
        act = _activations_of(est["activations"], previous.get("activations"))
        b = breakdown(est["per_gpu_bytes"])
        out.append({"model": model} | est | {
            "settings": settings, "assumptions": previous.get("assumptions", {}) | settings | est["assumptions"],
            "per_gpu_bytes": b, "phases": phases(MemoryBreakdown(**b)),
            "activations": act | {"notes": [notes[i] for i in act["notes"]]},
            "notes": [notes[i] for i in est["notes"]]})
    return out


def fit_table(found: list[dict[str, Any]], ests: list[dict[str, Any]], gpu_list: list[list[Any]],
              hfu_assumed: dict[str, float]) -> dict[str, Any]:
    """The `fit` table of full cells (memory.fit `Fit.to_dict` plus `time`) whose methods' full estimates are
    `ests` and whose GPUs are `gpu_list` (gpu_rows); `hfu_assumed`: the utilisation a GPU is timed at, by its
    architecture (the `arch` of its GPU row)."""
    by_method = {e["method"]: e for e in ests}
    entries = gpus({"gpus": gpu_list})
    order = {name: i for i, name in enumerate(entries)}
    words: dict[str, dict[str, Any]] = {}
    tried: dict[str, int] = {}
    variants: dict[str, int] = {}
    reasons: dict[str, int] = {}
    methods: dict[str, dict[str, list[Any]]] = {}
    for cell in found:
        own, name = cell["gpu_defaults"], cell["gpu"]["name"]
        values = cell | {"gpu": order[name], "status": STATUSES.index(cell["status"]),
                         "variant": _variant(cell, by_method[cell["method"]], variants),
                         "gpu_defaults": own if own is None or own != entries[name].get("gpu_defaults") else True,
                         "multi_gpu": _multi(cell["multi_gpu"]),
                         "multi_gpu_with_checkpointing": _multi(cell["multi_gpu_with_checkpointing"]),
                         "mitigations": [_tried(m, words, tried) for m in cell["mitigations"]],
                         "time": _time(cell["time"], reasons)}
        row = [values[c] for c in FIT_COLUMNS]
        while FIT_COLUMNS[len(row) - 1] in ROW_DEFAULTS and row[-1] == ROW_DEFAULTS[FIT_COLUMNS[len(row) - 1]]:
            row.pop()
        methods.setdefault(cell["method"], {"rows": []})["rows"].append(row)
    return {"columns": list(FIT_COLUMNS), "statuses": list(STATUSES), "methods": methods,
            "variants": [json.loads(v) for v in variants], "mitigations": words,
            "tried": [json.loads(t) for t in tried], "reasons": list(reasons), "hfu_assumed": hfu_assumed}


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
        **compact_tables(rows, {name: g["usable_gib"] for name, g in gpus(report).items()})}


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


def _row_values(table: dict[str, Any], names: list[str], method: str, group: dict[str, Any],
                row: list[Any]) -> dict[str, Any]:
    """A row as a dict by column, its GPU and status indices put back as names (`names`: the record's GPUs in
    order); in a compact record with its method's total."""
    c = ROW_DEFAULTS | dict(zip(table["columns"], row))
    c |= {"method": method, "gpu": names[c["gpu"]], "status": table["statuses"][c["status"]]}
    return {"total_bytes": group["total_bytes"], "suggestion": None} | c if "total_bytes" in group else c


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
    """The index of the cell's differences from its estimate in `seen` (added if new; settings, assumptions and
    per_gpu_bytes, each only where there is one, shared by every method that differs the same way); None where there
    are none."""
    settings = changed(est["settings"], cell["settings"])
    assumptions = changed(est["assumptions"] | settings, cell["assumptions"])
    own = cell["asked"]["per_gpu_bytes"]
    if not settings and not assumptions and own == est["per_gpu_bytes"]:
        return None
    variant = {"settings": settings, "assumptions": assumptions,
               "per_gpu_bytes": None if own == est["per_gpu_bytes"] else written(own)}
    return seen.setdefault(json.dumps({k: v for k, v in variant.items() if v}), len(seen))


def _time(time: dict[str, Any] | None, reasons: dict[str, int]) -> list[Any] | int | None:
    """A step time as TIME_FIELDS, or the index in `reasons` of why there is none (added if new)."""
    if time is None or time["seconds"] is None:
        return None if time is None else reasons.setdefault(time["reason"], len(reasons))
    return [time[k] for k in TIME_FIELDS if k in time]


def _time_of(values: list[Any] | int | None, cell: dict[str, Any], table: dict[str, Any],
             spend: tuple[float | None, dict[str, float]]) -> dict[str, Any] | None:
    """A row's time in full: its figures by name (at its GPU's fit.hfu_assumed) with its token budget's (`spend`:
    the plan's tokens and the price by GPU name), or its reason, and the setup it is for (memory.advice.timed_setup
    of the cell, as when it was timed)."""
    if values is None:
        return None
    kind = timed_setup(cell)[0]
    if isinstance(values, int):
        return {"seconds": None, "reason": table["reasons"][values], "setup": kind}
    own = dict(zip(TIME_FIELDS, values))
    tokens, prices = spend
    spent = budget(own["tokens_per_s"], timed_gpus(cell, kind), tokens, prices.get(cell["gpu"]["name"]))
    hfu_assumed = (table.get("hfu_assumed") or {}).get(cell["gpu"].get("arch"))
    return spent | own | {"setup": kind, "hfu_assumed": hfu_assumed}


def _multi(multi: dict[str, Any] | None) -> list[Any] | None:
    """A multi-GPU suggestion as MULTI_FIELDS, cut after its last field that is not the default."""
    if multi is None:
        return None
    values = [multi[k] for k in MULTI_FIELDS]
    defaults = [None, None, None, multi["total_bytes"], False, False]
    while len(values) > 3 and values[-1] == defaults[len(values) - 1]:
        values.pop()
    return values


def _tried(m: dict[str, Any], words: dict[str, dict[str, Any]], tried: dict[str, int]) -> int:
    """A mitigation's index in `tried` (added if new), its words kept in `words` by name (the first cell's)."""
    mine = {k: m[k] for k in MITIGATION_WORDS}
    entry = [m[k] for k in MITIGATION_FIELDS]
    entry = entry[:-1] if m["required_bytes"] == m["total_bytes"] else entry
    if words.setdefault(m["name"], mine) != mine:
        entry.append(mine)
    return tried.setdefault(json.dumps(entry), len(tried))


def cells(report: dict[str, Any], *, skip_bad: bool = False) -> list[dict[str, Any]]:
    """Every fit cell in full: its method, `gpu` (its table entry), status, `asked` (fits, setup, totals,
    headroom, host bytes, shortfall, phase, per-GPU breakdown), searches, mitigations, suggestion, settings,
    assumptions, time, and `src` (where its row is). With `skip_bad`, a row that does not read (an edited or foreign
    file) is left out. A compact record's cells hold what its columns give (no breakdown, settings or mitigations)."""
    table = report.get("fit")
    if not isinstance(table, dict):
        return []
    gpu_entries = gpus(report)
    names = list(gpu_entries)
    ests = estimates(report)
    by_gpu = (report.get("prices") or {}).get("by_gpu") or {}
    spend = (report.get("plan") or {}).get("tokens"), {name: entry[0] for name, entry in by_gpu.items()}
    out = []
    for method, group in (table.get("methods") or {}).items():
        for j, row in enumerate(group["rows"]):
            try:
                c = _row_values(table, names, method, group, row)
                out.append(_cell(_row_path(method, j), c, gpu_entries, ests, table, spend))
            except (KeyError, TypeError, ValueError, AttributeError, IndexError):
                if not skip_bad:
                    raise
    return out


def _cell(src: str, c: dict[str, Any], gpu_entries: dict[str, dict[str, Any]], ests: list[dict[str, Any]],
          table: dict[str, Any], spend: tuple[float | None, dict[str, float]]) -> dict[str, Any]:
    """One row's cell in full (`cells`); `src`: the row's path in the record; `spend`: as `_time_of` reads it."""
    variants = table.get("variants") or []
    gpu = gpu_entries.get(c["gpu"], {"name": c["gpu"]})
    k, est = next(((k, e) for k, e in enumerate(ests) if e["method"] == c["method"]), (None, None))
    variant = variants[c["variant"]] if c.get("variant") is not None else {}
    fits = c["status"] == "fits"
    asked: dict[str, Any] = {"fits": fits, "total_bytes": c.get("total_bytes")}
    settings = assumptions = None
    total_src = None
    if est is not None:
        settings = est["settings"] | variant.get("settings", {})
        assumptions = est["assumptions"] | variant.get("settings", {}) | variant.get("assumptions", {})
        own = variant.get("per_gpu_bytes")
        b = breakdown(own) if own else est["per_gpu_bytes"]
        total_src = f"fit.variants.{c['variant']}.per_gpu_bytes.total" if own else f"estimates.{k}.per_gpu_bytes.total"
        asked |= {"total_bytes": b["total"], "num_gpus": settings["num_gpus"],
                  "sharding": settings["resolved_sharding"],
                  "offload_optimizer": settings["offload_optimizer"], "offload_params": settings["offload_params"],
                  "required_bytes": b["required"], "headroom_bytes": gpu["usable_bytes"] - b["required"],
                  "host_per_node_bytes": b["host_per_node"],
                  "short_of": shortfall(fits, b["required"], b["host_per_node"], gpu["usable_bytes"],
                                        settings["host_ram_gib"]),
                  "phase": phases(MemoryBreakdown(**b))["largest"], "per_gpu_bytes": b}
    mitigations = [_mitigation_of(m, table) for m in c.get("mitigations") or []]
    cell = {
        "src": src, "total_src": total_src, "method": c["method"], "gpu": gpu, "status": c["status"], "asked": asked,
        "max_micro_batch_size": c.get("max_micro_batch_size"), "max_seq_len": c.get("max_seq_len"),
        "max_seq_len_capped": c.get("max_seq_len_capped"),
        "multi_gpu": _multi_of(c.get("multi_gpu"), (settings or {}).get("gradient_checkpointing")),
        "multi_gpu_with_checkpointing": _multi_of(c.get("multi_gpu_with_checkpointing"), "full"),
        "mitigation": mitigations[0] if mitigations else None, "mitigations": mitigations,
        "settings": settings, "assumptions": assumptions,
        "gpu_defaults": gpu.get("gpu_defaults") if c.get("gpu_defaults") is True else c.get("gpu_defaults"),
    }
    cell["time"] = _time_of(c.get("time"), cell, table, spend)
    return cell | {"suggestion": c["suggestion"] if "suggestion" in c else suggestion(cell),
                   "gpus_needed": c["gpus_needed"] if "gpus_needed" in c else (cell["multi_gpu"] or {}).get("num_gpus")}


def row_refs(found: list[dict[str, Any]]) -> list[list[Any]]:
    """Each full cell's row in the table `fit_table` writes of them, as [method, index under the method]."""
    seen: dict[str, int] = {}
    out = []
    for cell in found:
        out.append([cell["method"], seen.get(cell["method"], 0)])
        seen[cell["method"]] = out[-1][1] + 1
    return out


def picks(report: dict[str, Any], found: list[dict[str, Any]] | None = None) -> dict[str, dict[str, Any] | None]:
    """`fastest_and_cheapest` in full: each pick as its row's setup (`setup_of`) whose time carries the roofline
    terms the pick keeps; `found`: the report's cells where the caller has decoded them already."""
    written = report.get("fastest_and_cheapest") or {}
    if found is None and any(written.values()):
        found = cells(report)
    out: dict[str, dict[str, Any] | None] = dict.fromkeys(written)
    for label, pick in written.items():
        if pick is not None:
            setup = setup_of(found, pick["row"])
            out[label] = setup | {"time": setup["time"] | {"terms": pick["terms"]}}
    return out


def ranked(report: dict[str, Any], found: list[dict[str, Any]] | None = None) -> list[dict[str, Any]] | None:
    """`fit_ranking` in full: each ranked row's setup (`setup_of`), best first; None without --rank; `found` as
    `picks` takes it."""
    refs = report.get("fit_ranking")
    if refs is None:
        return None
    found = cells(report) if found is None else found
    return [setup_of(found, ref) for ref in refs]


def setup_of(found: list[dict[str, Any]], ref: list[Any]) -> dict[str, Any]:
    """The setup (advice.picked_setup) of the cell a [method, index] row reference (`row_refs`) names."""
    src = _row_path(*ref)
    return picked_setup(next(c for c in found if c["src"] == src))


def _row_path(method: str, j: int) -> str:
    """Where row `j` under `method` is in the record: a cell's `src`."""
    return f"fit.methods.{method}.rows.{j}"


def path(cell: dict[str, Any], column: str) -> str:
    """Where a decoded cell's figure is in the record, e.g. "fit.methods.lora.rows.4.3" (a chart's data-src); its
    total is its breakdown's (the estimate's or its variant's)."""
    return cell["total_src"] if column == "total_bytes" else f"{cell['src']}.{FIT_COLUMNS.index(column)}"


def _multi_of(values: list[Any] | None, checkpointing: str | None) -> dict[str, Any] | None:
    if values is None:
        return None
    multi = dict(zip(MULTI_FIELDS, values))
    return {"required_bytes": multi["total_bytes"], "offload_optimizer": False, "offload_params": False} | multi | {
        "gradient_checkpointing": checkpointing, "equivalent": EQUIVALENT.get(multi["sharding"])}


def _mitigation_of(index: int, table: dict[str, Any]) -> dict[str, Any]:
    """A row's mitigation in full: its `tried` entry, with its changes from `mitigations` unless it has its own, and
    their description."""
    values = table["tried"][index]
    own = values[-1] if isinstance(values[-1], dict) else (table.get("mitigations") or {}).get(values[0], {})
    figures = [v for v in values[1:] if not isinstance(v, dict)]
    return dict(zip(MITIGATION_FIELDS, (values[0], figures[0], figures[-1]))) | {
        "description": describe(values[0], own["settings_changes"])} | own
