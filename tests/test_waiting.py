"""The status line for a stalled Hub request (hfmem.cli.waiting), on a terminal and in a log."""

from __future__ import annotations

import io
import time

from hfmem.cli.waiting import stall_notices
from hfmem.hub import inflight


class Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _stall(stream: io.StringIO, seconds: float) -> None:
    with stall_notices(stream, after=0.2):
        inflight.begin(1, "hub.example:8080", "GET /api/models/org/x", time.monotonic())
        time.sleep(seconds)
        inflight.end(1)
        time.sleep(0.4)


def test_a_log_gets_one_line_per_stalled_request():
    log = io.StringIO()
    _stall(log, 1.0)
    assert log.getvalue() == "hfmem: waiting 0s for hub.example:8080 (GET /api/models/org/x)…\n"


def test_a_terminal_line_is_redrawn_then_cleared():
    screen = Terminal()
    _stall(screen, 1.0)
    text = screen.getvalue()
    assert text.count("\rhfmem: waiting") >= 2 and "hub.example:8080 (GET /api/models/org/x)" in text
    assert text.endswith("\r") and "\n" not in text  # cleared when the answer came: nothing left on screen


def test_nothing_is_said_for_a_quick_answer():
    log = io.StringIO()
    _stall(log, 0.05)
    assert log.getvalue() == ""
