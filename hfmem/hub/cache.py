"""hfmem's own cache of derived results: fetched metadata per (repo, commit), inventories per config.

A pinned commit never changes, so its entry answers without any network request; inventories are
keyed by a hash of the normalised config and the transformers version, so fine-tunes that share an
architecture share one meta build. Writes are atomic; unreadable entries count as misses.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

# Keys that do not change the architecture (provenance, tokenizer ids, generation defaults).
_COSMETIC = {"_name_or_path", "transformers_version", "_commit_hash", "bos_token_id", "eos_token_id",
             "pad_token_id", "use_cache", "torchscript", "output_attentions", "output_hidden_states"}


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


def load(kind: str, key: str) -> dict[str, Any] | None:
    try:
        data = json.loads(_path(kind, key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def save(kind: str, key: str, data: dict[str, Any]) -> None:
    """Write atomically; a read-only or full disk only costs the cache, never the result."""
    path = _path(kind, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:  # dumps, not dump: only one-shot encoding runs in C
            handle.write(json.dumps(data, separators=(",", ":")))
        os.replace(tmp, path)
    except OSError:
        pass
