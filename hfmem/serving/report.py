"""A model's serving answer across GPUs as a JSON-ready dict: the weights, the KV cache per token and per
sequence, and for each GPU the engine's breakdown, capacity and verdict cell, with the change that would make a
failing cell fit (fp8 KV, then more tensor-parallel GPUs): the serving verdict every surface reads (`ServingFit`)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from hfmem.hardware.gpus import Gpu
from hfmem.memory.fit import MARKS
from hfmem.model.load import ModelReport
from hfmem.serving.capacity import ServingEstimate, ServingSettings, estimate
from hfmem.serving.engines import engine
from hfmem.serving.kv import KV_DTYPE_BYTES, KvLayout, kv_element_bytes, kv_layout, serving_dtype
from hfmem.serving.weights import MXFP4_MARLIN_ARCHS, Weights, mxfp4_marlin_padding, weight_bytes
from hfmem.units import GIB

TP_STEPS = (2, 4, 8, 16)
"""Tensor-parallel degrees a failing cell is retried at."""


def gpu_estimate(model: ModelReport, gpu: Gpu, settings: ServingSettings) -> tuple[ServingEstimate, dict[str, Any]]:
    """The estimate for one GPU of the deployment `settings` describes, and the sizes it was computed from."""
    arch = model.architecture
    dtype = serving_dtype(arch.dtype, settings.engine)
    weights = weight_bytes(arch, model.inventory, model.checkpoint, settings.quantization, dtype, settings.tp,
                           settings.pp)
    element = kv_element_bytes(settings.kv_cache_dtype, dtype)
    layout = kv_layout(arch, model.config, element, settings.tp, settings.pp)
    if settings.gpu_layers is not None and settings.gpu_layers < arch.num_layers:
        weights, layout = offloaded(weights, layout, settings.gpu_layers / arch.num_layers)
    sizes = {"dtype": dtype, "weights_total_bytes": weights.total_bytes, "weights_source": weights.source,
             "kv_element_bytes": element, "kv": asdict(layout)}
    marlin = 0
    if settings.engine == "vllm" and not settings.quantization and gpu.arch in MXFP4_MARLIN_ARCHS:
        marlin = mxfp4_marlin_padding(arch, model.config, settings.tp, settings.pp)
    return estimate(arch, weights.per_gpu_bytes, layout, gpu.usable_bytes, settings, gpu.name, marlin), sizes


def offloaded(weights: Weights, layout: KvLayout, share: float) -> tuple[Weights, KvLayout]:
    """llama.cpp with -ngl below the layer count: the GPU holds that share of the repeating layers' weights and
    KV cells (the output layer stays on the CPU too; llama.cpp offloads it only past the last layer)."""
    kept = Weights(weights.total_bytes, round(weights.per_gpu_bytes * share), weights.source)
    return kept, replace(layout, full_bytes_per_token=layout.full_bytes_per_token * share,
                         window_bytes_per_token=layout.window_bytes_per_token * share,
                         state_bytes_per_sequence=layout.state_bytes_per_sequence * share)


@dataclass(frozen=True)
class ServingFit:
    """One GPU's serving verdict (memory.fit.VERDICTS) for a deployment, decided once here: fits as asked; "change",
    an fp8 KV cache makes it fit; "gpus", the tensor-parallel degree that fits; "none". Every surface reads it."""

    gpu: Gpu
    verdict: str
    advice: dict[str, Any] | None
    """{kind, settings_changes (the deployment that fits), num_gpus per replica, kv_bytes, kv_tokens,
    concurrency_at_context}; None where it fits as asked or nothing does."""
    result: ServingEstimate
    num_gpus: int
    """GPUs per replica as asked (tp x pp)."""

    @property
    def fits(self) -> bool:
        return self.verdict == "fits"

    def to_dict(self, context: int) -> dict[str, Any]:
        """The cell as the report writes it: the verdict, its advice, the figures as asked and its words."""
        weights = sum(t.bytes for t in self.result.terms if t.kind == "weights")
        cell = {"gpu": self.gpu.name, "verdict": self.verdict, "fits": self.fits, "num_gpus": self.num_gpus,
                "weights_bytes": round(weights), "kv_bytes": round(self.result.kv_bytes),
                "kv_tokens": self.result.kv_tokens,
                "concurrency_at_context": round(self.result.concurrency_at_context, 2),
                "context_at_concurrency": self.result.context_at_concurrency, "advice": self.advice}
        return cell | {"words": words(cell, context)}


def serving_fit(model: ModelReport, gpu: Gpu, settings: ServingSettings) -> ServingFit:
    """The verdict on one GPU: as asked, else an fp8 cache where the weights fit and a wider cache is asked, else the
    smallest TP_STEPS degree that fits."""
    result = gpu_estimate(model, gpu, settings)[0]
    asked = settings.tp * settings.pp
    if result.fits:
        return ServingFit(gpu, "fits", None, result, asked)
    trials: list[tuple[str, dict[str, Any]]] = []
    if ((kv := KV_DTYPE_BYTES.get(settings.kv_cache_dtype)) is None or kv > 1) and result.kv_bytes > 0:
        trials.append(("change", {"kv_cache_dtype": "fp8"}))
    trials += [("gpus", {"tp": tp}) for tp in TP_STEPS if tp > settings.tp]
    for kind, changes in trials:
        changed = replace(settings, **changes)
        trial = gpu_estimate(model, gpu, changed)[0]
        if trial.fits:
            advice = {"kind": kind, "settings_changes": changes, "num_gpus": changed.tp * changed.pp,
                      "kv_bytes": round(trial.kv_bytes), "kv_tokens": trial.kv_tokens,
                      "concurrency_at_context": round(trial.concurrency_at_context, 2)}
            return ServingFit(gpu, kind, advice, result, asked)
    return ServingFit(gpu, "none", None, result, asked)


def words(cell: dict[str, Any], context: int) -> str:
    """A serving cell in words, after its mark: "38.0 GiB KV · 9× at 32K", "→ fp8 KV", "→ TP2", "" (none)."""
    if cell["verdict"] == "fits":
        return f"{cell['kv_bytes'] / GIB:.1f} GiB KV · {math.floor(cell['concurrency_at_context']):,}× at {_k(context)}"
    advice = cell["advice"]
    if advice is None:
        return ""
    changes = advice["settings_changes"]
    return "→ fp8 KV" if "kv_cache_dtype" in changes else f"→ TP{changes['tp']}"


def label(cell: dict[str, Any], context: int) -> str:
    """The cell as the fit matrix writes it: its verdict's mark and its words."""
    return f"{MARKS[cell['verdict']]} {words(cell, context)}".rstrip()


def _k(tokens: int) -> str:
    """16000 -> 16K, 32768 -> 32K, 4096 -> 4K, 500 -> 500."""
    return f"{round(tokens / 1000)}K" if tokens >= 1000 else str(tokens)


def serving_report(model: ModelReport, gpus: tuple[Gpu, ...], settings: ServingSettings) -> dict[str, Any]:
    """Every GPU's answer for one model and deployment, with the engine's profile and its cited defaults."""
    profile = engine(settings.engine)
    rows: list[dict[str, Any]] = []
    sizes: dict[str, Any] = {}
    for gpu in gpus:
        result, sizes = gpu_estimate(model, gpu, settings)
        verdict = serving_fit(model, gpu, settings).to_dict(settings.context)
        rows.append({"gpu": gpu.name, "cell": label(verdict, settings.context), "verdict": verdict["verdict"],
                     "advice": verdict["advice"]} | result.to_dict())
    return {
        "model": model.model, "revision": model.revision, "sha": model.sha,
        "settings": asdict(settings),
        "engine": {"name": profile.name, "version": profile.version, "rule": profile.rule,
                   "defaults": {k: asdict(v) for k, v in profile.defaults.items()},
                   "not_modelled": list(profile.not_modelled)},
        "sizes": sizes, "gpus": rows, "notes": list(model.notes),
    }
