"""GitHub REST client for what the Action needs: keep one sticky comment on a pull request up to date.

Requests go to `$GITHUB_API_URL` with `Authorization: Bearer <token>`; the token is sent only to that
origin (pagination links elsewhere are refused) and never appears in a message. Every failure becomes
one `GitHubApiError` line naming the request and GitHub's own message.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx2

from hfmem import __version__
from hfmem.errors import GitHubApiError

MAX_PAGES = 50  # 5,000 comments: far more than a pull request has; stops a runaway Link chain
_TRANSIENT = {429, 500, 502, 503, 504}


@dataclass
class GitHub:
    """Issue-comment calls for one repository ("owner/name") with one token."""

    api_url: str
    token: str
    repository: str
    timeout: float = 10.0
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
            page = response.json()
            if not isinstance(page, list):
                raise GitHubApiError(f"GitHub API: GET {self._path(url)} did not return a list of comments.")
            comments += page
            url = self._next_page(response)
        raise GitHubApiError(f"GitHub API: more than {MAX_PAGES} pages of comments on #{number}; giving up.")

    def create_comment(self, number: int, body: str) -> dict[str, Any]:
        return self._request("POST", f"{self.api_url}/repos/{self.repository}/issues/{number}/comments",
                             {"body": body}).json()

    def update_comment(self, comment_id: int, body: str) -> dict[str, Any]:
        return self._request("PATCH", f"{self.api_url}/repos/{self.repository}/issues/comments/{comment_id}",
                             {"body": body}).json()

    def upsert_comment(self, number: int, marker: str, body: str) -> tuple[str, dict[str, Any]]:
        """Update the comment that starts with `marker` (a bot's first), or create one: ("updated"|"created", it)."""
        ours = [c for c in self.list_comments(number) if str(c.get("body") or "").startswith(marker)]
        ours.sort(key=lambda c: (c.get("user") or {}).get("type") != "Bot")  # stable: oldest bot comment first
        if ours:
            return "updated", self.update_comment(ours[0]["id"], body)
        return "created", self.create_comment(number, body)

    # -- plumbing --------------------------------------------------------------------------------
    def _request(self, method: str, url: str, payload: dict[str, Any] | None = None) -> httpx2.Response:
        """One call, retried on 429/5xx/transport errors (honouring Retry-After), errors as one line."""
        where = f"{method} {self._path(url)}"
        for attempt in range(self.retries + 1):
            try:
                response = self._client.request(method, url, json=payload)
            except httpx2.TransportError as err:
                if attempt == self.retries:
                    raise GitHubApiError(f"GitHub API: {where}: cannot reach {self.api_url} ({type(err).__name__}).") from None
                self.sleep(0.5 * 2**attempt)
                continue
            if response.status_code < 400:
                return response
            if response.status_code not in _TRANSIENT or attempt == self.retries:
                break
            self.sleep(_retry_after(response, attempt))
        suffix = " after retries" if response.status_code in _TRANSIENT else ""
        raise GitHubApiError(f"GitHub API: {where} answered HTTP {response.status_code}{suffix}: {_message(response)}",
                             response.status_code)

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
