"""The GitHub REST client against the local GitHub server: pagination, upsert, retries, one-line errors."""

import pytest

from hfmem.github.rest import GitHub, GitHubApiError
from github_server import Fault, GitHubServer, GitHubState

TOKEN = "ghs_secretTOKEN123"
MARKER = "<!-- hfmem -->"


@pytest.fixture
def github():
    state = GitHubState(repository="acme/models", token=TOKEN, read_only_tokens={"ghs_readonly"})
    with GitHubServer(state) as url:
        yield state, url


def client(url: str, token: str = TOKEN) -> GitHub:
    return GitHub(url, token, "acme/models", timeout=5, sleep=lambda s: None)


def test_lists_every_page(github):
    state, url = github
    for i in range(250):
        state.add_comment(7, f"comment {i}", {"login": "alice", "type": "User"})
    comments = client(url).list_comments(7)
    assert [c["body"] for c in comments] == [f"comment {i}" for i in range(250)]
    gets = [path for method, path, _ in state.requests if method == "GET"]
    assert len(gets) == 3 and all("per_page=100" in p for p in gets)
    assert all(auth == f"Bearer {TOKEN}" for _, _, auth in state.requests)


def test_upsert_creates_then_updates_the_marked_comment(github):
    state, url = github
    for i in range(120):  # the sticky comment sits on the second page
        state.add_comment(7, f"noise {i}", {"login": "bob", "type": "User"})
    gh = client(url)
    action, first = gh.upsert_comment(7, MARKER, f"{MARKER}\nv1")
    assert action == "created"
    action, second = gh.upsert_comment(7, MARKER, f"{MARKER}\nv2")
    assert action == "updated" and second["id"] == first["id"]
    ours = [c for c in state.comments[7] if c["body"].startswith(MARKER)]
    assert [c["body"] for c in ours] == [f"{MARKER}\nv2"]


def test_upsert_prefers_the_bots_comment_over_a_copied_marker(github):
    state, url = github
    human = state.add_comment(7, f"{MARKER} look, I copied the marker", {"login": "mallory", "type": "User"})
    bot = state.add_comment(7, f"{MARKER}\nold table")
    action, updated = client(url).upsert_comment(7, MARKER, f"{MARKER}\nnew table")
    assert (action, updated["id"]) == ("updated", bot["id"])
    assert human["body"].startswith(f"{MARKER} look")


def test_marker_must_start_the_body(github):
    state, url = github
    state.add_comment(7, f"quoting: {MARKER}", {"login": "bob", "type": "User"})
    assert client(url).upsert_comment(7, MARKER, f"{MARKER}\nx")[0] == "created"


def test_retries_server_errors(github):
    state, url = github
    state.faults.append(Fault(r"^POST ", 500, times=2))
    assert client(url).create_comment(3, "hello")["body"] == "hello"
    assert sum(method == "POST" for method, _, _ in state.requests) == 3


def test_persistent_500_is_one_line(github):
    state, url = github
    state.faults.append(Fault(r"^GET ", 502, times=10, body={"message": "Bad Gateway"}))
    with pytest.raises(GitHubApiError) as err:
        client(url).list_comments(3)
    assert str(err.value) == "GitHub API: GET /repos/acme/models/issues/3/comments answered HTTP 502 after retries: Bad Gateway"
    assert err.value.status == 502


def test_422_names_the_validation_error(github):
    _, url = github
    with pytest.raises(GitHubApiError) as err:
        client(url).create_comment(3, "x" * 70_000)
    assert err.value.status == 422
    assert "body is too long (maximum is 65536 characters)" in str(err.value)


def test_fork_token_gets_403(github):
    _, url = github
    with pytest.raises(GitHubApiError) as err:
        client(url, "ghs_readonly").upsert_comment(3, MARKER, "x")
    assert err.value.status == 403 and "Resource not accessible by integration" in str(err.value)


def test_bad_token_never_echoed(github):
    _, url = github
    with pytest.raises(GitHubApiError) as err:
        client(url, "ghp_wrong_secret").list_comments(3)
    assert err.value.status == 401 and "ghp_wrong_secret" not in str(err.value)


def test_unreachable_api():
    gh = GitHub("http://127.0.0.1:9", TOKEN, "acme/models", timeout=1, retries=1, sleep=lambda s: None)
    with pytest.raises(GitHubApiError, match=r"cannot reach http://127.0.0.1:9"):
        gh.list_comments(1)


def test_refuses_pagination_to_another_origin(github):
    state, url = github
    state.add_comment(5, "x")
    gh = client(url)
    response = gh._request("GET", f"{url}/repos/acme/models/issues/5/comments")
    response.headers["Link"] = '<http://evil.test/steal?page=2>; rel="next"'
    with pytest.raises(GitHubApiError, match="leaves"):
        gh._next_page(response)


def test_only_2xx_is_success(github):
    """A 301 with a JSON body was taken as the created comment ("created the comment: None", exit 0)."""
    state, url = github
    state.faults.append(Fault(r"^POST ", 301, body={"message": "Moved Permanently"},
                              headers={"Location": "https://elsewhere.test/"}))
    with pytest.raises(GitHubApiError, match=r"answered HTTP 301, a redirect; not followed") as err:
        client(url).create_comment(3, "hello")
    assert err.value.exit_code == 13 and not state.comments


@pytest.mark.parametrize("fault, message", [
    (Fault(r"^GET ", 200, body=b"<html><body>Sign in</body></html>"), "answered HTTP 200 with text/html, not JSON"),
    (Fault(r"^GET ", 200, body=[{"id": 1, "body": "x"}, "not an object"]), "did not return a list of comments"),
    (Fault(r"^GET ", 200, body=[{"body": "no id"}]), "did not return a list of comments"),
    (Fault(r"^GET ", 200, body={"message": "an object, not a list"}), "did not return a list of comments"),
    (Fault(r"^POST ", 201, body={}), "answered without the comment it wrote"),
    (Fault(r"^POST ", 201, body={"id": True}), "answered without the comment it wrote"),
    (Fault(r"^POST ", 201, body=b'{"id": 12'), "with text/html, not JSON"),
])
def test_answers_without_the_expected_json_are_failures(github, fault, message):
    state, url = github
    state.faults.append(fault)
    gh = client(url)
    with pytest.raises(GitHubApiError, match=message) as err:
        gh.upsert_comment(3, MARKER, "hello") if fault.pattern == "^POST " else gh.list_comments(3)
    assert err.value.exit_code == 13


def test_a_trickling_answer_hits_the_overall_deadline(github):
    """One byte every 0.2 s keeps each read under the per-read timeout; the whole exchange still ends."""
    import time

    state, url = github
    state.faults.append(Fault(r"^GET ", 200, body=b"[" + b" " * 200 + b"]", trickle=0.2))
    gh = GitHub(url, TOKEN, "acme/models", timeout=1.5, sleep=lambda s: None)
    started = time.monotonic()
    with pytest.raises(GitHubApiError, match=r"no complete answer from .* within 1.5 s"):
        gh.list_comments(3)
    assert time.monotonic() - started < 10
