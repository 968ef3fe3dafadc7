"""Writing an output file the user named (--csv, --markdown, --html): a failure is one line and exit code OUTPUT."""

from __future__ import annotations

from pathlib import Path

from hfmem import errors


def write_output(path: Path, text: str) -> None:
    """Write text to path as UTF-8; OSError (no such folder, no permission, disk full) becomes an OutputError."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise errors.OutputError(f"cannot write {path}: {err.strerror or err}.") from None
