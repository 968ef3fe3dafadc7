"""A real HTTP server on 127.0.0.1 that plays the part of the GitHub REST API used by the Action.

It serves issue comments for one repository: list (paginated with `Link` headers), create and update;
checks `Authorization: Bearer <token>` (401 otherwise), answers 403 to writes with a read-only token
(a forked pull request's), 422 to bodies over GitHub's 65,536-character limit, and can inject faults.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

MAX_BODY = 65_536
BOT = {"login": "github-actions[bot]", "type": "Bot"}


@dataclass
class Fault:
    """Answer `status` to the next `times` requests whose "METHOD /path" matches `pattern`."""

    pattern: str
    status: int
    times: int = 1
    body: Any = field(default_factory=lambda: {"message": "Server Error"})
    """JSON-encoded, or sent as they are when bytes (an HTML page, a truncated answer)."""
    headers: dict[str, str] = field(default_factory=dict)
    trickle: float = 0.0
    """Seconds between the body's bytes (a server that sends one byte at a time)."""


@dataclass
class GitHubState:
    repository: str
    token: str
    read_only_tokens: set[str] = field(default_factory=set)
    comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    next_id: int = 1000
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_comment(self, number: int, body: str, user: dict[str, str] | None = None) -> dict[str, Any]:
        """Seed a comment, e.g. a human's, as if it had been posted earlier."""
        with self.lock:
            self.next_id += 1
            comment = {"id": self.next_id, "body": body, "user": user or BOT,
                       "html_url": f"https://github.test/{self.repository}/pull/{number}#issuecomment-{self.next_id}"}
            self.comments.setdefault(number, []).append(comment)
            return comment


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def _handle(self, method: str) -> None:
        state = self.server.state
        url = urlsplit(self.path)
        auth = self.headers.get("Authorization")
        payload = self._payload()
        with state.lock:
            state.requests.append((method, self.path, auth))
            fault = next((f for f in state.faults if f.times > 0 and re.search(f.pattern, f"{method} {url.path}")), None)
            if fault:
                fault.times -= 1
        if fault:
            return self._send(fault.status, fault.body, fault.headers, fault.trickle)
        token = auth.removeprefix("Bearer ") if auth and auth.startswith("Bearer ") else None
        if token not in {state.token, *state.read_only_tokens}:
            return self._send(401, {"message": "Bad credentials"})
        prefix = f"/repos/{state.repository}/issues/"
        if not url.path.startswith(prefix):
            return self._send(404, {"message": "Not Found"})
        rest = url.path.removeprefix(prefix)
        if method != "GET" and token in state.read_only_tokens:
            return self._send(403, {"message": "Resource not accessible by integration"})
        if method in {"POST", "PATCH"}:
            body = payload.get("body") if isinstance(payload, dict) else None
            if not isinstance(body, str):
                return self._send(422, {"message": "Invalid request.", "errors": [{"message": "body is missing"}]})
            if len(body) > MAX_BODY:
                return self._send(422, {"message": "Validation Failed", "errors": [
                    {"resource": "IssueComment", "code": "custom", "field": "body",
                     "message": f"body is too long (maximum is {MAX_BODY} characters)"}]})
        if match := re.fullmatch(r"(\d+)/comments", rest):
            number = int(match[1])
            if method == "GET":
                return self._list(number, parse_qs(url.query))
            if method == "POST":
                return self._send(201, state.add_comment(number, payload["body"]))
        if (match := re.fullmatch(r"comments/(\d+)", rest)) and method == "PATCH":
            with state.lock:
                found = [c for cs in state.comments.values() for c in cs if c["id"] == int(match[1])]
                if found:
                    found[0]["body"] = payload["body"]
            return self._send(200, found[0]) if found else self._send(404, {"message": "Not Found"})
        return self._send(404, {"message": "Not Found"})

    def _list(self, number: int, query: dict[str, list[str]]) -> None:
        per_page = min(int(query.get("per_page", ["30"])[0]), 100)
        page = int(query.get("page", ["1"])[0])
        with self.server.state.lock:
            comments = list(self.server.state.comments.get(number, []))
        pages = max(1, -(-len(comments) // per_page))
        links = []
        base = f"http://{self.headers['Host']}/repos/{self.server.state.repository}/issues/{number}/comments"
        if page < pages:
            links.append(f'<{base}?per_page={per_page}&page={page + 1}>; rel="next"')
            links.append(f'<{base}?per_page={per_page}&page={pages}>; rel="last"')
        self._send(200, comments[(page - 1) * per_page:page * per_page], {"Link": ", ".join(links)} if links else {})

    def _payload(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None

    def _send(self, status: int, data: Any, headers: dict[str, str] | None = None, trickle: float = 0.0) -> None:
        raw = data if isinstance(data, bytes) else json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html" if isinstance(data, bytes) else "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(raw)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if not trickle:
            self.wfile.write(raw)
            return
        try:  # bounded by the body's length; stops when the client hangs up
            for i in range(len(raw)):
                self.wfile.write(raw[i:i + 1])
                self.wfile.flush()
                time.sleep(trickle)
        except (BrokenPipeError, ConnectionResetError):
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: GitHubState


class GitHubServer:
    """`with GitHubServer(state) as url:` serves `state` on a free port of 127.0.0.1."""

    def __init__(self, state: GitHubState) -> None:
        self.state = state
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.state = state
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> str:
        self._thread.start()
        return self.url

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
