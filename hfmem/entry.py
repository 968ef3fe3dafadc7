"""The programs' entry points, `hfmem` (and `python -m hfmem`) and `hfmem-action`: light, so Ctrl-C is caught early.

Only the standard library and `hfmem.errors` load before the SIGINT handler is in place: from there on, a Ctrl-C
at any moment (the ~100 ms of importing typer, rich and huggingface_hub included) ends in one line on stderr and
exit 130 (`ExitCode.INTERRUPTED`), never a traceback and never 0, even where a library swallows the
KeyboardInterrupt (`errors.note_interrupt`). A signal during Python's own start, before hfmem's first line runs,
is still Python's. After an interrupt the process ends at once: a scan's records are flushed one by one as models
finish, and the models still in flight would go unrecorded anyway. Otherwise what the run left in stdout's buffer
is written before exiting, so a failure to write it (a full disk) is still one line and exit 14
(`ExitCode.OUTPUT`), as the commands' own writes are (cli/output_files.py).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from hfmem import errors
from hfmem.errors import ExitCode


def hfmem() -> NoReturn:
    """`hfmem ARGS`: the command line, `hfmem.cli.main.run`."""

    def body() -> int:
        from hfmem.cli.main import run

        return run(sys.argv[1:])

    _finish(_interruptible(body))


def action() -> NoReturn:
    """`hfmem-action`: the GitHub Action, `hfmem.github.action.run`, on the environment the runner sets."""

    def body() -> int:
        from hfmem.github.action import run

        return run(os.environ)

    _finish(_interruptible(body))


def _interruptible(body: Callable[[], int]) -> int:
    """body's exit status, 130 once Ctrl-C was pressed; the one line when body did not say it."""
    _hold_closed_descriptors()
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when started with SIGINT ignored
        signal.signal(signal.SIGINT, errors.note_interrupt)
        sys.unraisablehook = _quiet_interrupts
    try:
        code = body()
    except KeyboardInterrupt:  # while importing, or in the handling of another error
        code = None
    if code is None or (errors.interrupted() and code != ExitCode.INTERRUPTED):  # a library swallowed it
        _say("interrupted.")
        return ExitCode.INTERRUPTED
    return code


def _quiet_interrupts(unraisable: Any) -> None:
    """sys.unraisablehook: a Ctrl-C that lands where Python can only ignore it (an import lock's weakref callback)
    prints no 'Exception ignored' traceback; it is remembered all the same (errors.note_interrupt), so the run still
    ends in exit 130 and one line. Anything else is reported as Python would."""
    if not issubclass(unraisable.exc_type, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)


def _hold_closed_descriptors() -> None:
    """Put /dev/null on a standard descriptor the program started without (`>&-`), so no file or socket takes it.

    Else the next file or socket opened gets its number, and a child process (Chromium, for --plot-format png) would
    write into that. sys.stdout stays None, so a command that prints still says that stdout is closed.
    """
    for number in (0, 1, 2):
        try:
            os.fstat(number)
        except OSError:
            held = os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one, as the lower ones are open
            if held != number:
                os.dup2(held, number)
                os.close(held)


def _finish(code: int) -> NoReturn:
    """Exit with `code`: after an interrupt at once, else once stdout's buffer is written, through Python's exit."""
    if code != ExitCode.INTERRUPTED:
        try:
            code = _flush_stdout(code)
        except KeyboardInterrupt:
            _say("interrupted.")
            code = ExitCode.INTERRUPTED
    if code == ExitCode.INTERRUPTED:  # not writing stdout (its reader may have stopped), nor joining threads in
        os._exit(code)  # flight: their models would go unrecorded anyway
    if signal.getsignal(signal.SIGINT) is errors.note_interrupt:  # Ctrl-C while Python joins threads and exits
        signal.signal(signal.SIGINT, _interrupted_at_exit)
    sys.exit(code)


def _flush_stdout(code: int) -> int:
    """`code`, or 14 when stdout cannot take what is left in its buffer (unless the run already failed)."""
    if sys.stdout is None:  # closed when the program started: the commands that print say so themselves
        return code
    try:
        sys.stdout.flush()
    except OSError as err:
        from hfmem.cli.output_files import drop_stdout, stdout_failure

        drop_stdout()
        message = stdout_failure(err)
        if message is None or code != ExitCode.OK:
            return code
        _say(message)
        return ExitCode.OUTPUT
    return code


def _interrupted_at_exit(signum: int, frame: object) -> None:
    """Ctrl-C after the run, while Python waits for threads: the one line, exit 130 at once."""
    _say("interrupted.")
    os._exit(ExitCode.INTERRUPTED)


def _say(message: str) -> None:
    """`hfmem: error: MESSAGE` on stderr, if there is a stderr to write to."""
    try:
        if sys.stderr is not None:
            sys.stderr.write(f"hfmem: error: {message}\n")
            sys.stderr.flush()
    except (OSError, ValueError):
        pass
