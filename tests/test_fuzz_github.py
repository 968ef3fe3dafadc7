"""Fuzz the Action's inputs from GitHub: the event file and the REST API's answers. Whatever they hold, the Action
ends with a documented exit code and one error line, never the internal error (70) or a traceback.

Both run the real code: `action.run` on a generated `$GITHUB_EVENT_PATH`, and the `GitHub` client against the local
GitHub server (`tests/github_server.py`) answering with generated statuses and bodies. Cases are counted like the
other fuzz suites (`tests/fuzz_stats.py`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from action_reports import qlora_on_4090
from fuzz_stats import record
from github_server import Fault, GitHubServer, GitHubState
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hfmem.errors import ExitCode, GitHubApiError
from hfmem.github import action
from hfmem.github.rest import GitHub

TOKEN = "ghs_fuzzTOKEN"
FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])
ACTION_CODES = {ExitCode.OK, ExitCode.INVALID_INPUT, ExitCode.GITHUB_API}

LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(2**65), 2**65), st.floats(allow_nan=False),
                 st.text(max_size=12), st.sampled_from(["a" * 40, "acme/models", "../../x", "7"]))
VALUE = st.recursive(LEAF, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                  st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                     max_leaves=10)


@st.composite
def events(draw: st.DrawFn) -> Any:
    """A pull_request event with any of its fields replaced by a generated value (or the whole event)."""
    event: dict[str, Any] = {"pull_request": {"number": 7, "base": {"sha": "a" * 40, "repo": {"full_name": "acme/models"}},
                                              "head": {"repo": {"full_name": "acme/models"}}}}
    if draw(st.integers(0, 9)) == 0:
        return draw(VALUE)
    for path in draw(st.lists(st.sampled_from([("pull_request",), ("pull_request", "number"), ("pull_request", "base"),
                                               ("pull_request", "base", "sha"), ("pull_request", "base", "repo"),
                                               ("pull_request", "head"), ("pull_request", "head", "repo"),
                                               ("pull_request", "head", "repo", "full_name")]), min_size=1, max_size=3)):
        target = event
        for key in path[:-1]:
            target = target.get(key) if isinstance(target, dict) else None
        if isinstance(target, dict):
            target[path[-1]] = draw(VALUE)
    return event


ANSWERS = st.one_of(VALUE, st.binary(max_size=40), st.just(b"<html>Sign in</html>"))
STATUSES = st.sampled_from([200, 201, 204, 301, 302, 304, 401, 403, 404, 422, 500, 503])


@pytest.fixture(scope="module")
def github():
    state = GitHubState(repository="acme/models", token=TOKEN)
    with GitHubServer(state) as url:
        yield state, url


def _report(ref: Any) -> dict[str, Any]:
    """A real report renamed, without a build per case (the event is what is fuzzed here)."""
    return qlora_on_4090("Meta-Llama-3-8B", ref.name)


@FUZZ
@given(event=events())
def test_any_event_file_is_a_documented_exit(github, tmp_path_factory, event):
    state, url = github
    folder = tmp_path_factory.mktemp("event")
    (folder / "event.json").write_text(json.dumps(event))
    env = {"GITHUB_WORKSPACE": str(folder), "RUNNER_TEMP": str(folder), "INPUT_MODELS": "org/fits",
           "GITHUB_EVENT_PATH": str(folder / "event.json"), "GITHUB_API_URL": url, "INPUT_TOKEN": TOKEN,
           "GITHUB_REPOSITORY": "acme/models"}
    lines: list[str] = []
    code = action.run(env, _report, action.Log(write=lines.append))
    errors = [line for line in lines if line.startswith("::error::")]
    ok = code in ACTION_CODES and len(errors) <= 1 and (code == ExitCode.OK) == (not errors)
    record("Action event file", ok)
    assert ok, (code, lines)


@FUZZ
@given(status=STATUSES, body=ANSWERS, method=st.sampled_from(["GET", "POST", "PATCH"]))
def test_any_api_answer_is_a_result_or_one_line(github, status, body, method):
    state, url = github
    state.faults.clear()
    state.comments.clear()
    state.add_comment(3, "<!-- hfmem -->\nold")
    state.faults.append(Fault(rf"^{method} ", status, times=4, body=body))
    gh = GitHub(url, TOKEN, "acme/models", timeout=5, retries=1, sleep=lambda s: None)
    ok = True
    try:
        done, comment = gh.upsert_comment(3, "<!-- hfmem -->", "new")
        ok = done in {"created", "updated"} and isinstance(comment.get("id"), int)
    except GitHubApiError as err:
        ok = "\n" not in str(err) and err.exit_code == ExitCode.GITHUB_API
    except Exception:
        ok = False
        raise
    finally:
        gh.close()
        record("GitHub API answers", ok)
    assert ok


@pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning")
def test_the_event_fuzzer_reaches_the_validation(github, tmp_path: Path) -> None:
    """The generator is not vacuous: its events include ones the Action refuses (exit 2) and ones it accepts."""
    _, url = github
    codes = set()
    for i in range(40):
        (tmp_path / "event.json").write_text(json.dumps(events().example()))
        env = {"GITHUB_WORKSPACE": str(tmp_path), "RUNNER_TEMP": str(tmp_path), "INPUT_MODELS": "org/fits",
               "GITHUB_EVENT_PATH": str(tmp_path / "event.json"), "GITHUB_API_URL": url, "INPUT_TOKEN": TOKEN,
               "GITHUB_REPOSITORY": "acme/models"}
        codes.add(action.run(env, _report, action.Log(write=lambda line: None)))
    assert {ExitCode.OK, ExitCode.INVALID_INPUT} <= codes
