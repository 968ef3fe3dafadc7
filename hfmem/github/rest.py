"""GitHub REST client for what the Action needs: keep one sticky comment on a pull request up to date.

Requests go to `$GITHUB_API_URL` with `Authorization: Bearer <token>`; the token is sent only to that
origin (pagination links elsewhere are refused, redirects are not followed) and never appears in a message.
Each exchange has an overall deadline (`timeout`, not only per read, so a server that trickles a byte a
second cannot hang the step) and a size cap. Only a 2xx answer carrying the expected JSON is a success;
every other answer becomes one `GitHubApiError` line naming the request and GitHub's own message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2

from hfmem import __version__
from hfmem.errors import GitHubApiError

MAX_PAGES = 50  # 5,000 comments: far more than a pull request has; stops a runaway Link chain
MAX_ANSWER_BYTES = 10_000_000  # one page of 100 comments of 65,536 characters is under 7 MB
_TRANSIENT = {429, 500, 502, 503, 504}


@dataclass
class GitHub:
    """Issue-comment calls for one repository ("owner/name") with one token."""

    api_url: str
    token: str
    repository: str
    timeout: float = 10.0
    """Seconds for one whole exchange (connect, send, every byte of the answer)."""
    retries: int = 3
    sleep: Callable[[float], None] = time.sleep
    _client: httpx2.Client = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.api_url = self.api_url.rstrip("/")
        self._client = httpx2.Client(timeout=self.timeout, follow_redirects=False, headers={
            "Authorization": f"Bearer {self.token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": f"hfmem/{__version__}",
        })

    def close(self) -> None:
        self._client.close()

    def list_comments(self, number: int) -> list[dict[str, Any]]:
        """Every comment on issue/PR `number`, following `Link: rel="next"` pages."""
        url: str | None = f"{self.api_url}/repos/{self.repository}/issues/{number}/comments?per_page=100"
        comments: list[dict[str, Any]] = []
        for _ in range(MAX_PAGES):
            if url is None:
                return comments
            response = self._request("GET", url)
            page = _json(response, f"GET {self._path(url)}")
            if not isinstance(page, list) or not all(_is_comment(c) for c in page):
                raise GitHubApiError(f"GitHub API: GET {self._path(url)} did not return a list of comments.")
            comments += page
            url = self._next_page(response)
        raise GitHubApiError(f"GitHub API: more than {MAX_PAGES} pages of comments on #{number}; giving up.")

    def create_comment(self, number: int, body: str) -> dict[str, Any]:
        return self._comment("POST", f"{self.api_url}/repos/{self.repository}/issues/{number}/comments", body)

    def update_comment(self, comment_id: int, body: str) -> dict[str, Any]:
        return self._comment("PATCH", f"{self.api_url}/repos/{self.repository}/issues/comments/{comment_id}", body)

    def upsert_comment(self, number: int, marker: str, body: str) -> tuple[str, dict[str, Any]]:
        """Update the comment that starts with `marker` (a bot's first), or create one: ("updated"|"created", it)."""
        ours = [c for c in self.list_comments(number) if str(c.get("body") or "").startswith(marker)]
        ours.sort(key=lambda c: (c.get("user") or {}).get("type") != "Bot")  # stable: oldest bot comment first
        if ours:
            return "updated", self.update_comment(ours[0]["id"], body)
        return "created", self.create_comment(number, body)

    # -- plumbing --------------------------------------------------------------------------------
    def _comment(self, method: str, url: str, body: str) -> dict[str, Any]:
        """Create or update a comment: the answer must be the comment, with its id."""
        where = f"{method} {self._path(url)}"
        comment = _json(self._request(method, url, {"body": body}), where)
        if not _is_comment(comment):
            raise GitHubApiError(f"GitHub API: {where} answered without the comment it wrote.")
        return comment

    def _request(self, method: str, url: str, payload: dict[str, Any] | None = None) -> httpx2.Response:
        """One call, retried on 429/5xx/transport errors (honouring Retry-After), errors as one line."""
        where = f"{method} {self._path(url)}"
        for attempt in range(self.retries + 1):
            try:
                response = self._exchange(method, url, payload, where)
            except httpx2.TransportError as err:
                if attempt == self.retries:
                    raise GitHubApiError(
                        f"GitHub API: {where}: cannot reach {self.api_url} ({type(err).__name__}).") from None
                self.sleep(0.5 * 2**attempt)
                continue
            if 300 <= response.status_code < 400:
                raise GitHubApiError(f"GitHub API: {where} answered HTTP {response.status_code}, a redirect; "
                                     f"not followed (the token is sent to {self.api_url} only).",
                                     response.status_code)
            if response.status_code < 300:
                return response
            if response.status_code not in _TRANSIENT or attempt == self.retries:
                break
            self.sleep(_retry_after(response, attempt))
        suffix = " after retries" if response.status_code in _TRANSIENT else ""
        raise GitHubApiError(f"GitHub API: {where} answered HTTP {response.status_code}{suffix}: {_message(response)}",
                             response.status_code)

    def _exchange(self, method: str, url: str, payload: dict[str, Any] | None, where: str) -> httpx2.Response:
        """Send and read the whole answer within the deadline and the size cap."""
        deadline = time.monotonic() + self.timeout
        with self._client.stream(method, url, json=payload) as response:
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    raise GitHubApiError(f"GitHub API: {where}: the answer exceeds {MAX_ANSWER_BYTES:,} bytes.")
                if time.monotonic() > deadline:
                    raise GitHubApiError(f"GitHub API: {where}: no complete answer from {self.api_url} within "
                                         f"{self.timeout:g} s.")
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in {"content-encoding",
                                                                                           "content-length"}]
        return httpx2.Response(response.status_code, headers=headers, content=bytes(body), request=response.request)

    def _next_page(self, response: httpx2.Response) -> str | None:
        """The rel="next" URL, only if it stays on the API origin (the token must not travel elsewhere)."""
        url = response.links.get("next", {}).get("url")
        if url is None:
            return None
        if _origin(url) != _origin(self.api_url):
            raise GitHubApiError(f"GitHub API: pagination link leaves {self.api_url}; refusing to follow it.")
        return url

    def _path(self, url: str) -> str:
        return httpx2.URL(url).path


def _origin(url: str) -> tuple[str, bytes]:
    parsed = httpx2.URL(url)
    return parsed.scheme, parsed.netloc


def _retry_after(response: httpx2.Response, attempt: int) -> float:
    try:
        return min(max(float(response.headers.get("Retry-After", "")), 0.0), 30.0)
    except ValueError:
        return 0.5 * 2**attempt


def _json(response: httpx2.Response, where: str) -> Any:
    """The answer's JSON; an HTML page or other text (a proxy, a wrong api-url) is a failure, not a crash."""
    try:
        return response.json()
    except ValueError:
        kind = response.headers.get("Content-Type", "no content type").split(";")[0]
        raise GitHubApiError(f"GitHub API: {where} answered HTTP {response.status_code} with {kind}, not JSON "
                             "(is the API URL right?).", response.status_code) from None


def _is_comment(value: Any) -> bool:
    """A comment object as the Action uses it: a dict with an integer id."""
    return isinstance(value, dict) and isinstance(value.get("id"), int) and not isinstance(value.get("id"), bool)


def _message(response: httpx2.Response) -> str:
    """GitHub's `message` (and validation `errors`), flattened to one short line."""
    try:
        data = response.json()
    except ValueError:
        data = {}
    data = data if isinstance(data, dict) else {}
    message = str(data.get("message") or response.reason_phrase or "no message")
    details = [str(e.get("message") or e.get("code")) for e in data.get("errors") or [] if isinstance(e, dict)]
    text = message + (f" ({'; '.join(details)})" if details else "")
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:299] + "…"
