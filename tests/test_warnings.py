"""Warnings where the answer stops meaning anything, in every output: a sequence past the model's context, a
micro-batch no GPU holds, and a parameter count that is an approximation (it printed 151.9M for gpt2 under an
unknown model_type as if exact; the true count is 124.4M)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hfmem.cli.main import run
from hfmem.memory.warnings import context_limit
from hfmem.model.architecture import read_architecture

GPT2 = Path(__file__).resolve().parent.parent / "hfmem" / "examples" / "gpt2" / "config.json"


def outputs(capsys, *args: str) -> tuple[dict, str, str]:
    """The JSON report, the table and the markdown of one command."""
    texts = []
    for fmt in ("json", "table", "markdown"):
        assert run([*args, "--format", fmt]) == 0
        texts.append(capsys.readouterr().out)
    return json.loads(texts[0]), " ".join(texts[1].split()), texts[2]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))


def test_sequence_past_the_context_is_warned_everywhere(capsys):
    report, table, markdown = outputs(capsys, "example:gpt2", "--seq-len", "4096", "-m", "lora", "-g", "t4")
    expected = "--seq-len 4,096 is past the model's context of 1,024 tokens"
    assert any(w.startswith(expected) for w in report["warnings"])
    assert f"warning: {expected}" in table and "**warning:**" in markdown and "past the model" in markdown
    report, _, _ = outputs(capsys, "example:gpt2", "--seq-len", "1024", "-m", "lora", "-g", "t4")
    assert report["warnings"] == []


def test_rope_scaling_extends_the_context():
    config = json.loads(GPT2.read_text())
    arch = read_architecture(config)
    assert context_limit(arch, config) == 1024
    assert context_limit(arch, config | {"rope_scaling": {"type": "linear", "factor": 4.0}}) == 4096
    scaled = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}
    assert context_limit(arch, config | {"rope_scaling": scaled}) == 1024  # already the scaled window


def test_a_micro_batch_no_gpu_holds_is_warned(capsys):
    report, table, _ = outputs(capsys, "example:gpt2", "-b", "64", "-m", "lora", "-g", "t4", "-g", "rtx4090")
    assert any(w.startswith("micro-batch 64 fits no GPU of the matrix with lora") for w in report["warnings"])
    assert "warning: micro-batch 64 fits no GPU" in table
    report, _, _ = outputs(capsys, "example:gpt2", "-b", "2", "-m", "lora", "-g", "t4")
    assert report["warnings"] == []


def test_a_count_from_dimensions_is_marked_approximate_everywhere(capsys, tmp_path):
    config = json.loads(GPT2.read_text()) | {"model_type": "my_gpt", "architectures": ["MyGPTForCausalLM"]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    report, table, markdown = outputs(capsys, str(path), "-m", "lora", "-g", "h100")
    assert "my_gpt" in report["parameters"]["approximate"]
    assert f"≈{report['parameters']['total']:,}" in table and "approximate) parameters" in table
    assert "**≈" in markdown
    exact, table, _ = outputs(capsys, "example:gpt2", "-m", "lora", "-g", "h100")
    assert exact["parameters"]["approximate"] is None and "≈" not in table and exact["parameters"]["total"] == 124_439_808
