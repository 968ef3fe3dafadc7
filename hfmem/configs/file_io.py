"""The I/O edge of the config readers: a config file (or the DeepSpeed JSON it names) read, bounded and parsed.

Every refusal is one InvalidInputError line naming the file: a missing path, a directory or device, more than
MAX_BYTES, binary or non-UTF-8 bytes, YAML or JSON that does not parse, a YAML whose aliases expand past MAX_NODES
or refer to themselves, nesting past MAX_DEPTH, a top level that is not a mapping. YAML goes through the safe
loader only (no Python tags). A named DeepSpeed file is looked up relative to the config, then from the folders
above it up to the project root (a folder holding .git, pyproject.toml or setup.py), as the frameworks' examples
name it from the repository root; it must stay inside that tree.
"""

from __future__ import annotations

import json
import stat
import tomllib
from pathlib import Path, PurePath
from typing import Any

import yaml

from hfmem.configs import argument_list
from hfmem.configs.draft import shown
from hfmem.errors import InvalidInputError

MAX_BYTES = 1_000_000
"""No real training config comes near this (the largest in the frameworks' repositories are a few kB)."""
MAX_NODES = 100_000
"""YAML nodes after alias expansion: a billion-laughs file is refused before it is built."""
MAX_DEPTH = 64
"""Nesting depth of mappings and lists; real configs nest four or five deep."""
SUFFIXES = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".sh": "args", ".bash": "args",
            ".txt": "args", ".args": "args", "": "args"}
"""A .toml is torchtitan's JobConfig; a shell script or a plain text file (or no extension) is an argument list."""
PROJECT_MARKERS = (".git", "pyproject.toml", "setup.py")

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_mapping(path: Path, label: str) -> dict:
    """The top-level mapping of a YAML or JSON config file."""
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise InvalidInputError(f"{label}: expected a .yaml, .yml, .json or .toml training config file, or a "
                                "Megatron-LM argument list (.sh, .txt).")
    text = read_text(path, label)
    parsers = {"json": parse_json, "yaml": parse_yaml, "toml": parse_toml, "args": argument_list.parse}
    data = parsers[kind](text, label)
    if data is None:
        raise InvalidInputError(f"{label} is empty; expected a mapping of settings.")
    if not isinstance(data, dict):
        raise InvalidInputError(f"{label}: the top level is {type(data).__name__}, expected a mapping of settings.")
    return data


def read_text(path: Path, label: str) -> str:
    """A regular file's UTF-8 text, at most MAX_BYTES of it."""
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise InvalidInputError(f"{label} is a directory, not a training config file.")
        if not stat.S_ISREG(info.st_mode):
            raise InvalidInputError(f"{label} is not a regular file.")
        if info.st_size > MAX_BYTES:
            raise InvalidInputError(f"{label} is larger than {MAX_BYTES:,} bytes; no training config is.")
        with path.open("rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise InvalidInputError(f"{label}: no such file.") from None
    except OSError as err:
        raise InvalidInputError(f"{label}: {err.strerror or err}.") from None
    except ValueError:  # a NUL byte in the path
        raise InvalidInputError(f"{label!r} is not a usable file path.") from None
    if len(raw) > MAX_BYTES:
        raise InvalidInputError(f"{label} is larger than {MAX_BYTES:,} bytes; no training config is.")
    if b"\0" in raw:
        raise InvalidInputError(f"{label} is binary, not a YAML or JSON text file.")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InvalidInputError(f"{label} is not UTF-8 text (byte {err.start}).") from None


def parse_json(text: str, label: str) -> Any:
    """Decode JSON text, refusing invalid or too deeply nested documents."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise InvalidInputError(f"{label} is not valid JSON (line {err.lineno}: {err.msg}).") from None
    except (ValueError, RecursionError):  # integers past Python's digit limit, nesting past the recursion limit
        raise InvalidInputError(f"{label} is not valid JSON.") from None
    check_depth(data, label)
    return data


def parse_toml(text: str, label: str) -> Any:
    """Decode a TOML document (torchtitan's train configs), refusing invalid or too deeply nested ones."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise InvalidInputError(f"{label} is not valid TOML ({str(err).splitlines()[0]}).") from None
    except RecursionError:
        raise InvalidInputError(f"{label} nests too deeply to be a training config.") from None
    check_depth(data, label)
    return data


def check_depth(data: Any, label: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH (iteratively: the check itself cannot overflow)."""
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidInputError(f"{label} nests deeper than {MAX_DEPTH} levels; no training config does.")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children)


def parse_yaml(text: str, label: str) -> Any:
    """Safe-load one YAML document, after checking the size its aliases expand to."""
    loader = Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded_size(node, label, {}, set(), 1)
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise InvalidInputError(f"{label} is not valid YAML{where}: {problem}.") from None
    except RecursionError:
        raise InvalidInputError(f"{label} nests too deeply to be a training config.") from None
    finally:
        loader.dispose()


def expanded_size(node: yaml.Node, label: str, sizes: dict[int, int], open_: set[int], depth: int) -> int:
    """Nodes the document holds once every alias is expanded; refuses recursive aliases and deep nesting."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise InvalidInputError(f"{label}: a YAML alias refers to itself.")
    if depth > MAX_DEPTH:
        raise InvalidInputError(f"{label} nests deeper than {MAX_DEPTH} levels; no training config does.")
    open_.add(key)
    if isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    else:
        children = []
    size = 1 + sum(expanded_size(child, label, sizes, open_, depth + 1) for child in children)
    open_.discard(key)
    if size > MAX_NODES:
        raise InvalidInputError(f"{label} holds more than {MAX_NODES:,} values once its YAML aliases are expanded.")
    sizes[key] = size
    return size


def project_root(directory: Path) -> Path:
    """The nearest folder at or above `directory` that holds a project marker; `directory` itself if none does."""
    for folder in (directory, *directory.parents):
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            return folder
    return directory


def find_linked(config: Path, reference: str, label: str, key: str) -> Path:
    """The file a config names at `key` (its DeepSpeed JSON): relative to the config, then to the folders above."""
    named = PurePath(reference)
    if named.is_absolute() or reference.startswith("~"):
        raise InvalidInputError(f"{label}: {key} names {shown(reference)}, outside the config's project; only relative "
                                "paths are followed (give that file as a config of its own).")
    directory = config.resolve().parent
    root = project_root(directory)
    escaped = False
    for base in (directory, *directory.parents):
        try:
            candidate = (base / named).resolve()
            if not candidate.is_relative_to(root):
                escaped = True
            elif candidate.is_file():
                return candidate
        except (OSError, ValueError, RuntimeError):  # too long, a NUL byte, a symlink loop
            raise InvalidInputError(f"{label}: {key} names {shown(reference)}, which is not a usable path.") from None
        if base == root:
            break
    if escaped:
        raise InvalidInputError(f"{label}: {key} names {shown(reference)}, which leads outside the config's project "
                                f"({root}); it is not followed.")
    raise InvalidInputError(f"{label}: {key} names {shown(reference)}, which is not a file next to the config or in "
                            "the folders above it.")
