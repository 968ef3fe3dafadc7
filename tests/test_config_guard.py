"""Configs that are small in parameters but huge in structure, or mistyped where transformers looks classes up,
are refused with their documented exit code before any meta build (no minutes-long builds, no exit 70)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hfmem.cli.main import run
from hfmem.model import derive

EXAMPLES = Path(__file__).resolve().parent.parent / "hfmem" / "examples"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _config(path: Path) -> dict:
    return json.loads(path.read_text())


def _nested(kind: type, depth: int) -> object:
    inner: object = kind()
    for _ in range(depth):
        inner = {"x": inner} if kind is dict else [inner]
    return inner


SWITCH = {"architectures": ["SwitchTransformersForConditionalGeneration"], "model_type": "switch_transformers",
          "d_model": 768, "d_ff": 3072, "d_kv": 64, "num_heads": 12, "vocab_size": 32128, "is_encoder_decoder": True}

CASES = {
    "t5-million-decoder-layers": (lambda: _config(FIXTURES / "configs/bigscience/T0_3B/config.json")
                                  | {"num_decoder_layers": 1_000_000}, 9, "`num_decoder_layers` = 1,000,000 exceeds"),
    "switch-layers-times-experts": (lambda: SWITCH | {"num_layers": 2048, "num_decoder_layers": 2048,
                                                      "num_sparse_encoder_layers": 2048,
                                                      "num_sparse_decoder_layers": 2048, "num_experts": 4096},
                                    9, "layer modules, over the 65,536"),
    "pattern-40-million": (lambda: _config(FIXTURES / "hub/nvidia/Nemotron-H-56B-Base-8K/config.json")
                           | {"hybrid_override_pattern": "M-" * 20_000_000}, 9, "`hybrid_override_pattern` has 40,000,000"),
    "layer-types-list": (lambda: _config(EXAMPLES / "Qwen2.5-0.5B/config.json") | {"layer_types": ["full_attention"] * 5000},
                         9, "`layer_types` has 5,000 entries"),
    "lists-nested-500-deep": (lambda: _config(EXAMPLES / "gpt2/config.json") | {"extra": _nested(list, 500)},
                              7, "nests too deeply"),
    "objects-nested-500-deep": (lambda: _config(EXAMPLES / "gpt2/config.json") | {"extra": _nested(dict, 500)},
                                7, "nests too deeply"),
    "model-type-list": (lambda: _config(EXAMPLES / "gpt2/config.json") | {"model_type": ["gpt2"]},
                        7, "`model_type` must be a string"),
    "model-type-dict": (lambda: _config(EXAMPLES / "gpt2/config.json") | {"model_type": {"a": 1}},
                        7, "`model_type` must be a string"),
    "nested-model-type": (lambda: {"model_type": "llava", "text_config": {"model_type": 3}},
                          7, "`model_type` must be a string"),
    "architectures-string": (lambda: _config(EXAMPLES / "gpt2/config.json") | {"architectures": "GPT2LMHeadModel"},
                             7, "`architectures` must be a list"),
    "more-experts-per-token-than-experts": (
        lambda: _config(EXAMPLES / "Mixtral-8x7B-v0.1/config.json") | {"num_experts_per_tok": 10**9},
        7, "`num_experts_per_tok` (1,000,000,000) exceeds the number of experts (8)"),
}


@pytest.mark.parametrize("name", CASES)
def test_refused_before_any_build(name, tmp_path, capsys, monkeypatch):
    make, code, message = CASES[name]
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "config.json"
    path.write_text(json.dumps(make()))
    builds = derive.meta_builds
    assert run([str(path), "-m", "lora", "-g", "h100"]) == code
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert derive.meta_builds == builds


@pytest.mark.parametrize("path", sorted(p for p in (FIXTURES / "hub").rglob("config.json") if "hfmem-test" not in p.parts),
                         ids=lambda p: p.parent.name)
def test_every_fixture_config_passes_the_guard(path):
    """The bounds leave room for every real model in the fixtures (DeepSeek-V3, Qwen3-235B, Nemotron-H...)."""
    from hfmem.model.guard import guard_config

    guard_config(_config(path))
