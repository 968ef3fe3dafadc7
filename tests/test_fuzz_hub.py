"""Fuzz what the Hub answers: the model description, config.json and the safetensors header, mutated at random and
served by the test Hub to the real client. Every run ends with a documented exit code and at most one error line,
never the internal error (70) or a traceback. Cases are counted with the other fuzz suites (tests/fuzz_stats.py)."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
from fuzz_stats import record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hfmem.cli.main import run

MODEL = "openai-community/gpt2"
HUB_CODES = {0, 3, 4, 5, 6, 7, 8, 9, 11}
"""Exit codes a hostile Hub may produce (hfmem/errors.py); 70 is always a bug."""
FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])
GPT2 = json.loads((Path(__file__).resolve().parent.parent / "hfmem" / "examples" / "gpt2" / "config.json").read_text())

LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(2**65), 2**65), st.floats(allow_nan=False),
                 st.text(max_size=12), st.sampled_from(["../../x", "a" * 40, "\u00b2", "F32", "model.safetensors"]))
VALUE = st.recursive(LEAF, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                  st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                     max_leaves=8)


def mutated(base: dict[str, Any], keys: list[str]) -> st.SearchStrategy[bytes]:
    """`base` with some of `keys` (or new ones) replaced by generated values, or random bytes."""
    fields = st.dictionaries(st.sampled_from(keys) | st.text(max_size=6), VALUE, min_size=1, max_size=3)
    return st.one_of(fields.map(lambda change: json.dumps(base | change).encode()), st.binary(max_size=64))


API_BODY = mutated({"id": MODEL, "sha": "b" * 40, "siblings": [{"rfilename": "config.json"}]},
                   ["id", "modelId", "sha", "siblings", "private", "gated", "safetensors"])
CONFIG_BODY = mutated(GPT2, ["model_type", "architectures", "n_layer", "n_embd", "n_head", "vocab_size",
                             "n_positions", "torch_dtype", "tie_word_embeddings", "text_config"])
HEADER_TABLE = st.dictionaries(st.sampled_from(["wte.weight", "__metadata__", "h.0.attn.c_attn.weight"])
                               | st.text(max_size=6), VALUE, max_size=3)
HEADER_BODY = st.one_of(HEADER_TABLE.map(lambda t: struct.pack("<Q", len(json.dumps(t))) + json.dumps(t).encode()),
                        st.binary(max_size=64))


SEEN: dict[str, set[int]] = {}
"""The exit codes each target's cases produced (the last test checks the faults reached the client)."""


def answer(hub: Any, tmp_path: Path, target: str, pattern: str, body: bytes, **where: Any) -> None:
    """One case: the Hub answers `body` for `pattern`, hfmem's own cache is cold, and the run is judged."""
    hub.clear_faults()
    for kind in ("repos", "refs"):
        shutil.rmtree(tmp_path / "hfmem_cache" / kind, ignore_errors=True)
    hub.inject(pattern, body=body, times=None, **where)
    code = run([MODEL, "--format", "json", "-m", "lora", "-g", "h100"])
    SEEN.setdefault(target, set()).add(code)
    record(target, code in HUB_CODES)
    assert code in HUB_CODES, (code, body[:200])


@FUZZ
@given(body=API_BODY)
def test_any_model_description(hub, tmp_path, capsys, body):
    answer(hub, tmp_path, "Hub answers: /api/models", "/api/models/*", body)
    assert capsys.readouterr().err.count("\n") <= 1


@FUZZ
@given(body=CONFIG_BODY)
def test_any_config_json(hub, tmp_path, capsys, body):
    answer(hub, tmp_path, "Hub answers: config.json", "*/resolve/*/config.json", body)
    assert capsys.readouterr().err.count("\n") <= 1


@FUZZ
@given(body=HEADER_BODY)
def test_any_safetensors_header(hub, tmp_path, capsys, body):
    answer(hub, tmp_path, "Hub answers: safetensors header", "*/model.safetensors", body, host="cdn")
    assert capsys.readouterr().err.count("\n") <= 1


def test_the_fuzzers_reached_the_client():
    """Each target's mutations made some runs fail (the faults reached the client, not a path nobody reads)."""
    if not SEEN:
        pytest.skip("checks the fuzz tests above; run with them")
    assert set(SEEN) == {"Hub answers: /api/models", "Hub answers: config.json", "Hub answers: safetensors header"}
    assert all(codes - {0} for codes in SEEN.values()), SEEN
