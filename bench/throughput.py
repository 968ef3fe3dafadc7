"""Predicted vs published training throughput (tokens/s per GPU) for the rows of fixtures/published_throughput.json
and the multi-node layouts of fixtures/throughput_multinode.json.

    python bench/throughput.py

Each row's model is counted by hfmem (meta build, FLOPs per token) and timed by the roofline at the default HFU on
the catalogue's figures for its GPU, with the row's sharding, micro-batch, accumulation and checkpointing. Rows
without published parallelism (model cards) are timed as compute only. Prints every row, the median |error| per
source and per split, and what a per-GPU utilisation set from the fit split alone would give on the held-out rows.
The multi-node rows run as their `flags` say, through the same path as the CLI (TrainingSettings, the memory
estimate, reporting.timing.step_for: TP, PP and its bubble, CP, EP, DP/ZeRO over NCCL's collectives at the row's
network); a row whose flags are null (a micro-batch the source does not state) or whose dtype hfmem does not time
is listed with the reason and not scored. Needs torch and transformers (the meta build).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from hfmem.cli.options import Layers, settings_flags
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
from hfmem.errors import InvalidInputError
from hfmem.hardware.gpus import find_gpu
from hfmem.hardware.specs import gpu_specs
from hfmem.memory.estimate import estimate
from hfmem.memory.lowprecision import RECIPES
from hfmem.memory.settings import TrainingSettings
from hfmem.model.architecture import read_architecture
from hfmem.model.meta import build_inventory
from hfmem.reporting.timing import flops_of, step_for

DATA = ROOT / "fixtures" / "published_throughput.json"
MULTINODE = ROOT / "fixtures" / "throughput_multinode.json"
RESERVED = ("torchtitan/blob/main/benchmarks", "pytorch/torchtitan/tree/main/benchmarks", "simumax", "config_explorer",
            "method_comparison/metamathqa/results", "ms-swift/blob/main/examples", "liger-kernel/blob/main/examples")
"""Sources kept for independent validation: a row citing one is dropped, never scored."""
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


def layout_settings(row: dict[str, Any]) -> TrainingSettings:
    """A multi-node row's `flags` as TrainingSettings (each flag to the field it sets; a bare --sequence-parallel is
    Megatron's, a bare on/off flag on; --framework's profile under the flags, as the CLI layers them); the GPU is
    the row's catalogue `gpu`."""
    by_flag = {name: flag.param for flag in settings_flags(TrainingSettings) for spelling in flag.names
               for name in spelling.split("/")}
    switches = {spelling.split("/")[0]: flag.param for flag in settings_flags(TrainingSettings)
                for spelling in flag.names if "/" in spelling}
    flags, values, framework, i = row["flags"], {}, None, 0
    while i < len(flags):
        name = flags[i]
        if name in {"-m", "--method", "--gpu", "-g"}:
            i += 2
        elif name == "--framework":
            framework, i = flags[i + 1], i + 2
        elif name in switches:  # an on/off flag given bare: on
            values[switches[name]], i = True, i + 1
        elif name == "--sequence-parallel" and (i + 1 == len(flags) or flags[i + 1].startswith("-")):
            values["sequence_parallel"], i = "megatron", i + 1
        else:
            raw = flags[i + 1]
            values[by_flag[name]] = int(raw) if raw.isdigit() else float(raw) if raw.replace(".", "", 1).isdigit() \
                else raw
            i += 2
    return TrainingSettings(**Layers.of(framework, None).merged(values)[0]).validated()


def predict_layout(row: dict[str, Any], models: dict[str, Any], cache: dict[str, Any]) -> tuple[float | None, str]:
    """Predicted tokens/s per GPU of a multi-node row as hfmem times its flags, or None and the reason."""
    if not row["published"].get("tokens_per_s_per_gpu"):
        return None, "not scored: no published tokens/s (MFU or model TFLOP/s only)"
    if not row["flags"]:
        return None, "not scored: flags null (the source leaves the micro-batch unstated)"
    try:
        settings = layout_settings(row)
    except InvalidInputError as err:
        return None, f"not timed: {err}"
    arch, inventory = _model(models[row["model"]], cache)
    est = estimate(arch, inventory, settings)
    step = step_for(est, flops_of(arch, inventory, est), find_gpu(row["gpu"]), arch)
    if step.get("seconds") is None:
        return None, f"not timed: {step['reason']}"
    return step["tokens_per_s"] / settings.num_gpus, ""


def reserved(row: dict[str, Any]) -> bool:
    """Whether a row cites a source kept for independent validation (RESERVED)."""
    text = json.dumps([row.get("url"), row.get("provenance"), row.get("table")]).lower()
    return any(r in text for r in RESERVED)


def multinode() -> None:
    """Score the multi-node rows: every row with its prediction or reason, then the medians per source and split."""
    data = json.loads(MULTINODE.read_text())
    rows, models, cache = data["rows"], data["models"], {}
    dropped = [r["id"] for r in rows if reserved(r)]
    rows = [r for r in rows if r["id"] not in dropped]
    print(f"\nMulti-node layouts (fixtures/throughput_multinode.json): {len(rows)} rows, {len(dropped)} dropped as "
          "reserved sources\n")
    print("| row | split | GPU x n | layout | published tok/s/GPU | predicted | error |\n"
          "|---|---|---|---|---:|---:|---:|")
    error = {}
    for r in rows:
        lay = r["layout"]
        shape = f"tp{lay.get('tp') or 1} pp{lay.get('pp') or 1} cp{lay.get('cp') or 1} ep{lay.get('ep') or 1} " \
                f"dp{lay.get('dp')} {r['sharding']} {r.get('dtype')}"
        published = r["published"].get("tokens_per_s_per_gpu")
        predicted, reason = predict_layout(r, models, cache)
        if predicted is not None and published:
            error[r["id"]] = predicted / published - 1
        shown = f"{predicted:,.1f} | {100 * error[r['id']]:+.1f}%" if r["id"] in error else f"{reason} | -"
        print(f"| {r['id']} | {r['split']} | {r['gpu']} x {r['num_gpus']} | {shape} | "
              f"{'-' if published is None else f'{published:,.1f}'} | {shown} |")
    print("\n| group | rows scored | median abs error |\n|---|---:|---:|")
    for name in sorted({r["source"] for r in rows}):
        errs = [error[r["id"]] for r in rows if r["source"] == name and r["id"] in error]
        print(f"| source {name} | {len(errs)} | {_median_abs(errs)} |")
    for split in ("fit", "held_out"):
        errs = [error[r["id"]] for r in rows if r["split"] == split and r["id"] in error]
        print(f"| split {split} | {len(errs)} | {_median_abs(errs)} |")
    for label, recipe in (("bf16/fp16", False), ("fp8/mxfp8/nvfp4 recipes", True)):
        errs = [error[r["id"]] for r in rows if r["id"] in error and (r.get("dtype") in RECIPES) == recipe]
        print(f"| {label} | {len(errs)} | {_median_abs(errs)} |")
    print(f"| all scored ({len({r['source'] for r in rows if r['id'] in error})} sources) | {len(error)} | "
          f"{_median_abs(list(error.values()))} |")


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
    multinode()


if __name__ == "__main__":
    main()
