"""A status line on stderr while a Hub request has waited STALL_AFTER_S or more: which host, which request, how long.

On a terminal the line is redrawn in place and cleared when the wait ends; in a log (stderr not a terminal) each
stalled request gets one line, so the log says what the time went on.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from hfmem.hub.inflight import oldest

STALL_AFTER_S = 2.0
POLL_S = 0.25


def describe(host: str, what: str, waited: float) -> str:
    """The status line's text, e.g. "waiting 3s for huggingface.co (GET /api/models/org/x)"."""
    return f"hfmem: waiting {waited:.0f}s for {host} ({what})"


@contextmanager
def stall_notices(stream: TextIO | None = None, after: float = STALL_AFTER_S) -> Iterator[None]:
    """Watch the requests in flight while the block runs; say so on `stream` (stderr) when one stalls."""
    out = stream or sys.stderr
    live = out.isatty()
    stop = threading.Event()
    said: set[tuple[str, str]] = set()
    shown = 0  # the width of the line on screen (terminal only)

    def clear() -> None:
        nonlocal shown
        if shown:
            out.write("\r" + " " * shown + "\r")
            out.flush()
            shown = 0

    def watch() -> None:
        nonlocal shown
        while not stop.wait(POLL_S):
            found = oldest()
            if found is None or found[2] < after:
                clear()
                continue
            text = describe(*found)
            if live:
                out.write("\r" + text.ljust(shown))
                shown = len(text)
            elif found[:2] not in said:
                said.add(found[:2])
                out.write(text + "…\n")
            out.flush()

    thread = threading.Thread(target=watch, name="hfmem-stall-notices", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        clear()
