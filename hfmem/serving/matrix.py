"""The fit matrix's serving column (--method serve): each GPU's serving verdict for one deployment, the cheapest
replicas that hold the target concurrency at the context, and the concurrency against context per GPU that the
HTML report charts. Pure arithmetic over serving.report's estimate; prices are given in."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import Any

from hfmem.hardware.gpus import Gpu
from hfmem.memory.settings import TrainingSettings
from hfmem.model.load import ModelReport
from hfmem.serving.capacity import ServingSettings
from hfmem.serving.engines import engine
from hfmem.serving.report import gpu_estimate, serving_fit

CURVE_CONTEXTS = tuple(1 << k for k in range(10, 18))
"""Contexts the concurrency chart is drawn at (1K to 128K tokens), up to the model's maximum, and --context."""


def serving_settings(training: TrainingSettings) -> ServingSettings:
    """The deployment a serving column judges: the training settings' Serving group, one GPU per replica, and
    their CUDA context as the memory outside torch."""
    s = training.serving
    return ServingSettings(engine=s.engine, context=s.context, concurrency=s.serve_concurrency,
                           kv_cache_dtype=s.kv_cache_dtype, quantization=s.quantization,
                           cuda_context_gib=training.overhead.cuda_context_gib)


def serving_column(model: ModelReport, gpus: tuple[Gpu, ...], settings: ServingSettings,
                   prices: Mapping[str, float], *, curves: bool = False) -> dict[str, Any]:
    """The report's `serving`: the deployment, its engine, a cell per GPU (serving.report.ServingFit), the cheapest
    pick for `prices` (USD per GPU-hour by GPU name) and, with `curves`, concurrency against context per GPU."""
    profile = engine(settings.engine)
    cells = [serving_fit(model, gpu, settings).to_dict(settings.context) for gpu in gpus]
    out: dict[str, Any] = {"settings": asdict(settings), "engine": {"name": profile.name, "version": profile.version},
                           "cells": cells, "cheapest": cheapest(cells, settings.concurrency, prices)}
    if curves:
        out["curves"] = concurrency_curves(model, gpus, settings)
    return out


def beyond_positions(model: ModelReport, settings: ServingSettings) -> list[str]:
    """A warning where the context asked is longer than the model's max_position_embeddings: vLLM refuses a
    max_model_len above the config's length (times a RoPE scaling factor) unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
    (vllm/config.py _get_and_verify_max_len, commit 2ac6d0e7, line 1870); the figures here are as asked either way."""
    longest = model.architecture.max_position_embeddings
    if longest and settings.context > longest:
        return [f"serving context {settings.context:,} is beyond the model's max_position_embeddings "
                f"({longest:,}): vLLM refuses it unless RoPE scaling extends the model or "
                "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; the serving column counts the KV cache as asked"]
    return []


def replicas(cell: dict[str, Any], concurrency: int) -> tuple[int, int] | None:
    """(replicas, GPUs each) that hold `concurrency` requests at the cell's context, as asked or as its advice
    says; None where nothing fits."""
    setup = cell if cell["verdict"] == "fits" else cell["advice"]
    if setup is None:
        return None
    per_replica = math.floor(setup["concurrency_at_context"])
    return -(-concurrency // per_replica), setup["num_gpus"]


def cheapest(cells: list[dict[str, Any]], concurrency: int, prices: Mapping[str, float]) -> dict[str, Any] | None:
    """The GPU whose replicas serve `concurrency` requests for the fewest USD per hour (fewer GPUs on a tie):
    {gpu, verdict, replicas, num_gpus, usd_per_hour}; None where no priced GPU fits."""
    best: dict[str, Any] | None = None
    for cell in cells:
        found = replicas(cell, concurrency)
        if found is None or cell["gpu"] not in prices:
            continue
        n, each = found
        pick = {"gpu": cell["gpu"], "verdict": cell["verdict"], "replicas": n, "num_gpus": n * each,
                "usd_per_hour": round(n * each * prices[cell["gpu"]], 4)}
        if best is None or (pick["usd_per_hour"], pick["num_gpus"]) < (best["usd_per_hour"], best["num_gpus"]):
            best = pick
    return best


def concurrency_curves(model: ModelReport, gpus: tuple[Gpu, ...], settings: ServingSettings) -> dict[str, Any]:
    """Requests each GPU holds at each context of CURVE_CONTEXTS up to the model's maximum, and --context:
    {contexts, gpus (names), concurrency: per GPU in that order, one figure per context (below 1: no request fits)}."""
    longest = model.architecture.max_position_embeddings or CURVE_CONTEXTS[-1]
    contexts = sorted({c for c in CURVE_CONTEXTS if c <= longest} | {settings.context})
    concurrency = [[round(gpu_estimate(model, gpu, replace(settings, context=c))[0].concurrency_at_context, 2)
                    for c in contexts] for gpu in gpus]
    return {"contexts": contexts, "gpus": [gpu.name for gpu in gpus], "concurrency": concurrency}
