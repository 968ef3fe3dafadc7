"""A model's serving answer across GPUs as a JSON-ready dict: the weights, the KV cache per token and per
sequence, and for each GPU the engine's breakdown, capacity and verdict cell, with the change that would make a
failing cell fit (fp8 KV, then more tensor-parallel GPUs)."""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from typing import Any

from hfmem.hardware.gpus import Gpu
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


def cell(model: ModelReport, gpu: Gpu, settings: ServingSettings, result: ServingEstimate) -> str:
    """The verdict as the fit matrix writes it: ✓ with the KV pool and the concurrency at the context, ⚠ where
    an fp8 cache would fit, ✗ with the tensor-parallel degree that would."""
    if result.fits:
        times = f"{math.floor(result.concurrency_at_context):,}×"
        return f"✓ {result.kv_bytes / GIB:.1f} GiB KV · {times} at {_k(settings.context)}"
    if (kv := KV_DTYPE_BYTES.get(settings.kv_cache_dtype)) is None or kv > 1:
        fp8 = replace(settings, kv_cache_dtype="fp8")
        if result.kv_bytes > 0 and gpu_estimate(model, gpu, fp8)[0].fits:
            return "⚠ → fp8 KV"
    for tp in TP_STEPS:
        if tp > settings.tp and gpu_estimate(model, gpu, replace(settings, tp=tp))[0].fits:
            return f"✗ → TP{tp}"
    return "✗"


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
        rows.append({"gpu": gpu.name, "cell": cell(model, gpu, settings, result)} | result.to_dict())
    return {
        "model": model.model, "revision": model.revision, "sha": model.sha,
        "settings": asdict(settings),
        "engine": {"name": profile.name, "version": profile.version, "rule": profile.rule,
                   "defaults": {k: asdict(v) for k, v in profile.defaults.items()},
                   "not_modelled": list(profile.not_modelled)},
        "sizes": sizes, "gpus": rows, "notes": list(model.notes),
    }
