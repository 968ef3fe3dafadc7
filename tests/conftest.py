"""Shared fixtures: the fake Hub (``tests/hubserver.py``) and a cold, offline-safe client setup."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# One intra-op thread per torch process, set before anything imports torch (the programs the tests start inherit it):
# pytest-xdist runs a worker per core, and a worker's default of a thread per core oversubscribes them; on a loaded
# 2-core machine a tiny model's 60-token model.generate took 15.9 s of wall time with 2 threads and 1.4 s with 1.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Test helpers (hubserver, github_server...) are imported as top-level modules, whether or not
# tests/ is a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hubserver import GRANTED_TOKEN, HubServer  # noqa: E402

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
LOOPBACK = {"127.0.0.1", "::1", "localhost"}


@pytest.fixture(autouse=True, scope="session")
def _loopback_only() -> Iterator[None]:
    """Refuse any connection that is not to 127.0.0.1: tests must never reach the real Hub."""
    original = socket.socket.connect

    def connect(self: socket.socket, address: object) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in LOOPBACK:  # type: ignore[index]
            raise ConnectionRefusedError(f"tests may only connect to 127.0.0.1, not {address!r}")
        return original(self, address)  # type: ignore[arg-type]

    socket.socket.connect = connect  # type: ignore[method-assign]
    yield
    socket.socket.connect = original  # type: ignore[method-assign]


@pytest.fixture(scope="session")
def hub_server() -> Iterator[HubServer]:
    """One fake Hub over ``fixtures/hub`` for the whole session."""
    with HubServer(FIXTURES / "hub") as server:
        yield server


@pytest.fixture
def hub(hub_server: HubServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[HubServer]:
    """The fake Hub with a clean log and no faults, and the environment pointed at it.

    Every test starts cold: ``HF_HOME``/``HF_HUB_CACHE`` and ``HFMEM_CACHE_DIR`` are fresh temp
    folders and ``HF_TOKEN`` is unset. ``huggingface_hub`` reads some of these at import time,
    so its ``constants`` are patched as well; code that runs in this process then talks to the
    fake Hub even without an explicit ``endpoint=``.
    """
    import huggingface_hub.constants as constants

    hub_server.reset()
    home = tmp_path / "hf_home"
    env = {
        "HF_ENDPOINT": hub_server.url,
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HFMEM_CACHE_DIR": str(tmp_path / "hfmem_cache"),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {
        "ENDPOINT": hub_server.url,
        "HUGGINGFACE_CO_URL_TEMPLATE": hub_server.url + "/{repo_id}/resolve/{revision}/{filename}",
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_TOKEN_PATH": str(home / "token"),
        "HF_STORED_TOKENS_PATH": str(home / "stored_tokens"),
        "HF_HUB_DISABLE_TELEMETRY": True,
    }.items():
        monkeypatch.setattr(constants, name, value)
    yield hub_server
    hub_server.reset()


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    """Report how many fuzz cases ran (tests/fuzz_stats.py) and how many misbehaved."""
    from fuzz_stats import summary_lines

    for line in summary_lines():
        terminalreporter.write_line(line)


@pytest.fixture
def granted(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> HubServer:
    """The fake Hub with a token that may read its gated repos (meta-llama/...)."""
    monkeypatch.setenv("HF_TOKEN", GRANTED_TOKEN)
    return hub
