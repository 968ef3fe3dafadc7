"""ZeRO-3's gathered parameters: hfmem's replay of DeepSpeed's fetch, prefetch and release rules against DeepSpeed's
own count on CPU (tests/zero3_ranks.py), and the settings reaching the estimate from flags and DeepSpeed files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_models import tiny_config
from zero3_ranks import CASES, LAYERS, MODEL, measure

from hfmem.cli.main import run
from hfmem.memory.estimate import Context
from hfmem.memory.settings import TrainingSettings
from hfmem.memory.zero3_gather import Block, GatherLimits, gathered, peak_gathered, step_order
from hfmem.model.architecture import read_architecture
from hfmem.model.meta import build_inventory


@pytest.fixture(scope="module")
def deepspeed_counts() -> dict[str, list[int]]:
    return measure()


def _settings(case: str, **extra) -> TrainingSettings:
    live, reuse, bucket, recompute = CASES[case]
    return TrainingSettings(method="full", dtype="bf16", sharding="zero3", num_gpus=2, max_live_parameters=live,
                            max_reuse_distance=reuse, prefetch_bucket_size=bucket,
                            gradient_checkpointing="full" if recompute else "off", **extra)


def test_replay_matches_deepspeeds_own_count(deepspeed_counts: dict[str, list[int]]) -> None:
    """Every case's most gathered elements, over the step and around the loss, exactly as DeepSpeed's coordinator
    counted them in a real step."""
    config = tiny_config(MODEL, LAYERS)
    ctx = Context(read_architecture(config), build_inventory(config))
    replayed = {case: [g.step, g.around_loss] for case in CASES for g in [ctx.zero3_gathered(_settings(case))]}
    assert replayed == deepspeed_counts
    steps = [step for step, _ in deepspeed_counts.values()]
    assert len(set(steps)) >= 6  # the cases tell the rules apart
    assert min(steps) < ctx.inventory.total / 10 < max(steps)
    assert any(around < step for step, around in deepspeed_counts.values())


def test_nothing_kept_holds_one_module_at_a_time() -> None:
    """Without prefetching or reuse a step holds one module's parameters: the largest, the untied head here."""
    order = step_order(100, (Block(1, (30, 10)), Block(1, (40, 40, 20), act=True)), 3, 150, tied=False,
                       recompute=True)
    assert peak_gathered(order, GatherLimits(max_live=0, max_reuse=0, prefetch=0, persistence=1)).step == 150
    whole = peak_gathered(order, GatherLimits(max_live=1e9, max_reuse=1e9, prefetch=1e9, persistence=1))
    assert whole.step == 100 + 3 * 140 + 150


def test_large_modules_are_gathered_one_by_one_not_two_layers() -> None:
    """A 530B-style layer (hidden 20480: 1.26B QKV, 0.42B projection, 1.68B each MLP matrix) exceeds every default
    size: ZeRO-3 holds at most the projection and the MLP matrix a prefetch pulls in after it (a prefetch takes one
    whole parameter even past the bucket), 0.42 of a layer, not two layers."""
    h = 20480
    layer = (Block(2 * h, (3 * h * h, h * h)), Block(2 * h, (4 * h * h, 4 * h * h), act=True))
    order = step_order(51200 * h, layer, 105, 0, tied=True, recompute=True)
    peak = peak_gathered(order, GatherLimits(max_live=1e9, max_reuse=1e9, prefetch=0.9 * h * h, persistence=10 * h))
    assert peak.step == peak.around_loss == h * h + 4 * h * h


def test_flags_and_deepspeed_file_set_the_sizes(capsys, tmp_path, monkeypatch) -> None:
    """--max-live-parameters and a DeepSpeed JSON's stage3 keys change the ZeRO-3 estimate's sharding buffers."""
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))

    def buffers(*args: str) -> int:
        capsys.readouterr()
        assert run(["example:Meta-Llama-3-8B", "-m", "full", "-g", "h100", "--zero", "3", "--num-gpus", "8",
                    "--format", "json", *args]) == 0
        return json.loads(capsys.readouterr().out)["estimates"]["full"]["per_gpu_bytes"]["sharding_buffers"]

    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3, "stage3_max_live_parameters": 0,
                                                    "stage3_max_reuse_distance": 0}}))
    default, small = buffers(), buffers("--max-live-parameters", "0", "--max-reuse-distance", "0")
    assert small < 0.6 * default  # the largest module (the 525M-element head) instead of about 1e9 elements
    assert buffers("--config", str(ds)) == small


@pytest.mark.parametrize("name", ["Llama-2-70b-hf", "Mixtral-8x7B-v0.1"])
def test_a_few_layers_each_end_give_the_whole_models_figures(name: str) -> None:
    """`gathered` replays only the layers near each end of a deep model; the layers between repeat their
    neighbours, so the figures are the whole replay's under any sizes."""
    config = json.loads((Path(__file__).resolve().parent.parent / "hfmem" / "examples" / name / "config.json")
                        .read_text())
    embedding, layer, layers, head = Context(read_architecture(config), build_inventory(config))._fetch_units
    h = config["hidden_size"]
    for sizes in [(1e9, 1e9, 0.9 * h * h), (4e8, 1e8, 1e7), (0, 0, 0), (1e8, 3e9, 5e7)]:
        limits = GatherLimits(*sizes, persistence=10 * h)
        for recompute in (False, True):
            whole = peak_gathered(step_order(embedding, layer, layers, head, tied=not head, recompute=recompute),
                                  limits)
            assert gathered(embedding, layer, layers, head, tied=not head, recompute=recompute, limits=limits) == whole
