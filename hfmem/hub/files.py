"""The file names and size bound of a model's small JSON files, and their reader: shared by Hub and local reads.

Light on purpose (no huggingface_hub import), so reading a local directory or a cache never loads the Hub client.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hfmem import errors

# huggingface_hub.constants.SAFETENSORS_INDEX_FILE / SAFETENSORS_SINGLE_FILE, spelled out so that local reads
# import nothing from the library (tests/test_imports.py checks that the two spellings agree).
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
MAX_JSON_BYTES = 50_000_000  # config.json / index.json larger than this are not real


def read_json_file(path: Path, label: str, malformed: type[errors.HfmemError]) -> Any:
    """Load a JSON file, refusing huge or invalid ones with the given error type."""
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            raise malformed(f"{label} is larger than {MAX_JSON_BYTES:,} bytes.")
        return parse_json(path.read_bytes(), label, malformed)
    except OSError as err:
        raise malformed(f"{label}: {err.strerror}.") from None


def parse_json(raw: bytes, label: str, malformed: type[errors.HfmemError]) -> Any:
    """Decode the bytes of a small JSON file (read from disk or the Hub) with the given error type."""
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # bad UTF-8, bad JSON, integers past Python's digit limit
        raise malformed(f"{label} is not valid JSON.") from None
