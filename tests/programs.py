"""hfmem's programs as pip installs them: the console scripts pyproject.toml declares, written as pip writes them,
run in processes of their own, and CPU load beside them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STARTED = "program started"
"""What `script(..., marker=True)` writes on stderr once the entry point is imported, just before it is called."""

SCRIPT = """import re
import sys
from {module} import {function}
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
{marker}    sys.exit({function}())
"""
"""pip's console-script wrapper (its `distlib` template)."""


def script(folder: Path, name: str, marker: bool = False) -> Path:
    """The `name` script (hfmem, hfmem-action) as pip would install it, written in `folder`."""
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"][name]
    module, _, function = entry.partition(":")
    said = f"    sys.stderr.write({STARTED + chr(10)!r}); sys.stderr.flush()\n" if marker else ""
    path = folder / name
    path.write_text(SCRIPT.format(module=module, function=function, marker=said))
    return path


def environment(**extra: str) -> dict[str, str]:
    """This process's environment (the test Hub's, where a fixture set it) with this checkout first on the path."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **extra}


def interruptible() -> None:
    """In the child before it runs: SIGINT at its default, as a terminal starts a program. A runner that started
    the tests in the background (`cmd &`, nohup) handed them SIGINT ignored, and the programs rightly keep an
    ignored SIGINT ignored (hfmem/entry.py), so a test's Ctrl-C would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(path: Path, *args: str, **popen: object) -> subprocess.Popen:
    """Run a script written by `script` in a process of its own (text stderr; stdout as `popen` says, else a pipe),
    SIGINT at its default (`interruptible`)."""
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "env": environment(), "text": True,
             "preexec_fn": interruptible} | popen
    return subprocess.Popen([sys.executable, str(path), *args], **popen)  # type: ignore[call-overload]


@contextmanager
def cpu_load(processes: int | None = None) -> Iterator[None]:
    """Busy loops on every core while the block runs, at the lowest priority: the program under test still waits on
    a busy run queue, and the other tests running beside it keep their share of the CPU."""
    code = "import os\nos.nice(19)\nwhile True:\n    pass\n"
    burners = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(processes or os.cpu_count() or 2)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
