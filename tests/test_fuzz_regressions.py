"""The inputs the fuzz suites (tests/test_fuzz.py) first found crashing hfmem with an internal error, pinned."""

from __future__ import annotations

import json

import pytest

from hfmem.cli.main import run

BASE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256}


@pytest.mark.parametrize("change, code", [
    ({"head_dim": "abc"}, 7),
    ({"head_dim": 1e308}, (7, 9)),
    ({"kv_lora_rank": ":"}, 7),
    ({"architectures": -1}, 7),
    ({"torch_dtype": 1e308}, 7),
    ({"num_attention_heads": 0}, 7),
    ({"first_k_dense_replace": "x", "num_local_experts": 4}, 7),
])
def test_hostile_config_values(tmp_path, capsys, monkeypatch, change, code):
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "config.json"
    path.write_text(json.dumps(BASE | change))
    assert run([str(path)]) in (code if isinstance(code, tuple) else (code,))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error" not in err


def test_integer_past_the_digit_limit(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": ' + "1" * 5000 + "}")
    assert run([str(path)]) == 7
    assert "not valid JSON" in capsys.readouterr().err
