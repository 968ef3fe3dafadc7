"""hfmem's own cache of derived results: fetched metadata per (repo, commit), inventories per config.

A pinned commit never changes, so its entry answers without any network request; inventories are
keyed by a hash of the normalised config and the transformers version, so fine-tunes that share an
architecture share one meta build. Writes are atomic. What is read back is input like any other (a shared home
directory, a CI cache restored from another job): only a regular file within its kind's size bound, written under
the kind and key asked for, whose entry still has the digest it was written with and the shape its kind declares
(hub.schema), is an answer; anything else is a miss, and the caller's save rewrites it.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from hfmem.hub.schema import matches

# Keys that do not change the architecture (provenance, tokenizer ids, generation defaults).
_COSMETIC = {"_name_or_path", "transformers_version", "_commit_hash", "bos_token_id", "eos_token_id",
             "pad_token_id", "use_cache", "torchscript", "output_attentions", "output_hidden_states"}

MAX_ENTRY_BYTES = {"refs": 64 << 10, "repos": 32 << 20, "inventories": 8 << 20, "shapes": 4 << 20}
"""The largest file read back, per entry kind. A `repos` entry holds config.json and every tensor's name, dtype and
shape, about 80 bytes a tensor: by that estimate DeepSeek-V3 (58 MoE layers x 256 experts x 3 projections, each an
FP8 weight with its scale: about 90,000 tensors) needs about 7 MB, so 32 MiB leaves room for larger checkpoints;
one past it is fetched again each run, never wrong. An inventory groups its linear layers by role and shape (a few
kB) beside a normalised config (tens of kB); a ref is two strings."""
_HEAD = ("kind", "key", "sha256")
"""A file's first line: the entry kind and key it was written under (an entry copied under another key, another
model's or another config's, is refused) and the SHA-256 of the entry's JSON on the second line (a truncated or
edited entry is refused before it is parsed)."""


def cache_root() -> Path:
    explicit = os.environ.get("HFMEM_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hfmem"


def config_hash(config: dict[str, Any], salt: str = "") -> str:
    """A stable digest of the architecture-relevant part of a config."""
    relevant = {k: v for k, v in config.items() if k not in _COSMETIC}
    text = json.dumps(relevant, sort_keys=True, separators=(",", ":"), default=str) + salt
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _path(kind: str, key: str) -> Path:
    safe = key.replace("/", "--")
    return cache_root() / kind / f"{safe}.json"


def load(kind: str, key: str, schema: Any) -> dict[str, Any] | None:
    """The entry saved under (kind, key) when it has the shape `schema` declares (hub.schema); else None, a miss."""
    raw = _read(_path(kind, key), MAX_ENTRY_BYTES[kind])
    if raw is None:
        return None
    head, _, body = raw.partition(b"\n")
    try:
        meta = json.loads(head)
        if type(meta) is not dict or meta.keys() != set(_HEAD) or meta["kind"] != kind or meta["key"] != key:
            return None
        if meta["sha256"] != hashlib.sha256(body).hexdigest():
            return None
        entry = json.loads(body)
    except (ValueError, RecursionError):  # bad UTF-8, bad JSON, integers past Python's digit limit, deep nesting
        return None
    return entry if type(entry) is dict and matches(entry, schema) else None


def _read(path: Path, limit: int) -> bytes | None:
    """The bytes of a regular file of at most `limit` bytes; None for anything else (a missing file, a symlink,
    a FIFO, which is opened without blocking and never read, a device, a directory, a larger file)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError):  # ValueError: a NUL in a key read from another entry
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = handle.read(info.st_size + 1)  # its size, not the bound: a read allocates what it asks for
    except OSError:
        return None
    finally:
        os.close(fd)
    return raw if len(raw) <= limit else None


def save(kind: str, key: str, data: dict[str, Any]) -> None:
    """Write atomically under (kind, key); a read-only or full disk only costs the cache, never the result, and an
    entry past its kind's size bound is not written (it would never be read back)."""
    body = json.dumps(data, separators=(",", ":")).encode()  # dumps, not dump: only one-shot encoding runs in C
    head = json.dumps({"kind": kind, "key": key, "sha256": hashlib.sha256(body).hexdigest()}).encode()
    if len(head) + 1 + len(body) > MAX_ENTRY_BYTES[kind]:
        return
    path = _path(kind, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            handle.write(head + b"\n" + body)
        os.replace(tmp, path)
    except (OSError, ValueError):
        pass
