"""A fit cell's verdict and advice as the tables print them: "✓ 35.3 b≤3", "⚠ 134 → 8-bit+ckpt 81.5",
"✗ 134 → 8×ZeRO-3+ckpt". The verdict and advice are the cell's own (memory.fit.advise); this only words them."""

from __future__ import annotations

from typing import Any

from hfmem.memory.mitigations import label
from hfmem.memory.record import cells
from hfmem.units import GIB

SHARDING_NAMES = {"none": "1 GPU", "ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3",
                  "fsdp_full_shard": "FSDP", "fsdp_shard_grad_op": "FSDP-SGO"}
"""Short names of the shardings, as the table, the comment and the assumes line write them."""


def short_gib(n_bytes: float | None) -> str:
    """GiB without the unit: no decimals from 100 up, one below."""
    if n_bytes is None:
        return ""
    value = n_bytes / GIB
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def multi_gpu_text(multi: dict[str, Any] | None) -> str:
    """E.g. "8×ZeRO-3+ckpt" or "16×FSDP2·TP8": the GPU count, the sharding or the model-parallel layout, and
    offload, checkpointing and rank-0 loading (RANK0_MARK) when the search used them."""
    if not multi:
        return ""
    offload = "+offload" if multi.get("offload_optimizer") or multi.get("offload_params") else ""
    ckpt = "+ckpt" if multi.get("gradient_checkpointing", "off") != "off" else ""
    load = RANK0_MARK if multi.get("model_loading") == "rank0" else ""  # the checkpoint loaded on rank 0 alone
    sharding = str(multi.get("sharding", ""))
    laid_out = multi.get("layout") or SHARDING_NAMES.get(sharding, sharding)  # "FSDP2·TP8", or the sharding
    return f"{multi['num_gpus']}×{laid_out}{offload}{ckpt}{load}"


RANK0_MARK = "†"
"""Marks GPUs whose checkpoint rank 0 alone loads (`rank0_line` says why)."""


def rank0_line(report: dict[str, Any]) -> str:
    """The footnote of RANK0_MARK where a cell's advice carries it; "" where none does."""
    if any((fit.get("advice") or {}).get("model_loading") == "rank0" for fit in cells(report)):
        return (f"{RANK0_MARK} rank 0 alone loads the checkpoint (--model-loading rank0): each rank's own copy "
                "outgrows host RAM")
    return ""


def advice_label(advice: dict[str, Any] | None) -> str:
    """The advice's short name without its figure: "+ckpt", "QLoRA+ckpt" or "8×ZeRO-3+ckpt"; "" for none."""
    if not advice:
        return ""
    if advice["kind"] == "gpus":
        return multi_gpu_text(advice)
    return label(advice["mitigation"], advice["settings_changes"])


def advice_text(fit: dict[str, Any]) -> str:
    """What the tables print after "→": a change with the GiB it needs ("+ckpt 21.3") or the GPUs ("8×ZeRO-3+ckpt");
    "" where it fits or nothing does."""
    advice = fit.get("advice")
    if not advice or fit.get("verdict") == "fits":
        return ""
    text = advice_label(advice)
    return f"{text} {short_gib(advice['total_bytes'])}" if advice["kind"] == "change" else text


def verdict_parts(fit: dict[str, Any]) -> tuple[str, str, str]:
    """(verdict, GiB needed, what follows): "b≤N" when it fits, else the advice."""
    kind, total = fit["verdict"], short_gib(fit["total_bytes"])
    if kind == "fits":
        return kind, total, f"b≤{fit['max_micro_batch_size']:,}"
    return kind, total, "→ " + (advice_text(fit) or "no fit")


def host_ram_line(report: dict[str, Any], nvme: bool = True) -> str:
    """The one-GPU offloads the verdicts left out because the GPU's machine lacks the host RAM, e.g. "host RAM short
    for offload: full ZeRO-Inf. 1,156 GiB/machine (T4 384, L4 768)": what each needs and each machine has; with
    `nvme`, where the machine's NVMe is known, what ZeRO-Infinity on NVMe would need and whether it fits ("..., on
    NVMe 1,154 GiB NVMe + 128 GiB RAM/machine, fits with --offload-device nvme (T4 384, 1,676 NVMe)"); "" where
    none."""
    groups: dict[tuple[str, str, float, float | None, float | None, bool], list[str]] = {}
    for fit in cells(report):
        if short := fit.get("host_ram_short"):
            disk = (short.get("nvme") or {}) if nvme else {}
            key = (fit["method"], short["mitigation"], short["needed_gib"], disk.get("needed_gib"),
                   disk.get("host_needed_gib"), bool(disk.get("fits")))
            has = f"{fit['gpu']['name']} {short['host_ram_gib']:,.0f}"
            groups.setdefault(key, []).append(has + (f", {disk['nvme_gib']:,.0f} NVMe" if disk else ""))
    parts = [f"{method} {label(name, {})} {need:,.0f} GiB/machine"
             + (f", on NVMe {on_disk:,.0f} GiB NVMe + {ram:,.0f} GiB RAM/machine" if on_disk is not None else "")
             + (", fits with --offload-device nvme" if fits else "")
             + f" ({'; '.join(has) if on_disk is not None else ', '.join(has)})"
             for (method, name, need, on_disk, ram, fits), has in groups.items()]
    return "host RAM short for offload: " + "; ".join(parts) if parts else ""


def offload_line(report: dict[str, Any]) -> str:
    """What the offloads the verdicts suggest need of each machine, e.g. "offload per machine: full NVMe offload
    1,154 GiB NVMe + 128 GiB RAM (T4)"; "" where no verdict is an offload."""
    groups: dict[tuple[str, str, int, int], list[str]] = {}
    for fit in cells(report):
        advice = fit.get("advice") or {}
        if fit.get("verdict") != "fits" and "host_per_node_bytes" in advice:
            key = (fit["method"], advice_label(advice), advice["host_per_node_bytes"],
                   advice.get("nvme_per_node_bytes", 0))
            groups.setdefault(key, []).append(fit["gpu"]["name"])
    parts = [f"{method} {name} " + (f"{nvme / GIB:,.0f} GiB NVMe + " if nvme else "") + f"{host / GIB:,.0f} GiB RAM "
             f"({', '.join(names)})" for (method, name, host, nvme), names in groups.items()]
    return "offload per machine: " + "; ".join(parts) if parts else ""


def setup_label(fit: dict[str, Any]) -> str:
    """The short name of the setup a cell is timed on where it is not the one asked: the change ("+ckpt",
    "QLoRA+ckpt") or the GPUs ("3×ZeRO-3+ckpt"); "" where it fits as asked or is not timed."""
    if fit.get("time") is None or fit["verdict"] == "fits":
        return ""
    return advice_label(fit.get("advice"))


def fit_grid(report: dict[str, Any]) -> tuple[list[str], list[tuple[str, float, dict[str, dict[str, Any]]]]]:
    """The fit matrix as rows: methods (column order), then per GPU its name, usable GiB and cells by method."""
    found = cells(report)
    methods = list(dict.fromkeys(f["method"] for f in found))
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for fit in found:
        rows.setdefault(fit["gpu"]["name"], {})[fit["method"]] = fit
    return methods, [(name, next(iter(by.values()))["gpu"]["usable_gib"], by) for name, by in rows.items()]


def serving_labels(report: dict[str, Any], marks: dict[str, str]) -> dict[str, str]:
    """The serving column (--method serve) by GPU name, each cell its verdict's mark in `marks` and its words
    (serving.report.words: "✓ 54.5 GiB KV · 27× at 16K", "⚠ → fp8 KV", "✗ → TP2"); {} without one."""
    from hfmem.serving.report import words

    serving = report.get("serving")
    if not serving:
        return {}
    context = serving["settings"]["context"]
    return {c["gpu"]: f"{marks[c['verdict']]} {words(c, context)}".rstrip() for c in serving["cells"]}


def serving_title(report: dict[str, Any]) -> str:
    """The serving column's heading: "serve (vllm)"."""
    return f"serve ({report['serving']['engine']['name']})"


def serving_settings_text(report: dict[str, Any]) -> str:
    """The serving column's assumptions for the assumes line, e.g. " · serve: vllm 0.9-0.11 (V1 engine), context
    16,000, concurrency 8, KV auto, weights as stored, TP1"; "" without one."""
    serving = report.get("serving")
    if not serving:
        return ""
    s, eng = serving["settings"], serving["engine"]
    weights = f"weights {s['quantization']}" if s["quantization"] else "weights as stored"
    return (f" · serve: {eng['name']} {eng['version']}, context {s['context']:,}, concurrency {s['concurrency']:,}, "
            f"KV {s['kv_cache_dtype']}, {weights}, TP{s['tp']}")


def serving_pick_line(report: dict[str, Any]) -> str:
    """The cheapest GPU that serves the target, e.g. "cheapest serving: 4× L4 (4 replicas) for 8 requests at
    16K tokens, $3.20/h"; "" without a serving column or a priced GPU that fits."""
    from hfmem.serving.report import words

    serving = report.get("serving") or {}
    pick = serving.get("cheapest")
    if not pick:
        return ""
    s = serving["settings"]
    cell = next(c for c in serving["cells"] if c["gpu"] == pick["gpu"])
    each = pick["num_gpus"] // pick["replicas"]
    how = f"{pick['replicas']} replica" + ("s" if pick["replicas"] > 1 else "") + (f" of TP{each}" if each > 1 else "")
    change = f", {words(cell, s['context']).removeprefix('→ ')}" if cell["verdict"] == "change" else ""
    return (f"cheapest serving: {pick['num_gpus']}× {pick['gpu']} ({how}{change}) for {s['concurrency']:,} "
            f"request" + ("s" if s["concurrency"] > 1 else "") + f" at {s['context']:,} tokens, "
            f"${pick['usd_per_hour']:,.2f}/h")
