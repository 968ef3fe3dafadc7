"""Parse what the user typed as MODEL: a Hub id (with optional @revision), a local directory, a local
config.json, or `example:NAME` for the configs shipped with hfmem. Validated before any URL is built."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from hfmem.errors import InvalidInputError

# The Hub's rules: letters, digits, '-', '_', '.'; no '--' or '..'; at most 96 characters per name.
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_REPO_ID = re.compile(rf"^(?:{_NAME}/)?{_NAME}$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,254}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class ModelRef:
    """Where a model comes from: kind is "hub", "local" (a directory) or "config" (a config.json file)."""

    kind: str
    name: str
    revision: str | None = None
    path: Path | None = None

    @property
    def pinned(self) -> bool:
        """A full commit sha: its results never change, so they are served from cache without the network."""
        return self.revision is not None and bool(_COMMIT.match(self.revision))


def examples() -> dict[str, Path]:
    """The model configs shipped inside the package, by short name."""
    root = Path(str(resources.files("hfmem") / "examples"))
    return {p.name: p for p in sorted(root.iterdir()) if (p / "config.json").is_file()} if root.is_dir() else {}


def validate_repo_id(repo_id: str) -> str:
    if not _REPO_ID.match(repo_id) or "--" in repo_id or ".." in repo_id:
        raise InvalidInputError(f"{repo_id!r} is not a valid Hub model id (expected org/name, letters, digits, '-', '_', '.').")
    return repo_id


def validate_revision(revision: str) -> str:
    if not _REVISION.match(revision) or ".." in revision or "//" in revision:
        raise InvalidInputError(f"{revision!r} is not a valid revision (a branch, tag or commit sha).")
    return revision


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
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise InvalidInputError(f"{text}: directory has no config.json.")
        return ModelRef("local", str(path), path=path.resolve())
    if path.is_file():
        return ModelRef("config", str(path), path=path.resolve())
    if text.startswith((".", "/", "~")) or text.endswith(".json") or "\\" in text:
        raise InvalidInputError(f"{text}: no such file or directory.")
    repo_id, _, suffix = text.partition("@")
    if suffix and revision and suffix != revision:
        raise InvalidInputError(f"revision given twice: @{suffix} and --revision {revision}.")
    rev = revision or suffix or None
    return ModelRef("hub", validate_repo_id(repo_id), revision=validate_revision(rev) if rev else None)
