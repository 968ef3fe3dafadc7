"""Local config.json files for the Action: expand the `config-paths` globs in the workspace and, on a pull
request, fetch each file's base version with `git show <base sha>:<path>` so the report can diff them.

Git runs with an argument list (never a shell) and a validated sha; matches that resolve outside the
workspace (symlinks, `..`) are refused, so a pull request cannot make the Action read other files, and
`**` never descends into a directory link, so a link loop in the checkout cannot make the walk endless.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from hfmem.errors import InvalidInputError
from hfmem.hub.files import MAX_JSON_BYTES

_SHA = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
MAX_CONFIGS = 1000  # a glob matching more than this is a mistake, not a model list


@dataclass(frozen=True)
class ConfigFile:
    """One matched config: `path` relative to the workspace, its base version and how it changed.

    status: "added" (not in the base commit), "modified", "no-base" (no pull request, or the
    base commit not fetched) or "outside" (resolves outside the workspace: not read).
    """

    path: str
    absolute: Path
    status: str
    base: bytes | None = None


def match_configs(globs: list[str], workspace: Path) -> list[tuple[str, Path | None]]:
    """(relative path, resolved file or None when it escapes the workspace) for every glob match, sorted."""
    root = workspace.resolve()
    found: dict[str, Path | None] = {}
    for pattern in globs:
        if Path(pattern).is_absolute() or ".." in Path(pattern).parts:
            raise InvalidInputError(f"config-paths {pattern!r}: use a glob relative to the workspace, without '..'.")
        for rel in _glob(root, pattern):
            target = (root / rel).resolve()
            inside = target.is_relative_to(root)
            if (not inside or target.is_file()) and rel not in found:
                found[rel] = target if inside else None
            if len(found) > MAX_CONFIGS:  # stop the walk here, not after it
                raise InvalidInputError(f"config-paths match more than {MAX_CONFIGS:,} files; at most "
                                        f"{MAX_CONFIGS:,} are analysed.")
    return sorted(found.items())


def _glob(root: Path, pattern: str) -> Iterator[str]:
    """Workspace-relative matches of a glob, lazily. pathlib's `**` does not follow directory links (glob.glob's
    does, so `configs/loop -> .` made it walk about 2^40 paths); hidden names match only when the pattern names a
    hidden part, as with glob.glob."""
    hidden = any(part.startswith(".") for part in PurePosixPath(pattern).parts)
    for path in root.glob(pattern):
        rel = path.relative_to(root)
        if hidden or not any(part.startswith(".") for part in rel.parts):
            yield rel.as_posix()


def missing_base(workspace: Path, sha: str) -> str | None:
    """Why the base commit cannot be read (None when it can): no git, or a shallow clone without it."""
    if not _SHA.match(sha):
        raise InvalidInputError(f"base sha {sha!r} from the event is not a commit id.")
    if shutil.which("git") is None:
        return "git is not installed"
    if _git(workspace, "cat-file", "-e", f"{sha}^{{commit}}") is None:
        return f"the base commit {sha[:12]} is not in this clone (check out with `fetch-depth: 0`)"
    return None


def base_version(workspace: Path, sha: str, rel: str) -> bytes | None:
    """The file's bytes at the base commit, None when it did not exist there; refuses oversized blobs."""
    spec = f"{sha}:./{Path(rel).as_posix()}"
    size = _git(workspace, "cat-file", "-s", spec)
    if size is None:
        return None
    if int(size) > MAX_JSON_BYTES:
        raise InvalidInputError(f"{rel} at the base commit is larger than {MAX_JSON_BYTES:,} bytes.")
    blob = _git(workspace, "cat-file", "blob", spec, text=False)
    return blob if isinstance(blob, bytes) else None


def collect(globs: list[str], workspace: Path, base_sha: str | None) -> tuple[list[ConfigFile], str | None]:
    """Matched configs with their base versions; on a pull request, only the added or modified ones.

    Returns (files, why): why says why there is no diff (None when diffed against the base, and then
    unchanged files are left out); without a diff every matched file is listed with status "no-base".
    """
    matches = match_configs(globs, workspace)
    why = missing_base(workspace, base_sha) if base_sha is not None else "not a pull request"
    files = []
    for rel, target in matches:
        if target is None:
            files.append(ConfigFile(rel, workspace / rel, "outside"))
        elif why is not None or base_sha is None:
            files.append(ConfigFile(rel, target, "no-base"))
        elif (base := base_version(workspace, base_sha, rel)) is None:
            files.append(ConfigFile(rel, target, "added"))
        elif base != target.read_bytes():
            files.append(ConfigFile(rel, target, "modified", base))
    return files, why


def _git(cwd: Path, *args: str, text: bool = True) -> str | bytes | None:
    """Run git; its output, or None when it fails (missing object, not a repository)."""
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.decode().strip() if text else done.stdout
