"""Standard output that cannot take the output: a full disk and a closed stdout are exit 14 (ExitCode.OUTPUT) with one
line on stderr; a reader that went away (`| head -1`) ends the output quietly, exit 0 (cli/output_files.py says why).

The installed `hfmem` script runs in a process of its own, its stdout on /dev/full, closed by the shell (`>&-`), or a
pipe whose reader has already left.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from programs import environment, script

COMMANDS = {
    "model-table": ["example:gpt2"],
    "model-json": ["example:gpt2", "--format", "json"],
    "model-markdown": ["example:gpt2", "--format", "markdown", "--details"],
    "gpus": ["gpus"],
    "gpus-json": ["gpus", "--format", "json"],
    "version": ["--version"],
    "help": ["--help"],
    "scan-help": ["scan", "--help"],
    "list-only": ["scan", "-", "--list-only"],  # the list comes on stdin
}
FULL = "hfmem: error: cannot write to standard output: No space left on device.\n"
CLOSED = ("hfmem: error: standard output is closed: nothing to write the output to (redirect it to a file, or to "
          "/dev/null to discard it).\n")


@pytest.fixture(scope="session")
def built_cache(tmp_path_factory):
    """hfmem's cache after one cold `hfmem example:gpt2` (the meta build, torch imported): the model commands below
    answer from a copy of it, so each spends its time on the output rather than on a build (4.5 s of CPU each)."""
    folder = tmp_path_factory.mktemp("stdout")
    cache = folder / "cache"
    done = subprocess.run([sys.executable, str(script(folder, "hfmem")), *COMMANDS["model-json"]], text=True,
                          env=environment(HFMEM_CACHE_DIR=str(cache)), capture_output=True, timeout=300, check=False)
    assert done.returncode == 0 and done.stderr == "" and done.stdout, done.stderr
    assert sorted(p.parent.name for p in cache.glob("*/*.json")) == ["inventories", "shapes"]
    return cache


@pytest.fixture
def hfmem(tmp_path, built_cache):
    shutil.copytree(built_cache, tmp_path / "cache")
    env = environment(HFMEM_CACHE_DIR=str(tmp_path / "cache"))

    def run(args: list[str], shell_redirect: str | None = None, **popen: object) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, str(script(tmp_path, "hfmem")), *args]
        if shell_redirect:  # as a shell runs it: `hfmem ARGS >&-`
            command = ["sh", "-c", f'"$@" {shell_redirect}', "sh", *command]
        return subprocess.run(command, env=env, input="org/a\norg/b\n", text=True, timeout=300, check=False, **popen)

    return run


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/dev/full is Linux's")
@pytest.mark.parametrize("args", COMMANDS.values(), ids=COMMANDS)
def test_a_full_disk(hfmem, args):
    with open("/dev/full", "w") as full:
        done = hfmem(args, stdout=full, stderr=subprocess.PIPE)
    assert (done.returncode, done.stderr) == (14, FULL)


@pytest.mark.parametrize("args", COMMANDS.values(), ids=COMMANDS)
def test_a_closed_stdout(hfmem, args):
    done = hfmem(args, shell_redirect=">&-", stderr=subprocess.PIPE)
    assert (done.returncode, done.stderr) == (14, CLOSED)


@pytest.mark.parametrize("args", COMMANDS.values(), ids=COMMANDS)
def test_a_reader_that_went_away(hfmem, args):
    """`hfmem ARGS | head -c 0`: the pipe's reader is gone before the first write; nothing is said, exit 0."""
    done = _pipeline(hfmem, args)
    assert (done.returncode, done.stderr) == (0, "")


def _pipeline(hfmem, args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run with stdout a pipe whose read end this test closed first: every write is EPIPE."""
    read, write = os.pipe()
    os.close(read)
    try:
        return hfmem(args, stdout=write, stderr=subprocess.PIPE)
    finally:
        os.close(write)


def test_the_same_commands_write_normally(hfmem):
    """What the tests above break: each command writes its output and exits 0."""
    for name, args in COMMANDS.items():
        done = hfmem(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert done.returncode == 0 and done.stderr == "" and done.stdout, (name, done.stderr)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/PID/fd")
def test_a_closed_stdout_is_not_reused(hub, tmp_path):
    """While `hfmem MODEL >&-` waits for the Hub, descriptor 1 is /dev/null, not the socket or a file opened since."""
    hub.inject("/api/models/*", latency=30, times=None)
    command = [sys.executable, str(script(tmp_path, "hfmem")), "openai-community/gpt2", "--timeout", "60"]
    process = subprocess.Popen(["sh", "-c", 'exec "$@" >&-', "sh", *command], env=environment(),
                               stderr=subprocess.DEVNULL)
    try:
        assert hub.wait_for_request("/api/models/*", timeout=120)
        held = os.readlink(f"/proc/{process.pid}/fd/1")
    finally:
        process.kill()
        process.wait()
    assert held == os.devnull
