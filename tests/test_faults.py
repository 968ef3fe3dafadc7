"""Network faults from the test Hub, end to end through `hfmem MODEL`: bounded retries, then one clear line, never a hang.

Each fault hits one of the three kinds of request a cold run makes (the model-info API call, the
config.json download through huggingface_hub, the Range read of a safetensors header on the CDN).
Transient faults that stop are retried through; persistent ones end in exit 6 (NetworkError)
within a bound derived from `--timeout` and the retry schedule (4 retries, backoff 0.5 s doubling).
"""

from __future__ import annotations

import re
import time
from urllib.parse import urlsplit

import pytest

from hfmem.cli.main import run

MODEL = "openai-community/gpt2"
GPT2_TOTAL = 124_439_808
API = "/api/models/*"
CONFIG = "*/resolve/*/config.json"
HEADER = "*/model.safetensors"  # the CDN URL the resolve redirect leads to
BOUND_S = 20.0  # every persistent fault here must end well within this


def hfmem(capsys, *args: str) -> tuple[int, str, str, float]:
    capsys.readouterr()
    start = time.monotonic()
    code = run([MODEL, "--format", "json", *args])
    elapsed = time.monotonic() - start
    out, err = capsys.readouterr()
    return code, out, err, elapsed


def assert_clear_error(code: int, out: str, err: str, elapsed: float, *words: str) -> None:
    assert code == 6, err
    assert err.startswith("hfmem: error:") and err.count("\n") == 1 and "Traceback" not in err, err
    assert all(w in err for w in words), err
    assert out == ""
    assert elapsed < BOUND_S, f"took {elapsed:.1f}s"


def assert_counted(out: str) -> None:
    import json

    assert json.loads(out)["parameters"]["total"] == GPT2_TOTAL


# ---------------------------------------------------------------------- transient: retried through

@pytest.mark.parametrize("pattern, host, effects", [
    (API, "hub", dict(drop=True, times=2)),
    (API, "hub", dict(status=500, times=2)),
    (API, "hub", dict(status=429, retry_after=0, times=3)),
    (CONFIG, "hub", dict(status=502, times=1, method="GET")),
    (CONFIG, "hub", dict(drop=True, times=1, method="GET")),
    (HEADER, "cdn", dict(status=503, times=2)),
    (HEADER, "cdn", dict(drop=True, times=2)),
    (HEADER, "cdn", dict(length_delta=50, times=1)),
    (HEADER, "cdn", dict(stall=2, times=1)),
], ids=["api-drop", "api-500", "api-429", "config-502", "config-drop", "header-503", "header-drop",
        "header-short-body", "header-stall"])
def test_transient_faults_are_retried(hub, capsys, pattern, host, effects):
    fault = hub.inject(pattern, host=host, **effects)
    code, out, err, elapsed = hfmem(capsys, "--timeout", "1")
    assert code == 0, err
    assert_counted(out)
    assert fault.hits == effects["times"]
    assert elapsed < BOUND_S
    assert hub.weight_downloads() == []


def test_content_length_shorter_than_the_body(hub, capsys):
    """The server sends more than it declared: the client reads what was declared, and asks for the rest."""
    hub.inject(HEADER, host="cdn", length_delta=-500, times=1)
    code, out, err, _ = hfmem(capsys, "--timeout", "1")
    assert code == 0, err
    assert_counted(out)


# ---------------------------------------------------------------------- persistent: a clear error, in bounded time

def test_429_storm_gives_up(hub, capsys):
    hub.inject(API, status=429, retry_after=0, times=None)
    code, out, err, elapsed = hfmem(capsys, "--timeout", "1")
    assert_clear_error(code, out, err, elapsed, "429", "after retries")
    assert len(hub.requests(API)) == 5  # one try and 4 retries, no more


def test_persistent_500_on_the_header_read(hub, capsys):
    hub.inject(HEADER, host="cdn", status=500, times=None)
    code, out, err, elapsed = hfmem(capsys, "--timeout", "1")
    assert_clear_error(code, out, err, elapsed, "500")
    assert len([e for e in hub.log if e.host == "cdn"]) == 5


def test_dropped_connections_forever(hub, capsys):
    hub.inject(API, drop=True, times=None)
    code, out, err, elapsed = hfmem(capsys, "--timeout", "1")
    assert_clear_error(code, out, err, elapsed, "cannot reach")
    assert len(hub.requests(API)) == 5


def test_stalled_header_read_times_out(hub, capsys):
    """The error names the host that did not answer (the CDN, not the Hub) and the time waited in all."""
    hub.inject(HEADER, host="cdn", stall=5, times=None)
    code, out, err, elapsed = hfmem(capsys, "--timeout", "0.5")
    assert_clear_error(code, out, err, elapsed, f"no answer from {urlsplit(hub.cdn_url).netloc} after waiting",
                       "--timeout 0.5s per read")
    waited = float(re.search(r"after waiting ([0-9.]+)s", err)[1])
    # retried at least once, and no more than the run took: the message rounds to 0.1 s, so up to 0.05 s above it
    assert 0.5 * 2 <= waited <= elapsed + 0.05


def test_a_stalled_request_says_which_request_waits(hub, capsys):
    """A Hub that takes 3 s to answer gets a status line after 2 s naming the host and the request; the run goes on."""
    hub.inject(API, latency=3.0, times=1)
    code, out, err, _ = hfmem(capsys, "--timeout", "10")
    assert code == 0, err
    assert_counted(out)
    assert err.count("\n") == 1, err
    assert re.match(rf"hfmem: waiting [23]s for {re.escape(urlsplit(hub.url).netloc)} \(GET /api/models/{MODEL}", err), err


def test_no_status_line_when_the_hub_answers_in_time(hub, capsys):
    hub.inject(API, latency=1.0, times=1)
    code, out, err, _ = hfmem(capsys, "--timeout", "10")
    assert code == 0 and err == "", err


def test_stalled_config_download_times_out(hub, capsys):
    hub.inject(CONFIG, stall=5, times=None, method="GET")
    code, out, err, elapsed = hfmem(capsys, "--timeout", "0.5")
    assert_clear_error(code, out, err, elapsed)


def assert_counted_or_clear_error(code: int, out: str, err: str, elapsed: float) -> None:
    """A fault the client may legitimately survive: the exact count in time, or a clear one-line error."""
    if code == 0:
        assert_counted(out)
        assert elapsed < BOUND_S
    else:
        assert_clear_error(code, out, err, elapsed)


def test_wrong_content_length_forever(hub, capsys):
    """Every header read promises 1000 bytes more than it sends: the bytes asked for still arrive, or a clear error."""
    hub.inject(HEADER, host="cdn", length_delta=1000, times=None)
    assert_counted_or_clear_error(*hfmem(capsys, "--timeout", "1"))


def test_wrong_content_length_on_config_json(hub, capsys):
    """huggingface_hub resumes a short body with a Range request: the right config, or a clear error."""
    hub.inject(CONFIG, length_delta=200, times=None, method="GET")
    assert_counted_or_clear_error(*hfmem(capsys, "--timeout", "1"))


@pytest.mark.parametrize("pattern, host", [(API, "hub"), (CONFIG, "hub"), (HEADER, "cdn")],
                         ids=["api", "config", "header"])
def test_redirect_loop(hub, capsys, pattern, host):
    fault = hub.inject(pattern, host=host, redirect_loop=True, times=None)
    code, out, err, elapsed = hfmem(capsys, "--timeout", "1")
    assert_clear_error(code, out, err, elapsed)
    assert fault.hits < 200  # the client stops following, and does not retry a loop for long
