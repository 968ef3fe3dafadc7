"""Predicted vs published training throughput (tokens/s per GPU) for the rows of fixtures/published_throughput.json.

    python bench/throughput.py

Each row's model is counted by hfmem (meta build, FLOPs per token) and timed by the roofline at the default HFU on
the catalogue's figures for its GPU, with the row's sharding, micro-batch, accumulation and checkpointing. Rows
without published parallelism (model cards) are timed as compute only. Prints every row, the median |error| per
source and per split, and what a per-GPU utilisation set from the fit split alone would give on the held-out rows.
Needs torch and transformers (the meta build).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from hfmem.compute.flops import forward_flops, training_flops
from hfmem.compute.roofline import (
    HFU_BY_ARCH,
    data_parallel_transfers,
    hfu_for,
    hbm_traffic,
    machine,
    step_time,
    weight_passes,
)
from hfmem.hardware.gpus import find_gpu
from hfmem.hardware.specs import gpu_specs
from hfmem.model.architecture import read_architecture
from hfmem.model.meta import build_inventory

DATA = ROOT / "fixtures" / "published_throughput.json"
MASTER_AND_ADAM_BYTES = 16
"""fp32 master weight, fp32 gradient shard and AdamW's two fp32 moments per parameter: what the step reads and writes."""


def _model(spec: str | dict[str, Any], cache: dict[str, Any]) -> tuple[Any, Any]:
    key = json.dumps(spec, sort_keys=True)
    if key not in cache:
        config = json.loads((ROOT / spec).read_text()) if isinstance(spec, str) else dict(spec)
        config.pop("_note", None)
        cache[key] = read_architecture(config), build_inventory(config)
    return cache[key]


def predict(row: dict[str, Any], models: dict[str, Any], cache: dict[str, Any], hfu: float | None = None) -> float:
    """Predicted tokens/s per GPU for one published row (at its GPU architecture's utilisation unless `hfu`)."""
    arch, inventory = _model(models[row["model"]], cache)
    gpu = find_gpu(row["gpu"])
    hfu = hfu_for(gpu.arch) if hfu is None else hfu
    flops = training_flops(arch, forward_flops(arch, inventory, row["seq_len"]), checkpointing=row["checkpointing"])
    gpus = row["num_gpus"] or 1
    node = machine(gpu_specs(gpu), "bf16", gpus, network_gbps=row["network_gbps"])
    params = inventory.total
    transfers = ()
    if row["sharding"]:
        transfers = data_parallel_transfers(row["sharding"], gpus, parameter_bytes=2 * params, trainable_bytes=2 * params,
                                            gradient_bytes=row["reduce_bytes"] * params, units=arch.num_layers + 1)
    traffic = hbm_traffic(weight_bytes=2 * params, passes=weight_passes(row["checkpointing"]),
                          gradient_bytes=4 * params / gpus, optimizer_bytes=MASTER_AND_ADAM_BYTES * params / gpus)
    step = step_time(flops, node, tokens_per_micro_batch=row["seq_len"] * row["micro_batch"],
                     micro_batches=row["grad_accum"], num_gpus=gpus, hfu=hfu, traffic=traffic, transfers=transfers)
    return step.tokens_per_s / gpus


def _median_abs(errors: list[float]) -> str:
    return f"{100 * statistics.median(abs(e) for e in errors):.1f}%" if errors else "-"


def main() -> None:
    data = json.loads(DATA.read_text())
    rows, models, cache = data["rows"], data["models"], {}
    predicted = {r["id"]: predict(r, models, cache) for r in rows}
    error = {r["id"]: predicted[r["id"]] / r["published"]["tokens_per_s_per_gpu"] - 1 for r in rows}
    print("HFU by architecture: " + ", ".join(f"{a} {h:.3f}" for a, h in sorted(HFU_BY_ARCH.items())) + "\n")
    print("| row | split | GPU x n | seq | ckpt | published tok/s/GPU | predicted | error |\n|---|---|---|---:|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['id']} | {r['split']} | {r['gpu']} x {r['num_gpus'] or '?'} | {r['seq_len']} | {r['checkpointing']} | "
              f"{r['published']['tokens_per_s_per_gpu']:,.0f} | {predicted[r['id']]:,.0f} | {100 * error[r['id']]:+.1f}% |")
    print("\n| group | rows | median abs error |\n|---|---:|---:|")
    for name in sorted({r["source"] for r in rows}):
        errs = [error[r["id"]] for r in rows if r["source"] == name]
        print(f"| source {name} | {len(errs)} | {_median_abs(errs)} |")
    for split in ("fit", "held_out"):
        errs = [error[r["id"]] for r in rows if r["split"] == split]
        print(f"| split {split} | {len(errs)} | {_median_abs(errs)} |")
    for scale, across in (("one machine (<= 8 GPUs)", False), ("several machines (> 8 GPUs)", True)):
        for split in ("fit", "held_out"):
            errs = [error[r["id"]] for r in rows if r["split"] == split and ((r["num_gpus"] or 1) > 8) == across]
            print(f"| {scale}, {split} | {len(errs)} | {_median_abs(errs)} |")
    # A utilisation per GPU type from the fit rows alone (the median published/predicted ratio), tried on held-out rows.
    per_gpu = {}
    for gpu in sorted({r["gpu"] for r in rows}):
        ratios = [1 + error[r["id"]] for r in rows if r["gpu"] == gpu and r["split"] == "fit"]
        assumed = hfu_for(find_gpu(gpu).arch)
        per_gpu[gpu] = min(1.0, assumed / statistics.median(ratios)) if ratios else assumed
    held = [r for r in rows if r["split"] == "held_out"]
    errs = [predict(r, models, cache, per_gpu[r["gpu"]]) / r["published"]["tokens_per_s_per_gpu"] - 1 for r in held]
    fitted = ", ".join(f"{gpu} {hfu:.3f}" for gpu, hfu in per_gpu.items())
    print(f"\nHFU set per GPU from the fit split ({fitted}): held-out median abs error {_median_abs(errs)}")


if __name__ == "__main__":
    main()
