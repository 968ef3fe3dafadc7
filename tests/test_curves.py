"""Memory curves: each point is the estimate at that length or batch, each curve passes through its fit cell, and
crosses a GPU's usable memory exactly where the fit search's largest length and batch end."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from tiny_models import reference_model

from hfmem.hardware.gpus import catalogue
from hfmem.memory.curves import doublings, memory_curves
from hfmem.memory.estimate import estimate
from hfmem.memory.fit import asked_settings, fit_matrix
from hfmem.memory.record import cells
from hfmem.memory.settings import METHODS, TrainingSettings

LLAMA3 = reference_model("meta-llama/Meta-Llama-3-8B")
MIXTRAL = reference_model("mistralai/Mixtral-8x7B-v0.1")
CASES = [
    pytest.param(LLAMA3, TrainingSettings(), id="llama3-defaults"),
    pytest.param(LLAMA3, TrainingSettings(seq_len=3000, micro_batch_size=5, gradient_checkpointing="full"),
                 id="llama3-ckpt-odd-points"),
    pytest.param(MIXTRAL, TrainingSettings(optimizer="adamw_8bit"), id="mixtral-8bit"),
]


@pytest.mark.parametrize("model, settings", CASES)
def test_each_point_is_the_estimate_there(model, settings):
    curves = memory_curves(*model, settings, METHODS)
    seq, batch = curves["seq_len"], curves["micro_batch_size"]
    for method in METHODS:
        single = asked_settings(settings, method)
        for p, value in zip(seq["points"], seq["required_bytes"][method]):
            assert value == estimate(*model, replace(single, seq_len=p)).per_gpu_bytes.required, (method, p)
        for b, value in zip(batch["points"], batch["required_bytes"][method]):
            expected = estimate(*model, replace(single, micro_batch_size=b, seq_len=batch["seq_len"]))
            assert value == expected.per_gpu_bytes.required, (method, b)


@pytest.mark.parametrize("model, settings", CASES)
def test_curves_pass_through_the_fit_cells_and_cross_where_the_search_stops(model, settings):
    curves = memory_curves(*model, settings, METHODS)
    seq, batch = curves["seq_len"], curves["micro_batch_size"]
    at_seq = seq["points"].index(batch["seq_len"])
    at_batch = batch["points"].index(seq["micro_batch_size"])
    for fit in fit_matrix(*model, settings, catalogue(), METHODS):
        usable, cell = fit.gpu.usable_bytes, fit.asked["required_bytes"]
        assert seq["required_bytes"][fit.method][at_seq] == cell == batch["required_bytes"][fit.method][at_batch]
        for p, value in zip(seq["points"], seq["required_bytes"][fit.method]):
            assert (value <= usable) == (p <= fit.max_seq_len), (fit.method, fit.gpu.name, p, fit.max_seq_len)
        for b, value in zip(batch["points"], batch["required_bytes"][fit.method]):
            assert (value <= usable) == (b <= fit.max_micro_batch_size), (fit.method, fit.gpu.name, b)


def test_points_span_the_model_and_hold_the_set_values():
    arch = LLAMA3[0]
    curves = memory_curves(*LLAMA3, TrainingSettings(seq_len=3000, micro_batch_size=5), ("lora",))
    seq, batch = curves["seq_len"]["points"], curves["micro_batch_size"]["points"]
    assert seq[0] == 128 and seq[-1] == arch.max_position_embeddings == 8192 and 3000 in seq
    assert batch[:4] == [1, 2, 3, 4] and 5 in batch and batch[-1] == 64
    assert seq == sorted(set(seq)) and batch == sorted(set(batch))
    longer = memory_curves(*LLAMA3, TrainingSettings(seq_len=10_000), ("qlora",))["seq_len"]["points"]
    assert longer[-1] == 10_000  # beyond the model's maximum, the set length is still a point
    for series in curves["seq_len"]["required_bytes"].values():
        assert series == sorted(series)  # memory never falls as the sequence grows


def test_doublings():
    assert doublings(1, 64) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    assert doublings(128, 1000, 700, 5000) == [128, 192, 256, 384, 512, 700, 768, 1000]
    assert doublings(64, 64) == [64]


def test_report_has_curves_only_when_asked():
    from hfmem.hub.modelref import parse_model_ref
    from hfmem.hub.hub_settings import HubSettings
    from hfmem.reporting.plan import Plan, build_report

    ref = parse_model_ref("example:gpt2", None)
    plan = Plan(methods=("full", "qlora"))
    assert "curves" not in build_report(ref, HubSettings.from_env, plan)
    report = build_report(ref, HubSettings.from_env, plan, curves=True)
    assert list(report["curves"]["seq_len"]["required_bytes"]) == ["full", "qlora"]
    assert json.loads(json.dumps(report))["curves"] == report["curves"]


def test_a_frameworks_per_method_settings_reach_the_curves(tmp_path, capsys, monkeypatch):
    """torchtune sets each method's optimizer apart (plan.method_settings): every curve still meets its cells."""
    from hfmem.cli.main import run

    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))
    capsys.readouterr()
    assert run(["example:Meta-Llama-3-8B", "--framework", "torchtune", "--format", "json",
                "--html", str(tmp_path / "r.html")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["plan"]["method_settings"]["full"]["optimizer"] == "paged_adamw_8bit"
    seq, batch = report["curves"]["seq_len"], report["curves"]["micro_batch_size"]
    at = seq["points"].index(batch["seq_len"])
    for fit in cells(report):
        assert seq["required_bytes"][fit["method"]][at] == fit["required_bytes"], fit["method"]
