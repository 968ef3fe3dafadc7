"""The header parser accepts real layouts and refuses every malformed one with MalformedCheckpointError."""

import json
import struct

import pytest

from hfmem.errors import MalformedCheckpointError
from hfmem.hub.safetensors import header_length, parse_header, shard_files


def _raw(table: dict) -> bytes:
    return json.dumps(table).encode()


GOOD = {
    "__metadata__": {"format": "pt"},
    "a.weight": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 64]},
    "a.bias": {"dtype": "F32", "shape": [4], "data_offsets": [64, 80]},
    "q": {"dtype": "F8_E4M3", "shape": [3, 3], "data_offsets": [80, 89]},
}


def test_parses_shapes_and_dtypes():
    tensors = parse_header(_raw(GOOD), "m.safetensors", data_size=89)
    assert {n: (t.dtype, t.shape, t.elements) for n, t in tensors.items()} == {
        "a.weight": ("BF16", (4, 8), 32), "a.bias": ("F32", (4,), 4), "q": ("F8_E4M3", (3, 3), 9),
    }


@pytest.mark.parametrize("prefix, size, message", [
    (b"\x01\x02", None, "truncated"),
    (struct.pack("<Q", 25_000_001), None, "exceeds"),
    (struct.pack("<Q", 1000), 500, "runs past the end"),
    (struct.pack("<Q", 0), None, "too small"),
])
def test_length_prefix_refusals(prefix, size, message):
    with pytest.raises(MalformedCheckpointError, match=message):
        header_length(prefix, "m.safetensors", size)


def _bad(**change):
    entry = {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 64]} | change
    return {"a.weight": entry}


@pytest.mark.parametrize("table, message", [
    (b"not json", "not valid JSON"),
    (b"[1, 2]", "not a JSON object"),
    ({"a": 3}, "not an object"),
    (_bad(dtype="F13"), "unknown dtype"),
    (_bad(shape=[-1, 8]), "invalid shape"),
    (_bad(shape=["4", 8]), "invalid shape"),
    (_bad(shape=[1 << 30, 1 << 30]), "absurd shape"),
    (_bad(data_offsets=[64, 0]), "invalid data_offsets"),
    (_bad(data_offsets=[0, 60]), "needs"),
    ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
      "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}, "overlap"),
])
def test_table_refusals(table, message):
    raw = table if isinstance(table, bytes) else _raw(table)
    with pytest.raises(MalformedCheckpointError, match=message):
        parse_header(raw, "m.safetensors")


def test_offsets_past_the_file_are_refused():
    with pytest.raises(MalformedCheckpointError, match="past the end"):
        parse_header(_raw(GOOD), "m.safetensors", data_size=88)


def test_index_shards_and_total():
    index = {"metadata": {"total_size": 10}, "weight_map": {"a": "model-00002-of-00002.safetensors",
                                                             "b": "model-00001-of-00002.safetensors"}}
    assert shard_files(index) == (["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"], 10)


@pytest.mark.parametrize("index", [{}, {"weight_map": []}, {"weight_map": {"a": "../../etc/passwd.safetensors"}},
                                   {"weight_map": {"a": "x.bin"}}, {"weight_map": {"a": 3}}])
def test_index_refusals(index):
    with pytest.raises(MalformedCheckpointError):
        shard_files(index)
