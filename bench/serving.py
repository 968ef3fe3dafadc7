"""Predicted vs published serving KV capacity: every row of fixtures/serving_published.json through hfmem's serving
arithmetic (hfmem.serving.report.gpu_estimate), on the model's fixture config and safetensors headers.

    python bench/serving.py          # the table; per-source, per-engine, per-split and overall medians
    python bench/serving.py --json   # the rows as JSON

The published figure is the engine's KV capacity in tokens (or its KV memory where only that is printed, or
llama.cpp's 'KV self size' at the row's n_ctx); the error is (predicted - published) / published. Weights are
compared where the log prints what loading took (vLLM's 'Model loading took', SGLang's 'mem usage'), against the
sum of hfmem's weights terms (the checkpoint's share and, for vLLM, its RoPE table).
Nothing here is fitted: each row's settings are the ones its source states, the rest the engine's defaults.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hfmem.hardware.gpus import resolve_gpus  # noqa: E402
from hfmem.hub.files import INDEX_FILE  # noqa: E402
from hfmem.hub.safetensors import PREFIX_BYTES, Checkpoint, header_length, parse_header  # noqa: E402
from hfmem.model.crosscheck import cross_check  # noqa: E402
from hfmem.model.derive import derive  # noqa: E402
from hfmem.model.load import ModelReport  # noqa: E402
from hfmem.serving.capacity import ServingSettings  # noqa: E402
from hfmem.serving.engines import MIB  # noqa: E402
from hfmem.serving.kv import KvLayout  # noqa: E402
from hfmem.serving.report import gpu_estimate  # noqa: E402
from hfmem.units import GIB  # noqa: E402

FIXTURES = ROOT / "fixtures"
HUB = FIXTURES / "hub"
ROWS = FIXTURES / "serving_published.json"


def load_model(model_id: str) -> ModelReport:
    """The fixture Hub repo's config and headers, derived as `hfmem MODEL` derives them (model.derive)."""
    folder = HUB / model_id
    config = json.loads((folder / "config.json").read_text())
    index = folder / INDEX_FILE
    shards = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() else [
        p.name for p in folder.glob("*.safetensors")]
    checkpoint = Checkpoint()
    for name in shards:
        raw = (folder / name).read_bytes()
        length = header_length(raw[:PREFIX_BYTES], name)
        checkpoint.add(name, parse_header(raw[PREFIX_BYTES:PREFIX_BYTES + length], name))
    notes: list[str] = []
    arch, inventory = derive(config, checkpoint, notes)
    check = cross_check(inventory if inventory.model_class else None, checkpoint, config, arch.num_layers)
    return ModelReport(model_id, "fixture", None, None, config, arch, inventory, checkpoint, check, notes)


def score(row: dict[str, Any], model: ModelReport) -> dict[str, Any]:
    """One row: hfmem's estimate under the row's stated settings beside the published figure."""
    settings = ServingSettings(engine=row["engine"], **row["settings"])
    (gpu,) = resolve_gpus([row["gpu"]])
    result, sizes = gpu_estimate(model, gpu, settings)
    published = row["published"]
    if "kv_tokens" in published:
        metric, want, got = "kv_tokens", published["kv_tokens"], result.kv_tokens
    elif "kv_gib" in published:
        metric, want, got = "kv_gib", published["kv_gib"], result.kv_bytes / GIB
    else:  # llama.cpp's 'KV self size': n_ctx cells of every full layer, its SWA cells of the windowed ones
        layout = KvLayout(**sizes["kv"])
        if result.window_kept:
            layout = replace(layout, window=result.window_kept)
        cells = layout.sequence_bytes(settings.context) * settings.concurrency
        metric, want, got = "kv_self_mib", published["kv_self_mib"], cells / MIB
    weights = sum(t.bytes for t in result.terms if t.kind == "weights") / GIB
    out = {"id": row["id"], "engine": row["engine"], "gpu": row["gpu"], "model": row["model"], "tp": settings.tp,
           "split": row["split"], "source": row["provenance"]["url"], "metric": metric, "published": want,
           "predicted": round(got, 2), "error": (got - want) / want, "weights_gib": round(weights, 3)}
    if "weights_gib" in published:
        out["weights_published_gib"] = published["weights_gib"]
        out["weights_error"] = (weights - published["weights_gib"]) / published["weights_gib"]
    return out


def median_abs(rows: list[dict[str, Any]], key: str = "error") -> float:
    return statistics.median(abs(r[key]) for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the scored rows as JSON")
    args = parser.parse_args()
    entries = json.loads(ROWS.read_text())["entries"]
    excluded = [row for row in entries if "excluded" in row]
    models: dict[str, ModelReport] = {}
    scored = []
    for row in (row for row in entries if "excluded" not in row):
        model = models.get(row["model"]) or models.setdefault(row["model"], load_model(row["model"]))
        scored.append(score(row, model))
    if args.json:
        print(json.dumps(scored, indent=1))
        return
    print(f"{'row':42s} {'engine':7s} {'GPU':16s} {'TP':>2s} {'published':>11s} {'predicted':>11s} {'error':>7s} "
          f"{'weights GiB (pub)':>18s}")
    for r in scored:
        weights = f"{r['weights_gib']:.2f}" + (f" ({r['weights_published_gib']:.2f})" if "weights_published_gib" in r
                                                else "")
        unit = {"kv_tokens": "", "kv_gib": " GiB", "kv_self_mib": " MiB"}[r["metric"]]
        print(f"{r['id']:42s} {r['engine']:7s} {r['gpu']:16s} {r['tp']:>2d} {r['published']:>11,}{unit} "
              f"{r['predicted']:>11,}{unit} {r['error']:>+7.1%} {weights:>18s}")
    for row in excluded:
        print(f"{row['id']:42s} not scored: {row['excluded']}")
    print()
    groups: dict[str, dict[str, list[dict[str, Any]]]] = {"source": defaultdict(list), "engine": defaultdict(list),
                                                          "split": defaultdict(list)}
    for r in scored:
        for key in groups:
            groups[key][r[key]].append(r)
    for key, by in groups.items():
        for name, rows in sorted(by.items()):
            print(f"median |error| by {key:6s} {name:60s} {median_abs(rows):6.1%}  ({len(rows)} rows)")
    weighed = [r for r in scored if "weights_error" in r]
    print(f"\nmedian |error| of the KV capacity, all {len(scored)} rows: {median_abs(scored):.1%}")
    if weighed:
        print(f"median |error| of the weights, {len(weighed)} rows that print them: "
              f"{median_abs(weighed, 'weights_error'):.2%}")


if __name__ == "__main__":
    main()
