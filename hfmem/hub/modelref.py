"""Parse what the user typed as MODEL: a Hub id (with optional @revision), a local directory, a local
config.json, or `example:NAME` for the configs shipped with hfmem. Validated before any URL is built."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from hfmem.errors import InvalidInputError

# The Hub's rules: letters, digits, '-', '_', '.'; no '--' or '..'; at most 96 characters per name.
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_REPO_ID = re.compile(rf"^(?:{_NAME}/)?{_NAME}$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,254}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
SHOWN_CHARS = 100  # what an error message quotes of a long input


@dataclass(frozen=True)
class ModelRef:
    """Where a model comes from: kind is "hub", "local" (a directory) or "config" (a config.json file)."""

    kind: Literal["hub", "local", "config"]
    name: str
    revision: str | None = None
    path: Path | None = None

    @property
    def pinned(self) -> bool:
        """A full commit sha: its results never change, so they are served from cache without the network."""
        return self.revision is not None and is_commit(self.revision)


def examples() -> dict[str, Path]:
    """The model configs shipped inside the package, by short name."""
    root = Path(str(resources.files("hfmem") / "examples"))
    return {p.name: p for p in sorted(root.iterdir()) if (p / "config.json").is_file()} if root.is_dir() else {}


def is_commit(text: str) -> bool:
    """A full commit sha (40 lowercase hex digits)."""
    return bool(_COMMIT.match(text))


def is_repo_id(text: str) -> bool:
    """A Hub model id by the Hub's rules (org/name or name)."""
    return bool(_REPO_ID.match(text)) and "--" not in text and ".." not in text


def shorten(text: object) -> str:
    """`text` as an error message may quote it: at most SHOWN_CHARS characters."""
    shown = str(text)
    return shown if len(shown) <= SHOWN_CHARS else shown[:SHOWN_CHARS] + "..."


def validate_repo_id(repo_id: str) -> str:
    if not is_repo_id(repo_id):
        raise InvalidInputError(
            f"{shorten(repo_id)!r} is not a valid Hub model id (expected org/name, letters, digits, '-', '_', '.')."
        )
    return repo_id


def validate_revision(revision: str) -> str:
    if not _REVISION.match(revision) or ".." in revision or "//" in revision:
        raise InvalidInputError(f"{shorten(revision)!r} is not a valid revision (a branch, tag or commit sha).")
    return revision


def _local_kind(path: Path) -> Literal["local", "config"] | None:
    """"local" for a directory, "config" for a file, None for neither (or a name the file system refuses)."""
    try:
        return "local" if path.is_dir() else "config" if path.is_file() else None
    except OSError:  # ENAMETOOLONG and the like: not a local path, so a (likely invalid) Hub id
        return None


def parse_model_ref(text: str, revision: str | None = None) -> ModelRef:
    """Interpret MODEL; `--revision` wins over an `@revision` suffix only when they agree."""
    text = text.strip()
    if not text:
        raise InvalidInputError("MODEL is empty.")
    if text.startswith("example:"):
        name = text.removeprefix("example:")
        shipped = examples()
        if name not in shipped:
            raise InvalidInputError(f"no built-in example {name!r}; choose one of: {', '.join(shipped) or 'none'}.")
        return ModelRef("local", f"example:{name}", path=shipped[name])
    path = Path(text).expanduser()
    kind = _local_kind(path)
    if kind == "local" and not (path / "config.json").is_file():
        raise InvalidInputError(f"{text}: directory has no config.json.")
    if kind:
        return ModelRef(kind, str(path), path=path.resolve())
    if text.startswith((".", "/", "~")) or text.endswith(".json") or "\\" in text:
        raise InvalidInputError(f"{shorten(text)}: no such file or directory.")
    repo_id, _, suffix = text.partition("@")
    if suffix and revision and suffix != revision:
        raise InvalidInputError(f"revision given twice: @{suffix} and --revision {revision}.")
    rev = revision or suffix or None
    return ModelRef("hub", validate_repo_id(repo_id), revision=validate_revision(rev) if rev else None)
