"""Ctrl-C at any moment: exit 130 and one line on stderr, never a traceback, never 0; a scan keeps what it finished.

SIGINT goes to the installed programs (pyproject's console scripts, written as pip writes them) in processes of their
own, under CPU load, at moments each test waits for: while the heavy modules are imported, while the test Hub holds
the API call or the header read, while torch loads for the meta build, and while the report is being written out.
"""

from __future__ import annotations

import fcntl
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from programs import STARTED, cpu_load, script, start
from scan_repos import ORG, add_scan_repos

MODEL = "openai-community/gpt2"
API = "/api/models/*"
HEADER = "*/model.safetensors"
HELD_S = 20.0  # how long the test Hub holds a request; an interrupted program must not wait for it
INTERRUPTED = "hfmem: error: interrupted."
F_SETPIPE_SZ = 1031  # Linux's fcntl to size a pipe


@pytest.fixture(autouse=True)
def busy():
    with cpu_load():
        yield


def wait_for(condition, what: str, process: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the program ended or stalled before {what}: {process.communicate()}")
        time.sleep(0.01)


def interrupt(process: subprocess.Popen) -> tuple[int, str, list[str], float]:
    """Send SIGINT; the exit status, stdout, stderr's lines (without status and marker lines) and seconds to exit."""
    process.send_signal(signal.SIGINT)
    sent = time.monotonic()
    out, err = process.communicate(timeout=60)
    lines = [line for line in err.splitlines() if line != STARTED and not line.startswith("hfmem: waiting")]
    return process.returncode, out or "", lines, time.monotonic() - sent


def assert_interrupted(code: int, lines: list[str], seconds: float, last: str = INTERRUPTED) -> None:
    assert code == 130, lines
    assert lines == [last] and not any("Traceback" in line for line in lines), lines
    assert seconds < HELD_S / 2, f"took {seconds:.1f}s to end"


def started(process: subprocess.Popen) -> None:
    """Wait for the marker line: the entry point is imported and about to run (the heavy imports come next)."""
    assert process.stderr.readline() == STARTED + "\n"


def loading(process: subprocess.Popen, library: str) -> bool:
    """Whether the process has mapped a shared library whose path contains `library` (torch's, say)."""
    try:
        return library in Path(f"/proc/{process.pid}/maps").read_text()
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------- hfmem MODEL

def test_while_importing(hub, tmp_path):
    process = start(script(tmp_path, "hfmem", marker=True), MODEL)
    started(process)
    time.sleep(0.02)  # past the marker, into typer, rich and huggingface_hub (100 ms or more)
    code, out, lines, seconds = interrupt(process)
    assert_interrupted(code, lines, seconds)
    assert out == "" and hub.log == []


@pytest.mark.parametrize("pattern, host", [(API, "hub"), (HEADER, "cdn")], ids=["resolve", "header-fetch"])
def test_while_the_hub_holds_a_request(hub, tmp_path, pattern, host):
    hub.inject(pattern, host=host, latency=HELD_S, times=None)
    process = start(script(tmp_path, "hfmem"), MODEL, "--timeout", str(HELD_S * 2))
    wait_for(lambda: hub.wait_for_request(pattern, host, timeout=0.05), f"asking for {pattern}", process)
    code, out, lines, seconds = interrupt(process)
    assert_interrupted(code, lines, seconds)
    assert out == ""


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/PID/maps")
def test_while_torch_loads_for_the_build(hub, tmp_path):
    process = start(script(tmp_path, "hfmem"), MODEL)
    wait_for(lambda: loading(process, "libtorch"), "loading torch", process)
    code, out, lines, seconds = interrupt(process)
    assert_interrupted(code, lines, seconds)
    assert out == "" and hub.requests(HEADER)  # the headers were read: the build was next


def test_while_writing_the_report(hub, tmp_path):
    """stdout is a 4 kB pipe nobody reads past its first byte: the program is inside its write when SIGINT comes."""
    process = start(script(tmp_path, "hfmem"), MODEL, "--format", "json", "--details")
    fcntl.fcntl(process.stdout.fileno(), F_SETPIPE_SZ, 4096)
    first = process.stdout.read(1)
    code, _, lines, seconds = interrupt(process)
    assert_interrupted(code, lines, seconds)
    assert first == "{"


def test_a_finished_run_is_not_130(hub, tmp_path):
    """The same program left alone: exit 0 and the report (what the tests above interrupt)."""
    process = start(script(tmp_path, "hfmem"), MODEL, "--format", "json")
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0 and err == "", err
    assert json.loads(out)["parameters"]["total"] == 124_439_808


# ---------------------------------------------------------------------------------------------- hfmem scan

def scan(tmp_path: Path, hub, count: int) -> tuple[Path, list[str]]:
    repos = add_scan_repos(hub, count)
    models = tmp_path / "models.txt"
    models.write_text("\n".join(repos.models) + "\n")
    return models, repos.models


def whole_records(out: Path) -> list[dict]:
    """Every line of a results file, each a whole record (none cut short by the interrupt)."""
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def test_scan_while_importing(hub, tmp_path):
    models, _ = scan(tmp_path, hub, 4)
    out = tmp_path / "out.jsonl"
    process = start(script(tmp_path, "hfmem", marker=True), "scan", str(models), "-o", str(out))
    started(process)
    time.sleep(0.02)
    code, _, lines, seconds = interrupt(process)
    assert_interrupted(code, lines, seconds)
    assert whole_records(out) == []


def test_scan_while_the_hub_holds_every_answer(hub, tmp_path):
    """Interrupted before any model was analysed: the results file holds only the failures that needed no Hub."""
    models, _ = scan(tmp_path, hub, 8)
    hub.inject(API, latency=HELD_S, times=None)
    out = tmp_path / "out.jsonl"
    process = start(script(tmp_path, "hfmem"), "scan", str(models), "-o", str(out), "--timeout", str(HELD_S * 2))
    wait_for(lambda: hub.wait_for_request(API, timeout=0.05), "asking the Hub", process)
    code, _, lines, seconds = interrupt(process)
    assert_interrupted(code, lines[-1:], seconds,
                       f"hfmem: error: interrupted; finished models are recorded in {out}, rerun with --resume.")
    assert out.is_file() and all(r["status"] == "error" for r in whole_records(out))


def test_scan_keeps_every_finished_record(hub, tmp_path):
    models, listed = scan(tmp_path, hub, 60)
    hub.inject("*/resolve/*", latency=0.2, times=None)
    out = tmp_path / "out.jsonl"
    process = start(script(tmp_path, "hfmem"), "scan", str(models), "-o", str(out), "--concurrency", "4")
    wait_for(lambda: out.exists() and out.read_bytes().count(b"\n") >= 5, "5 records", process)
    code, _, lines, seconds = interrupt(process)
    assert_interrupted(code, lines[-1:], seconds,
                       f"hfmem: error: interrupted; finished models are recorded in {out}, rerun with --resume.")
    records = whole_records(out)
    assert 5 <= len(records) < len(listed) and {r["model"] for r in records} <= set(listed)
    assert len({r["model"] for r in records}) == len(records)


# ---------------------------------------------------------------------------------------------- the Action

def action_env(tmp_path: Path) -> dict[str, str]:
    """What the runner gives a push workflow's step (no pull request), with one model to report on."""
    from programs import environment

    (tmp_path / "runner").mkdir()
    return environment(GITHUB_ACTIONS="true", GITHUB_EVENT_NAME="push", GITHUB_WORKSPACE=str(tmp_path),
                       GITHUB_STEP_SUMMARY=str(tmp_path / "summary.md"), GITHUB_OUTPUT=str(tmp_path / "output"),
                       RUNNER_TEMP=str(tmp_path / "runner"), INPUT_MODELS=MODEL)


def test_action_while_importing(hub, tmp_path):
    process = start(script(tmp_path, "hfmem-action", marker=True), env=action_env(tmp_path))
    started(process)
    time.sleep(0.02)
    code, out, lines, seconds = interrupt(process)
    assert_interrupted(code, lines, seconds)
    assert out == ""


def test_action_while_the_hub_holds_a_request(hub, tmp_path):
    hub.inject(API, latency=HELD_S, times=None)
    process = start(script(tmp_path, "hfmem-action"), env=action_env(tmp_path))
    wait_for(lambda: hub.wait_for_request(API, timeout=0.05), "asking the Hub", process)
    code, out, lines, seconds = interrupt(process)
    assert code == 130 and "Traceback" not in out + "".join(lines), (out, lines)
    assert [line for line in out.splitlines() if "::error::" in line] == ["::error::hfmem: interrupted."], out
    assert seconds < HELD_S / 2


# ---------------------------------------------------------------------------------------------- swallowed

SWALLOWED = """
import json, os, signal, time
from hfmem import errors
signal.signal(signal.SIGINT, errors.note_interrupt)  # as hfmem.entry does
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
except KeyboardInterrupt:
    pass  # swallowed, as a library interrupted in an import may do, failing later in another way
failures = [RecursionError("maximum recursion depth exceeded"), errors.NetworkError("x: cannot reach the Hub."),
            errors.ScanInterruptedError("interrupted; finished models are recorded in out.jsonl.")]
print(json.dumps([[int(code), message] for code, message in map(errors.classify, failures)]))
"""


def test_a_swallowed_interrupt_still_decides_the_exit(tmp_path):
    """Once Ctrl-C was pressed, whatever fails after it is the interrupt (a half-imported numpy's RecursionError)."""
    from programs import environment

    done = subprocess.run([sys.executable, "-c", SWALLOWED], capture_output=True, text=True, env=environment(),
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[130, "interrupted."], [130, "interrupted."],
                                       [130, "interrupted; finished models are recorded in out.jsonl."]]
