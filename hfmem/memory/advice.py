"""What to do where a method does not fit a GPU: the least intrusive change, as a short phrase.

Shared by the terminal table, the pull-request comment and the config diff, so they always agree.
Order of preference: a same-method change on one GPU (checkpointing, micro-batch 1 with
accumulation, 8-bit AdamW), a few GPUs with the cheapest sharding (with checkpointing if that needs
fewer), another method (LoRA, QLoRA), CPU offload, and only then many GPUs.
"""

from __future__ import annotations

from typing import Any

from hfmem.units import GIB

SHARDING_NAMES = {"none": "1 GPU", "ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3",
             "fsdp_full_shard": "FSDP", "fsdp_shard_grad_op": "FSDP-SGO"}
"""Short names of the shardings, as the table, the comment and the assumes line write them."""


def multi_gpu_text(multi: dict[str, Any] | None) -> str:
    """E.g. "8×ZeRO-3+ckpt": the GPU count, the sharding, and offload/checkpointing when the search used them."""
    if not multi:
        return ""
    offload = "+offload" if multi.get("offload_optimizer") or multi.get("offload_params") else ""
    ckpt = "+ckpt" if multi.get("gradient_checkpointing", "off") != "off" else ""
    sharding = str(multi.get("sharding", ""))
    return f"{multi['num_gpus']}×{SHARDING_NAMES.get(sharding, sharding)}{offload}{ckpt}"


_SAME_METHOD = {"sharded_checkpoints": "sharded save", "smaller_eval_batch": "eval b=1",
                "layerwise_generation_gather": "gen layer gather", "smaller_generation_batch": "gen b={}",
                "gradient_checkpointing": "+ckpt", "smaller_micro_batch": "b=1+accum",
                "checkpointing_and_smaller_micro_batch": "+ckpt b=1", "8bit_optimizer": "8-bit+ckpt"}
_OTHER = {"lora": "LoRA+ckpt", "qlora": "QLoRA+ckpt", "zero3_offload": "offload", "zero3_offload_params": "ZeRO-Inf."}
MAX_SUGGESTED_GPUS = 64


def _label(mitigation: dict[str, Any]) -> str:
    """A mitigation's short name ("gen b=2": the generation batch it sets); one that also evaluates a sequence at a
    time says so ("+ckpt eval b=1")."""
    changes = mitigation.get("settings_changes") or {}
    label = (_SAME_METHOD | _OTHER)[mitigation["name"]].format(changes.get("generation_batch_size"))
    also = mitigation["name"] != "smaller_eval_batch" and changes.get("eval_batch_size") == 1
    return f"{label} eval b=1" if also else label


def short_gib(n_bytes: float | None) -> str:
    """GiB without the unit: no decimals from 100 up, one below."""
    if n_bytes is None:
        return ""
    value = n_bytes / GIB
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def same_gpus_change(fit: dict[str, Any]) -> bool:
    """Whether there is a recommendation and it keeps the GPUs asked (a mitigation), rather than asking for more."""
    advice = recommendation(fit)
    return bool(advice) and advice != multi_gpu_text(fewest_gpus(fit))


def fewest_gpus(fit: dict[str, Any]) -> dict[str, Any] | None:
    """The multi-GPU suggestion (plain or with checkpointing) that needs the fewest GPUs."""
    options = [m for m in (fit.get("multi_gpu"), fit.get("multi_gpu_with_checkpointing")) if m]
    return min(options, key=lambda m: m["num_gpus"]) if options else None


SETUP_KEYS = ("num_gpus", "sharding", "offload_optimizer", "offload_params", "gradient_checkpointing")
"""The fields of a multi-GPU suggestion that make a setup of its own (a cell that needs more GPUs is timed on it)."""


def timed_setup(fit: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The setup a cell is timed on and its setting changes: ("asked", {}) where it fits, ("change", the named
    change's settings) where a change on the same GPUs makes it fit, ("suggested GPUs", the multi-GPU setup) where it
    needs more; None where nothing fits. The same setup its verdict names, so a cell's time is its advice's."""
    if fit["status"] == "fits":
        return "asked", {}
    advice, mitigation = recommended(fit)
    if mitigation is not None:
        return "change", dict(mitigation["settings_changes"])
    multi = fewest_gpus(fit)
    if not advice or multi is None or multi["num_gpus"] < 2:
        return None
    return "suggested GPUs", {k: multi[k] for k in SETUP_KEYS}


def setup_label(fit: dict[str, Any]) -> str:
    """The short name of the setup a cell is timed on where it is not the one asked: the change ("+ckpt",
    "QLoRA+ckpt") or the GPUs ("3×ZeRO-3+ckpt"); "" where it fits as asked or nothing fits."""
    found = timed_setup(fit)
    if found is None or found[0] == "asked":
        return ""
    advice, mitigation = recommended(fit)
    return _label(mitigation) if mitigation else advice


def timed_gpus(fit: dict[str, Any], setup: str) -> int:
    """How many GPUs a cell's `setup` (timed_setup's kind) runs on: the suggestion's where it needs more, else
    the count asked."""
    return fewest_gpus(fit)["num_gpus"] if setup == "suggested GPUs" else fit["asked"]["num_gpus"]


def picked_setup(fit: dict[str, Any]) -> dict[str, Any]:
    """A timed cell as a setup: method, GPU, GPU count (timed_gpus), the change or GPUs it is timed with where not
    as asked (setup_label) and its time."""
    return {"method": fit["method"], "gpu": fit["gpu"]["name"], "num_gpus": timed_gpus(fit, fit["time"]["setup"]),
            "change": setup_label(fit) or None, "time": fit["time"]}


def recommended(fit: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """The least intrusive way to make a fit entry work, e.g. "+ckpt 21.3" (GiB) or "8×ZeRO-3+ckpt" ("" if none),
    and the `mitigations[]` entry it names (None when it asks for several GPUs)."""
    listed = fit.get("mitigations") or ([fit["mitigation"]] if fit.get("mitigation") else [])
    by_name = {m["name"]: m for m in listed}
    multi = fewest_gpus(fit)
    for name in _SAME_METHOD:
        if name in by_name:
            return f"{_label(by_name[name])} {short_gib(by_name[name].get('total_bytes'))}".strip(), by_name[name]
    if multi and 1 < multi["num_gpus"] <= MAX_SUGGESTED_GPUS:
        return multi_gpu_text(multi), None
    for name in _OTHER:
        if name in by_name:
            return f"{_label(by_name[name])} {short_gib(by_name[name].get('total_bytes'))}".strip(), by_name[name]
    return multi_gpu_text(multi), None


def recommendation(fit: dict[str, Any]) -> str:
    """The short phrase of `recommended`: what the tables print after "→"."""
    return recommended(fit)[0]


VERDICTS = ("fits", "change", "gpus", "none")
"""A cell's verdict: fits as asked, fits the same GPUs with a change, needs (more) GPUs, no fit found."""


def verdict(fit: dict[str, Any]) -> str:
    """The fit entry's verdict, one of VERDICTS."""
    if fit["status"] == "fits":
        return "fits"
    if not recommendation(fit):
        return "none"
    return "change" if same_gpus_change(fit) else "gpus"


def verdict_parts(fit: dict[str, Any]) -> tuple[str, str, str]:
    """(verdict, GiB needed, what follows): "b≤N" when it fits, else the recommendation."""
    kind, total = verdict(fit), short_gib(fit["asked"]["total_bytes"])
    if kind == "fits":
        return kind, total, f"b≤{fit['max_micro_batch_size']:,}"
    return kind, total, "→ " + (recommendation(fit) or "no fit")


def fit_grid(report: dict[str, Any]) -> tuple[list[str], list[tuple[str, float, dict[str, dict[str, Any]]]]]:
    """The fit matrix as rows: methods (column order), then per GPU its name, usable GiB and cells (each in full,
    hfmem.memory.record) by method."""
    from hfmem.memory.record import cells

    found = cells(report)
    methods = list(dict.fromkeys(f["method"] for f in found))
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for fit in found:
        rows.setdefault(fit["gpu"]["name"], {})[fit["method"]] = fit
    return methods, [(name, next(iter(by.values()))["gpu"]["usable_gib"], by) for name, by in rows.items()]
