"""Read a model from a local directory or config.json: the same checks as for Hub files, from disk."""

from __future__ import annotations

from pathlib import Path

from hfmem import errors
from hfmem.hub.files import INDEX_FILE, SINGLE_FILE, read_json_file
from hfmem.hub.safetensors import PREFIX_BYTES, Checkpoint, header_length, parse_header, shard_files


def read_config(path: Path) -> dict:
    config = read_json_file(path, str(path), errors.MalformedConfigError)
    if not isinstance(config, dict):
        raise errors.MalformedConfigError(f"{path} is not a JSON object.")
    return config


def read_checkpoint(directory: Path) -> Checkpoint | None:
    """Headers of the directory's safetensors files (single or indexed shards); None if it has none."""
    if (directory / INDEX_FILE).is_file():
        shards, total = shard_files(read_json_file(directory / INDEX_FILE, str(directory / INDEX_FILE),
                                                   errors.MalformedCheckpointError))
    elif (directory / SINGLE_FILE).is_file():
        shards, total = [SINGLE_FILE], None
    else:
        return None
    checkpoint = Checkpoint(index_total_size=total)
    for name in shards:
        checkpoint.add(name, read_header(directory / name))
    return checkpoint


def read_header(path: Path) -> dict:
    """Read only the prefix and header bytes of a local safetensors file."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            length = header_length(handle.read(PREFIX_BYTES), path.name, size)
            raw = handle.read(length)
    except FileNotFoundError:
        raise errors.MalformedCheckpointError(f"{path}: shard named by the index is missing.") from None
    except OSError as err:
        raise errors.MalformedCheckpointError(f"{path}: {err.strerror}.") from None
    return parse_header(raw, path.name, size - PREFIX_BYTES - length)
