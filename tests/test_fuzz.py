"""Fuzz the safetensors header and config handling: every hostile input is one error line and a documented exit code.

Two layers, both driven by hypothesis:

* the pure parsers (``header_length``, ``parse_header``, ``shard_files``, ``guard_config``,
  ``read_architecture``) on random bytes and on structured-but-wrong tables: they return, or raise
  an ``HfmemError``; nothing else escapes;
* the real entry point ``hfmem.cli.run([...])`` on generated local directories (a valid tiny
  config plus fuzzed ``model.safetensors`` files and indexes) and config files: the exit code is
  in the documented set, stderr is one line, no ``Traceback``, never the internal-error code 70.

Cases are counted (``tests/fuzz_stats.py``) and the totals printed at the end of the pytest run.
Each example is cheap: hostile configs are refused before any meta build, and the one valid tiny
config used for checkpoint fuzzing is built once and then served from hfmem's inventory cache.
"""

from __future__ import annotations

import json
import math
import os
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fuzz_stats import record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hfmem.model.guard import guard_config
from hfmem.model.architecture import read_architecture
from hfmem.cli.main import run
from hfmem.errors import HfmemError, MalformedCheckpointError
from hfmem.hub.safetensors import DTYPE_BYTES, MAX_HEADER_BYTES, header_length, parse_header, shard_files

# HFMEM_FUZZ_SCALE=10 runs ten times the examples (by hand, to hunt; CI keeps the default).
SCALE = int(os.environ.get("HFMEM_FUZZ_SCALE", "1"))
FUZZ = settings(max_examples=200 * SCALE, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])
CLI_FUZZ = settings(max_examples=80 * SCALE, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                           HealthCheck.too_slow])

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
    "max_position_embeddings": 512, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
# Exit codes hostile local input may produce (hfmem/errors.py): fine, malformed config or
# checkpoint, absurd config, unsupported architecture. 70 (internal error) is always a bug.
LOCAL_CODES = {0, 7, 8, 9, 11}

# ---------------------------------------------------------------------- strategies

HUGE = st.sampled_from([2**31, 2**48 + 1, 2**62, 2**63, 2**64 + 5, 10**30])
WEIRD_SCALAR = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), HUGE, st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8), st.sampled_from(["12", "", "1e9", "-1", "NaN"]),
)
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(2**65), 2**65), st.floats(allow_nan=False), st.text(max_size=10))
JSON_VALUE = st.recursive(JSON_LEAF, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                             st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                          max_leaves=12)
DTYPE = st.one_of(st.sampled_from(sorted(DTYPE_BYTES)), st.sampled_from(["F128", "bf16", "", "I4"]), WEIRD_SCALAR)
DIM = st.one_of(st.integers(0, 64), st.integers(-5, -1), HUGE, WEIRD_SCALAR)
SHAPE = st.one_of(st.lists(st.integers(0, 64), max_size=3), st.lists(DIM, max_size=4), WEIRD_SCALAR,
                  st.lists(st.lists(st.integers(0, 3), max_size=2), max_size=2))


@st.composite
def tensor_entries(draw: st.DrawFn) -> dict[str, Any]:
    """A header table: mostly consistent entries (contiguous, overlapping or overrunning offsets), some wrong-typed."""
    table: dict[str, Any] = {}
    if draw(st.booleans()):
        table["__metadata__"] = draw(st.one_of(st.just({"format": "pt"}), JSON_VALUE))
    offset = 0
    for i in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["good", "good", "overlap", "gap", "overrun", "shape", "wild"]))
        dtype = draw(st.sampled_from(sorted(DTYPE_BYTES)))
        shape = draw(st.lists(st.integers(0, 16), max_size=3))
        size = math.ceil(math.prod(shape) * DTYPE_BYTES[dtype])
        name = draw(st.one_of(st.just(f"model.layers.{i}.weight"), st.text(max_size=12)))
        if kind == "wild":
            table[name] = draw(st.one_of(JSON_VALUE, st.fixed_dictionaries(
                {"dtype": DTYPE, "shape": SHAPE, "data_offsets": st.one_of(st.lists(DIM, max_size=3), WEIRD_SCALAR)})))
            continue
        begin = {"overlap": max(0, offset - 1), "gap": offset + 3}.get(kind, offset)
        end = begin + size + (draw(st.integers(1, 9)) if kind == "shape" else 0)
        if kind == "overrun":
            end = begin + size
            shape = [*shape, 1] if shape else [1]
        table[name] = {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}
        offset = max(offset, end)
    return table


@st.composite
def safetensors_files(draw: st.DrawFn) -> bytes:
    """A header-only safetensors file: a (possibly lying) u64 prefix, a (possibly non-JSON) table, some data."""
    kind = draw(st.sampled_from(["table", "table", "table", "bytes", "json", "truncated"]))
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    body = (json.dumps(draw(JSON_VALUE)) if kind == "json" else json.dumps(draw(tensor_entries()))).encode()
    if draw(st.booleans()):
        body = body[: draw(st.integers(0, len(body)))] + draw(st.binary(max_size=4))
    length = draw(st.sampled_from(["exact", "exact", "bigger", "huge", "zero", "random"]))
    prefix = {"exact": len(body), "bigger": len(body) + draw(st.integers(1, 1000)), "huge": MAX_HEADER_BYTES + 1,
              "zero": 0, "random": draw(st.integers(0, 2**64 - 1))}[length]
    data = bytes(draw(st.integers(0, 4096)))
    raw = struct.pack("<Q", prefix) + body + data
    return raw[: draw(st.integers(0, 7))] if kind == "truncated" else raw


CONFIG_KEYS = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
               "vocab_size", "max_position_embeddings", "head_dim", "model_type", "architectures", "num_local_experts",
               "num_experts_per_tok", "n_embd", "n_layer", "sliding_window", "layer_types", "rope_scaling",
               "tie_word_embeddings", "torch_dtype", "kv_lora_rank", "moe_intermediate_size"]
BAD_DIM = st.one_of(st.sampled_from([0, -1, -(2**63), 2**20 + 1, 2**31, 2**63, 10**30, "12", "abc", 1.5, 1e308,
                                     math.inf, math.nan, None, True, [], {}, [1, 2]]), WEIRD_SCALAR)


@st.composite
def hostile_configs(draw: st.DrawFn) -> Any:
    """The tiny Llama config with 1-3 keys removed or set to missing/zero/negative/string/huge values, maybe nested."""
    config: dict[str, Any] = dict(TINY_LLAMA)
    for key in draw(st.lists(st.sampled_from(CONFIG_KEYS), min_size=1, max_size=3, unique=True)):
        if draw(st.integers(0, 4)) == 0:
            config.pop(key, None)
        else:
            config[key] = draw(BAD_DIM)
    shape = draw(st.sampled_from(["flat", "flat", "flat", "nested", "not-object"]))
    if shape == "nested":
        return {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"], "text_config": config,
                "vision_config": draw(st.one_of(st.just({"hidden_size": 2**40}), JSON_VALUE))}
    if shape == "not-object":
        return draw(JSON_VALUE)
    return config


def refused_before_building(config: Any) -> bool:
    """Whether the pure checks refuse this config (what the CLI runs before any meta build)."""
    try:
        guard_config(config)
        read_architecture(config)
    except HfmemError:
        return True
    return False


# ---------------------------------------------------------------------- pure parsers


def _parse(raw: bytes) -> None:
    length = header_length(raw[:8], "fuzz.safetensors", len(raw))
    parse_header(raw[8 : 8 + length], "fuzz.safetensors", len(raw) - 8 - length)


@contextmanager
def fuzz_case(target: str, refusal: type[Exception] = MalformedCheckpointError) -> Iterator[None]:
    """One case: it passes, or refuses with a one-line `refusal`; anything else is recorded as bad and raised."""
    ok = True
    try:
        yield
    except refusal as err:
        ok = "\n" not in str(err)
    except Exception:
        ok = False
        raise
    finally:
        record(target, ok)
    assert ok


@FUZZ
@given(raw=safetensors_files())
def test_header_parser_refuses_or_parses(raw):
    with fuzz_case("parse_header (structured files)"):
        _parse(raw)


@FUZZ
@given(raw=st.binary(max_size=200), size=st.one_of(st.none(), st.integers(0, 2**40)))
def test_header_parser_on_random_bytes(raw, size):
    with fuzz_case("parse_header (random bytes)"):
        length = header_length(raw[:8], "fuzz.safetensors", size)
        parse_header(raw[8 : 8 + length], "fuzz.safetensors", None if size is None else max(0, size - 8 - length))


@FUZZ
@given(index=st.one_of(JSON_VALUE, st.fixed_dictionaries({"weight_map": st.dictionaries(
    st.text(max_size=8), st.one_of(st.sampled_from(["model-1.safetensors", "../../etc/passwd.safetensors",
                                                    "/abs.safetensors", ".hidden.safetensors", "sub/x.safetensors",
                                                    "a\\b.safetensors", "x.bin"]), JSON_LEAF), max_size=4),
    "metadata": st.one_of(JSON_VALUE, st.fixed_dictionaries({"total_size": WEIRD_SCALAR}))})))
def test_shard_files_refuses_or_names_safe_shards(index):
    with fuzz_case("shard_files"):
        shards, total = shard_files(index)
        assert all("/" not in s and "\\" not in s and not s.startswith(".") for s in shards)
        assert total is None or (isinstance(total, int) and total >= 0)


@FUZZ
@given(config=hostile_configs())
def test_config_checks_raise_only_hfmem_errors(config):
    with fuzz_case("guard_config + read_architecture", HfmemError):
        guard_config(config)
        read_architecture(config)


# ---------------------------------------------------------------------- the CLI on generated files


@pytest.fixture
def local_env(monkeypatch, tmp_path):
    """No Hub at all (offline), and one hfmem cache for every example: the tiny config is built once."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HFMEM_DEBUG", raising=False)
    return tmp_path


def _cli(capsys, target: str, args: list[str], codes: set[int]) -> int:
    capsys.readouterr()
    code = run(args)
    out, err = capsys.readouterr()
    ok = code in codes and "Traceback" not in out + err and (
        (code == 0 and err.count("\n") <= 1) or (code != 0 and err.count("\n") == 1 and err.startswith("hfmem: error:"))
    )
    record(target, ok)
    assert ok, (code, err[-2000:])
    return code


@CLI_FUZZ
@given(shard=safetensors_files(), index=st.one_of(st.none(), JSON_VALUE, st.fixed_dictionaries(
    {"weight_map": st.dictionaries(st.text(max_size=6), st.sampled_from(
        ["model.safetensors", "model-00001.safetensors", "../model.safetensors", "config.json"]), max_size=3)})))
def test_cli_on_fuzzed_checkpoint_dirs(local_env, capsys, shard, index):
    with tempfile.TemporaryDirectory(dir=local_env) as folder:
        model = Path(folder)
        (model / "config.json").write_text(json.dumps(TINY_LLAMA))
        (model / "model.safetensors").write_bytes(shard)
        if index is not None:
            (model / "model.safetensors.index.json").write_text(json.dumps(index))
        code = _cli(capsys, "hfmem DIR (fuzzed safetensors/index)", [str(model), "--format", "json"], {0, 8})
        if index is not None and code == 0:  # an accepted index may only name files inside the directory
            assert all("/" not in s for s in index["weight_map"].values())


@CLI_FUZZ
@given(config=hostile_configs())
def test_cli_on_hostile_configs(local_env, capsys, config):
    with tempfile.TemporaryDirectory(dir=local_env) as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps(config))
        # 0 is allowed: a missing key the raw checks need may be one transformers fills with its default; a small
        # fp16 card and a large bf16 one stand for the catalogue (each config is a new shape: the whole matrix is
        # computed afresh, six times slower)
        _cli(capsys, "hfmem CONFIG.json (hostile values)", [str(path), "--format", "json", "-g", "t4", "-g", "h100"],
             LOCAL_CODES)


@CLI_FUZZ
@given(raw=st.one_of(st.binary(max_size=100), st.text(max_size=50).map(str.encode),
                     st.sampled_from([b"", b"{", b"[]", b"null", b"\xff\xfe", b'{"a":' * 5000, b"1" * 5000])))
def test_cli_on_non_json_configs(local_env, capsys, raw):
    with tempfile.TemporaryDirectory(dir=local_env) as folder:
        path = Path(folder) / "config.json"
        path.write_bytes(raw)
        _cli(capsys, "hfmem CONFIG.json (raw bytes)", [str(path), "--format", "json"], {7})
