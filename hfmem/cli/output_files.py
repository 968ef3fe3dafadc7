"""Writing what the user asked for: an output file they named (--csv, --markdown, --html) or standard output.

Either failing is one line and exit code OUTPUT (14), never a traceback; a closed stdout is said, not silently
skipped. A reader of stdout that went away (`hfmem MODEL | head -1`) is not a failure: as `head` took what it
wanted, the rest of the output is dropped and the run ends as it would have (exit 0), as ripgrep does.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from hfmem import errors

if TYPE_CHECKING:
    from rich.console import Console


def write_output(path: Path, text: str) -> None:
    """Write text to path as UTF-8; OSError (no such folder, no permission, disk full) becomes an OutputError."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise errors.OutputError(f"cannot write {path}: {err.strerror or err}.") from None


@contextmanager
def standard_output() -> Iterator[TextIO]:
    """stdout for a command's output, flushed at the end: closed or failing (a full disk) is an OutputError."""
    if sys.stdout is None:  # Python's stdout when descriptor 1 was closed (`hfmem MODEL >&-`)
        raise errors.OutputError("standard output is closed: nothing to write the output to "
                                 "(redirect it to a file, or to /dev/null to discard it).")
    try:
        yield sys.stdout
        sys.stdout.flush()
    except OSError as err:
        drop_stdout()
        message = stdout_failure(err)
        if message is not None:
            raise errors.OutputError(message) from None


def stdout_console(out: TextIO) -> Console:
    """A rich Console on `out` that leaves a broken pipe to `standard_output` (rich's own answer is exit 1)."""
    from rich.console import Console

    class StdoutConsole(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    return StdoutConsole(file=out)


def stdout_failure(err: OSError) -> str | None:
    """The one line for a write to stdout that failed; None when its reader went away (a broken pipe)."""
    if isinstance(err, BrokenPipeError) or err.errno == errno.EPIPE:
        return None
    return f"cannot write to standard output: {err.strerror or type(err).__name__}."


def drop_stdout() -> None:
    """Point stdout's descriptor at /dev/null, so the unwritten rest in its buffer cannot fail again at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no descriptor behind stdout (captured by a test, replaced)
        pass
