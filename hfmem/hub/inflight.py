"""The Hub requests in flight, by when each started: what a status line reads while the Hub is slow.

No network library here, so a command that only watches (hfmem.cli.waiting) imports nothing heavy.
"""

from __future__ import annotations

import threading
import time

_started: dict[int, tuple[str, str, float]] = {}
_lock = threading.Lock()


def begin(key: int, host: str, what: str, started: float) -> None:
    """A request to `host` ("METHOD /path" in `what`) was sent at `started` (time.monotonic)."""
    with _lock:
        _started[key] = (host, what, started)


def end(key: int) -> None:
    """The request has its whole answer, or failed."""
    with _lock:
        _started.pop(key, None)


def oldest() -> tuple[str, str, float] | None:
    """(host, "METHOD /path", seconds waited) of the request in flight longest, or None when none is."""
    with _lock:
        first = min(_started.values(), key=lambda r: r[2], default=None)
    return None if first is None else (first[0], first[1], time.monotonic() - first[2])
