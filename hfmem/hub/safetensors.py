"""Parse and validate safetensors headers (the 8-byte length prefix and the JSON table), never the data.

Pure functions over bytes, shared by the Hub client (HTTP Range reads) and local directories.
Format: https://huggingface.co/docs/safetensors/index#format
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from hfmem.constants import MAX_SHARDS
from hfmem.errors import MalformedCheckpointError
from hfmem.hub.files import INDEX_FILE
from hfmem.hub.schema import COUNT, Map, Nullable, OneOf

MAX_HEADER_BYTES = 25_000_000  # the limit the safetensors library and huggingface_hub enforce
PREFIX_BYTES = 8
FIRST_READ_BYTES = 100_000  # one Range request covers the whole header of ~97% of Hub files

DTYPE_BYTES: dict[str, float] = {
    "F64": 8, "I64": 8, "U64": 8, "C64": 8,
    "F32": 4, "I32": 4, "U32": 4,
    "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1,
    "F6_E2M3": 0.75, "F6_E3M2": 0.75, "F4": 0.5,
}
CHECKPOINT_SCHEMA = {"files": COUNT, "index_total_size": Nullable(COUNT),
                     "tensors": Map((OneOf(DTYPE_BYTES), [COUNT]))}
"""`Checkpoint.to_dict` as hub.schema declares it: what hfmem's cache must hold to be read back."""


@dataclass(frozen=True)
class TensorEntry:
    dtype: str
    shape: tuple[int, ...]

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


@dataclass
class Checkpoint:
    """Every tensor of a checkpoint (all shards), as the headers describe it."""

    tensors: dict[str, TensorEntry] = field(default_factory=dict)
    files: int = 0
    index_total_size: int | None = None

    @property
    def total(self) -> int:
        return sum(t.elements for t in self.tensors.values())

    @property
    def total_bytes(self) -> int:
        return int(sum(t.elements * DTYPE_BYTES[t.dtype] for t in self.tensors.values()))

    def by_dtype(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for t in self.tensors.values():
            counts[t.dtype] = counts.get(t.dtype, 0) + t.elements
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))

    def add(self, filename: str, tensors: dict[str, TensorEntry]) -> None:
        duplicated = self.tensors.keys() & tensors.keys()
        if duplicated:
            raise MalformedCheckpointError(
                f"{filename}: tensor {sorted(duplicated)[0]!r} also appears in another shard.")
        self.tensors.update(tensors)
        self.files += 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "index_total_size": self.index_total_size,
            "tensors": {name: [t.dtype, list(t.shape)] for name, t in self.tensors.items()},
        }

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Checkpoint:
        tensors = {name: TensorEntry(dtype, tuple(shape)) for name, (dtype, shape) in data["tensors"].items()}
        return Checkpoint(tensors=tensors, files=data["files"], index_total_size=data.get("index_total_size"))


def header_length(prefix: bytes, filename: str, file_size: int | None = None) -> int:
    """Decode the little-endian u64 length prefix, refusing truncated, oversized or overrunning headers."""
    if len(prefix) < PREFIX_BYTES:
        raise MalformedCheckpointError(f"{filename}: truncated safetensors file ({len(prefix)} bytes).")
    (length,) = struct.unpack("<Q", prefix[:PREFIX_BYTES])
    if length > MAX_HEADER_BYTES:
        raise MalformedCheckpointError(
            f"{filename}: safetensors header of {length:,} bytes exceeds the {MAX_HEADER_BYTES:,}-byte limit."
        )
    if length < 2:
        raise MalformedCheckpointError(f"{filename}: safetensors header length {length} is too small.")
    if file_size is not None and PREFIX_BYTES + length > file_size:
        raise MalformedCheckpointError(
            f"{filename}: safetensors header length {length:,} runs past the end of the {file_size:,}-byte file."
        )
    return length


def parse_header(raw: bytes, filename: str, data_size: int | None = None) -> dict[str, TensorEntry]:
    """Validate the JSON table: known dtypes, non-negative shapes, offsets matching sizes, no overlaps.

    `data_size` (file size minus prefix and header), when known, bounds the offsets.
    """
    try:
        table = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # bad UTF-8, bad JSON, integers past Python's digit limit
        raise MalformedCheckpointError(f"{filename}: safetensors header is not valid JSON.") from None
    if not isinstance(table, dict):
        raise MalformedCheckpointError(f"{filename}: safetensors header is not a JSON object.")
    tensors: dict[str, TensorEntry] = {}
    spans: list[tuple[int, int, str]] = []
    for name, info in table.items():
        if name == "__metadata__":
            continue
        tensors[name] = entry = _tensor(name, info, filename)
        begin, end = info["data_offsets"]
        if end - begin != math.ceil(entry.elements * DTYPE_BYTES[entry.dtype]):
            raise MalformedCheckpointError(
                f"{filename}: tensor {name!r} spans {end - begin:,} bytes but its shape needs "
                f"{math.ceil(entry.elements * DTYPE_BYTES[entry.dtype]):,}."
            )
        if data_size is not None and end > data_size:
            raise MalformedCheckpointError(f"{filename}: tensor {name!r} runs past the end of the file.")
        spans.append((begin, end, name))
    spans.sort()
    for (_, end, left), (begin, _, right) in pairwise(spans):
        if begin < end:
            raise MalformedCheckpointError(f"{filename}: tensors {left!r} and {right!r} overlap.")
    return tensors


def _tensor(name: str, info: Any, filename: str) -> TensorEntry:
    if not isinstance(info, dict):
        raise MalformedCheckpointError(f"{filename}: entry {name!r} is not an object.")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        raise MalformedCheckpointError(f"{filename}: tensor {name!r} has unknown dtype {dtype!r}.")
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise MalformedCheckpointError(f"{filename}: tensor {name!r} has an invalid shape {shape!r}.")
    if (
        not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets)
        or offsets[1] < offsets[0]
    ):
        raise MalformedCheckpointError(f"{filename}: tensor {name!r} has invalid data_offsets {offsets!r}.")
    if math.prod(shape) > 1 << 48:
        raise MalformedCheckpointError(f"{filename}: tensor {name!r} has an absurd shape {shape!r}.")
    return TensorEntry(dtype, tuple(shape))


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 62


def shard_files(index: Any, filename: str = INDEX_FILE) -> tuple[list[str], int | None]:
    """The shard file names a `model.safetensors.index.json` names (at most MAX_SHARDS), and its declared
    total_size."""
    if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict):
        raise MalformedCheckpointError(f"{filename}: no `weight_map` object.")
    shards = sorted({v for v in index["weight_map"].values() if isinstance(v, str)})
    if len(shards) > MAX_SHARDS:
        raise MalformedCheckpointError(f"{filename} names {len(shards):,} shard files, over the {MAX_SHARDS:,} that "
                                       "any real checkpoint stays far below; refusing to read them.")
    if not shards or len(shards) != len(set(index["weight_map"].values())):
        raise MalformedCheckpointError(f"{filename}: `weight_map` values must be shard file names.")
    for shard in shards:
        unsafe = not shard.isprintable() or "/" in shard or "\\" in shard or shard.startswith(".")
        if unsafe or not shard.endswith(".safetensors"):
            raise MalformedCheckpointError(f"{filename}: refusing shard name {shard!r}.")
    total = (index.get("metadata") or {}).get("total_size") if isinstance(index.get("metadata"), dict) else None
    return shards, total if _is_count(total) else None
