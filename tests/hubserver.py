"""A local stand-in for the Hugging Face Hub, good enough for the real ``huggingface_hub`` client.

``HubServer`` serves repos from folders laid out like ``fixtures/hub`` (see
``fixtures/make_hub.py``) plus repos added at run time, on 127.0.0.1 only. It speaks the parts
of the Hub protocol hfmem uses, with the headers, redirects and error codes of the real Hub:

* ``GET /api/models/{repo}`` and ``.../revision/{rev}``: model info (``sha``, ``siblings``,
  ``safetensors`` totals computed from the headers, ``config`` subset, ``gated``...); honours
  ``expand`` and ``blobs``. A renamed repo's old id (e.g. ``gpt2``) answers with the new repo.
* ``GET /api/models?author=&search=&filter=&limit=``: listing, paginated with a ``Link`` header.
* ``GET /api/models/{repo}/tree/{rev}[/{path}]``: file listing.
* ``GET /api/models/{repo}/safetensors-metadata/{index}``: every shard header of ``main`` at once.
* ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: regular files are served directly (with
  ``Range``); LFS files (weights) answer ``302`` to a second listener, the "CDN", with
  ``X-Linked-Etag``/``X-Linked-Size`` on the redirect. An old repo id answers ``307`` with a
  relative ``Location``. Every answer carries ``X-Repo-Commit``.
* Errors as the Hub sends them (``X-Error-Code``/``X-Error-Message``): ``RepoNotFound`` (401
  without a token, 404 with one), ``GatedRepo`` (401 without a token, 403 with a token not in
  ``tokens``), ``RevisionNotFound``, ``EntryNotFound``. Private repos look missing to anyone
  without a granted token.

Header-only safetensors files are served as the full virtual file: stored header, then zeros up
to ``8 + header length + end of the last data offset``, generated on the fly. A client that
streams more than ``max_data_bytes`` of zeros is cut off, so a test that downloads weights by
mistake fails fast instead of pulling gigabytes.

Every request is logged (``log``, ``weight_downloads()``...) and faults can be injected per path
pattern (``inject``). See ``tests/test_hubserver.py`` for usage with the real client.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import math
import re
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

GRANTED_TOKEN = "hf_test_granted"
# huggingface_hub's parse_safetensors_file_metadata always asks for bytes 0-100000 first; data
# bytes inside that prefix are not a weight download.
PREFETCH_BYTES = 100_001
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".gguf")
DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "BF16": 2, "F16": 2, "I16": 2, "U16": 2}
MAX_STALL_S = 60.0
CHUNK = 1 << 20
MAX_HOSTILE_BYTES = 1 << 30  # what an endless body or a gzip bomb may decode to, at most


def git_blob_sha1(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def safetensors_header(tensors: Mapping[str, tuple[str, Sequence[int]]], metadata: Mapping[str, str] | None = None) -> bytes:
    """A header-only safetensors file for ``{name: (dtype, shape)}``, contiguous offsets."""
    header: dict[str, Any] = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * DTYPE_BYTES.get(dtype, 1)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


class RepoFile:
    """One file of a revision: stored bytes (on disk or in memory) and its served (virtual) form."""

    def __init__(self, path: str, source: Path | bytes) -> None:
        self.path = path
        self._source = source
        self.is_lfs = path.endswith(LFS_SUFFIXES)

    @cached_property
    def stored(self) -> bytes:
        return self._source if isinstance(self._source, bytes) else self._source.read_bytes()

    @cached_property
    def header(self) -> dict[str, Any] | None:
        """The parsed safetensors header, or None (not safetensors, or malformed)."""
        if not self.path.endswith(".safetensors") or len(self.stored) < 8:
            return None
        (length,) = struct.unpack("<Q", self.stored[:8])
        if 8 + length > len(self.stored):
            return None
        try:
            header = json.loads(self.stored[8 : 8 + length])
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        return header if isinstance(header, dict) else None

    @cached_property
    def header_end(self) -> int | None:
        """Offset where tensor data starts (8 + header length), for valid safetensors."""
        return None if self.header is None else 8 + struct.unpack("<Q", self.stored[:8])[0]

    @cached_property
    def size(self) -> int:
        """Served size: for safetensors, header plus all the tensor data it describes."""
        if self.header is None:
            return len(self.stored)
        ends = [t["data_offsets"][1] for k, t in self.header.items() if k != "__metadata__"]
        return self.header_end + max(ends, default=0)

    @cached_property
    def etag(self) -> str:
        """Git blob sha1 of the file as git stores it (the LFS pointer, for LFS files)."""
        return git_blob_sha1(self.lfs_pointer if self.is_lfs else self.stored)

    @cached_property
    def lfs_oid(self) -> str:
        """Stands in for the LFS sha256; hashing gigabytes of virtual zeros would be pointless."""
        return hashlib.sha256(self.stored + b"\0size=%d" % self.size).hexdigest()

    @cached_property
    def lfs_pointer(self) -> bytes:
        return f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.lfs_oid}\nsize {self.size}\n".encode()

    def parameters(self) -> dict[str, int]:
        """Element count per dtype, from the header (empty if there is none)."""
        counts: dict[str, int] = {}
        for name, t in (self.header or {}).items():
            try:
                if name != "__metadata__":
                    counts[t["dtype"]] = counts.get(t["dtype"], 0) + math.prod(t["shape"])
            except (TypeError, KeyError):  # a hostile header: the Hub counts what it can
                continue
        return counts

    def is_weight_read(self, start: int, end: int, ranged: bool) -> bool:
        """Whether serving bytes [start, end) means downloading weights.

        Any byte past the header counts, except within the client's ``bytes=0-100000`` prefetch.
        Other LFS files (``pytorch_model.bin``...) count whatever is read.
        """
        if self.header_end is None:
            return self.is_lfs and not self.path.endswith(".safetensors")
        allowance = max(self.header_end, PREFETCH_BYTES) if ranged and start == 0 else self.header_end
        return end > allowance

    def iter_bytes(self, start: int, end: int) -> Iterator[bytes]:
        """Bytes [start, end) of the served file: stored bytes, then zeros."""
        stored = self.stored
        if start < len(stored):
            yield stored[start : min(end, len(stored))]
            start = len(stored)
        zeros = bytes(CHUNK)
        while start < end:
            n = min(CHUNK, end - start)
            yield zeros[:n]
            start += n


@dataclass
class Repo:
    """A model repo: commits by ref, the files of each commit, and access settings."""

    id: str
    refs: dict[str, str]
    trees: dict[str, dict[str, RepoFile]]
    gated: bool | str = False
    private: bool = False
    aliases: list[str] = field(default_factory=list)
    last_modified: str = "2024-01-01T00:00:00.000Z"

    @property
    def sha(self) -> str:
        return self.refs["main"]

    def commit(self, revision: str) -> str | None:
        if revision in self.refs:
            return self.refs[revision]
        return revision if revision in self.trees else None

    def config(self, commit: str) -> dict[str, Any] | None:
        file = self.trees[commit].get("config.json")
        try:
            config = json.loads(file.stored) if file else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        return config if isinstance(config, dict) else None

    def weight_files(self, commit: str) -> list[RepoFile]:
        """The safetensors files the Hub counts: the index's shards, else model.safetensors."""
        files = self.trees[commit]
        if "model.safetensors.index.json" in files:
            try:
                weight_map = json.loads(files["model.safetensors.index.json"].stored)["weight_map"]
            except (ValueError, KeyError, TypeError):
                return []
            return [files[name] for name in sorted(set(weight_map.values())) if name in files]
        return [files["model.safetensors"]] if "model.safetensors" in files else []


def sha_of(repo_id: str, ref: str = "main") -> str:
    return hashlib.sha1(f"{repo_id}@{ref}".encode()).hexdigest()


def load_root(root: Path) -> dict[str, Repo]:
    """Repos of a folder laid out as ``<org>/<name>/`` (+ ``<org>/<name>@<ref>/`` trees)."""
    repos: dict[str, Repo] = {}
    for folder in sorted(p for p in root.glob("*/*") if p.is_dir() and "@" not in p.name):
        repo_id = f"{folder.parent.name}/{folder.name}"
        meta_file = folder / ".hub.json"
        meta = json.loads(meta_file.read_text()) if meta_file.exists() else {}
        refs = dict(meta.get("refs") or {"main": meta.get("sha", sha_of(repo_id))})
        for other in folder.parent.glob(folder.name + "@*"):
            refs.setdefault(other.name.split("@", 1)[1], sha_of(repo_id, other.name.split("@", 1)[1]))
        trees = {}
        for ref, commit in refs.items():
            tree_dir = folder if ref == "main" else folder.parent / f"{folder.name}@{ref}"
            trees[commit] = {
                p.relative_to(tree_dir).as_posix(): RepoFile(p.relative_to(tree_dir).as_posix(), p)
                for p in sorted(tree_dir.rglob("*"))
                if p.is_file() and p.name != ".hub.json"
            }
        repos[repo_id] = Repo(
            repo_id,
            refs,
            trees,
            gated=meta.get("gated", False),
            private=meta.get("private", False),
            aliases=list(meta.get("aliases", [])),
            last_modified=meta.get("lastModified", Repo.last_modified),
        )
    return repos


@dataclass
class Fault:
    """A misbehaviour applied to the next ``times`` requests whose path matches ``pattern``.

    ``pattern`` is an ``fnmatch`` pattern on the URL path (no query), e.g. ``"*/resolve/*"``.
    Effects, combinable: ``latency`` seconds of delay; answer ``status`` (with ``Retry-After:
    retry_after`` if set) instead of the real response; ``drop`` the connection without an
    answer; ``stall`` for that many seconds, then drop; ``length_delta``: advertise a
    ``Content-Length`` off by that many bytes, then close; ``redirect_loop``: answer ``302`` to
    the same path (with ``?loop=N`` appended, so each hop is a new URL), forever while the fault
    lasts. ``times=None`` applies forever.

    Hostile answers: ``trickle`` sends the real body one byte per that many seconds (for at most
    ``MAX_STALL_S``); ``body`` answers 200 with those bytes (``content_type``, default JSON);
    ``endless`` answers 200 with a chunked body of that many bytes (``body`` repeated, or spaces);
    ``gzip_bomb`` answers 200 with ``Content-Encoding: gzip`` whose body decodes to that many
    bytes: ``body``, then spaces (both at most ``MAX_HOSTILE_BYTES``); ``headers`` replace or add
    headers of the real answer (e.g. a ``Content-Range``).
    """

    pattern: str
    status: int | None = None
    retry_after: int | None = None
    latency: float = 0.0
    drop: bool = False
    stall: float = 0.0
    length_delta: int = 0
    redirect_loop: bool = False
    trickle: float = 0.0
    body: bytes | None = None
    content_type: str = "application/json"
    endless: int = 0
    gzip_bomb: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    times: int | None = 1
    method: str | None = None
    host: str | None = None
    hits: int = 0

    def matches(self, method: str, host: str, path: str) -> bool:
        return (
            (self.times is None or self.hits < self.times)
            and (self.method is None or self.method == method)
            and (self.host is None or self.host == host)
            and fnmatch.fnmatchcase(path, self.pattern)
        )


@dataclass(frozen=True)
class LogEntry:
    """One request: ``host`` is "hub" or "cdn"; ``status`` 0 means the connection was dropped."""

    method: str
    host: str
    path: str
    query: str
    range: str | None
    status: int
    bytes_sent: int
    token: str | None
    weights: bool


class HubError(Exception):
    """An error answer: status, X-Error-Code, message, extra headers."""

    def __init__(self, status: int, code: str | None, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = dict(headers or {})


class HubServer:
    """The fake Hub: ``with HubServer(fixtures_root) as hub: HfApi(endpoint=hub.url)...``.

    ``roots`` are folders of repos loaded at start; ``add_repo``/``add_root`` add more at run
    time (dropped again by ``reset()``). ``tokens`` are the tokens granted access to gated and
    private repos; any other token is a valid user without access. ``page_size`` caps one page
    of ``/api/models``. ``max_data_bytes`` bounds the zeros streamed in one response.
    """

    def __init__(
        self,
        *roots: Path | str,
        tokens: Sequence[str] = (GRANTED_TOKEN,),
        page_size: int = 1000,
        max_data_bytes: int = 64 << 20,
    ) -> None:
        self.tokens = set(tokens)
        self.page_size = page_size
        self.max_data_bytes = max_data_bytes
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._in_flight = 0  # handlers that may still log: a client can read its answer before the log entry lands
        self._base: dict[str, Repo] = {}
        for root in roots:
            self._base.update(load_root(Path(root)))
        self._extra: dict[str, Repo] = {}
        self._faults: list[Fault] = []
        self._log: list[LogEntry] = []
        self._arrived: list[tuple[str, str]] = []  # (host, path) of every request as it comes in
        self._stopping = threading.Event()
        self._servers: list[ThreadingHTTPServer] = []
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> HubServer:
        for host in ("hub", "cdn"):
            server = _QuietServer(("127.0.0.1", 0), _Handler)
            server.daemon_threads = True
            server.block_on_close = False
            server.hub, server.role = self, host  # type: ignore[attr-defined]
            thread = threading.Thread(target=server.serve_forever, args=(0.05,), name=f"hubserver-{host}", daemon=True)
            thread.start()
            self._servers.append(server)
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stopping.set()
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers.clear()
        self._threads.clear()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The Hub endpoint, for ``HF_ENDPOINT`` / ``HfApi(endpoint=...)``."""
        return f"http://127.0.0.1:{self._servers[0].server_port}"

    @property
    def cdn_url(self) -> str:
        """Where LFS files are redirected to (a different origin, like the real CDN)."""
        return f"http://127.0.0.1:{self._servers[1].server_port}"

    # ------------------------------------------------------------------ repos

    def add_repo(
        self,
        repo_id: str,
        files: Mapping[str, bytes | Path],
        *,
        refs: Mapping[str, Mapping[str, bytes | Path]] | None = None,
        gated: bool | str = False,
        private: bool = False,
        aliases: Sequence[str] = (),
    ) -> Repo:
        """Add (or replace) a repo: ``files`` for ``main``, ``refs`` for other branches/tags."""
        if repo_id.count("/") != 1:
            raise ValueError(f"repo id must be 'org/name': {repo_id!r}")
        all_refs = {"main": files, **(refs or {})}
        commits = {ref: sha_of(repo_id, ref) for ref in all_refs}
        trees = {commits[ref]: {p: RepoFile(p, src) for p, src in tree.items()} for ref, tree in all_refs.items()}
        repo = Repo(repo_id, commits, trees, gated=gated, private=private, aliases=list(aliases))
        with self._lock:
            self._extra[repo_id] = repo
        return repo

    def add_root(self, root: Path | str) -> list[str]:
        """Add every repo of a folder laid out like ``fixtures/hub``; returns their ids."""
        repos = load_root(Path(root))
        with self._lock:
            self._extra.update(repos)
        return sorted(repos)

    def repos(self) -> dict[str, Repo]:
        with self._lock:
            return {**self._base, **self._extra}

    def find_repo(self, repo_id: str) -> Repo | None:
        """A repo by id or by one of its old ids (aliases)."""
        repos = self.repos()
        if repo_id in repos:
            return repos[repo_id]
        return next((r for r in repos.values() if repo_id in r.aliases), None)

    # ------------------------------------------------------------------ faults, log

    def inject(self, pattern: str, **effects: Any) -> Fault:
        """Add a ``Fault`` (see its docstring for ``effects``) and return it."""
        fault = Fault(pattern, **effects)
        if not all(0 <= s <= MAX_STALL_S for s in (fault.stall, fault.latency, fault.trickle)):
            raise ValueError(f"stall, latency and trickle must be within [0, {MAX_STALL_S}] seconds")
        if not 0 <= max(fault.endless, fault.gzip_bomb) <= MAX_HOSTILE_BYTES:
            raise ValueError(f"endless and gzip_bomb must be within [0, {MAX_HOSTILE_BYTES}] bytes")
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def take_fault(self, method: str, host: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, host, path):
                    fault.hits += 1
                    return fault
        return None

    def record(self, entry: LogEntry) -> None:
        with self._lock:
            self._log.append(entry)

    @property
    def log(self) -> list[LogEntry]:
        """A copy of the request log, oldest first, once in-flight handlers have logged."""
        with self._settled:
            self._settle()
            return list(self._log)

    def _settle(self) -> None:
        """Wait (briefly, holding the lock) until no handler is still about to log a finished request."""
        self._settled.wait_for(lambda: self._in_flight == 0, timeout=2.0)

    def handling(self, delta: int) -> None:
        with self._settled:
            self._in_flight += delta
            self._settled.notify_all()

    def arrived(self, host: str, path: str) -> None:
        with self._settled:
            self._arrived.append((host, path))
            self._settled.notify_all()

    def wait_for_request(self, pattern: str, host: str | None = None, timeout: float = 60.0) -> bool:
        """Wait until a request whose path matches ``pattern`` (on ``host``) has come in, answered or not."""
        with self._settled:
            return self._settled.wait_for(lambda: any(fnmatch.fnmatchcase(p, pattern) and host in (None, h)
                                                      for h, p in self._arrived), timeout=timeout)

    def reset_log(self) -> None:
        with self._settled:
            self._settle()
            self._log.clear()
            self._arrived.clear()

    def reset(self) -> None:
        """Forget the log, the faults and the repos added at run time."""
        with self._settled:
            self._settle()
            self._log.clear()
            self._arrived.clear()
            self._faults.clear()
            self._extra.clear()

    def requests(self, pattern: str = "*", method: str | None = None) -> list[LogEntry]:
        """Logged requests whose path matches the ``fnmatch`` pattern (and method)."""
        return [e for e in self.log if fnmatch.fnmatchcase(e.path, pattern) and method in (None, e.method)]

    def total_requests(self) -> int:
        return len(self.log)

    def total_bytes(self) -> int:
        """Body bytes sent, both listeners together."""
        return sum(e.bytes_sent for e in self.log)

    def weight_downloads(self) -> list[LogEntry]:
        """GETs that asked for tensor data beyond the header (and beyond the 100 kB prefetch)."""
        return [e for e in self.log if e.weights]

    def stopping(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True if the server is stopping."""
        return self._stopping.wait(seconds)


# ---------------------------------------------------------------------- request handling


class _QuietServer(ThreadingHTTPServer):
    """A threading server that stays silent when a client hangs up mid-answer (killed scans, timeouts)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """Routes one request of either listener; all state lives on ``self.server.hub``."""

    protocol_version = "HTTP/1.1"
    timeout = 30
    disable_nagle_algorithm = True  # else Nagle + delayed ACK stall each small answer by ~40 ms
    server: ThreadingHTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # silence stderr access log
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    # -------------------------------------------------------------- plumbing

    @property
    def hub(self) -> HubServer:
        return self.server.hub  # type: ignore[attr-defined]

    @property
    def role(self) -> str:
        return self.server.role  # type: ignore[attr-defined]

    def _handle(self, method: str) -> None:
        self.hub.handling(+1)
        try:
            self._serve(method)
        finally:
            self.hub.handling(-1)

    def _serve(self, method: str) -> None:
        self.method = method
        self.entry: LogEntry | None = None
        self.weights = False
        split = urlsplit(self.path)
        self.url_path, self.raw_query, self.query = split.path, split.query, parse_qs(split.query)
        auth = self.headers.get("Authorization", "")
        self.token = auth[7:] if auth.startswith("Bearer ") else None
        self.hub.arrived(self.role, self.url_path)
        self.fault = self.hub.take_fault(method, self.role, self.url_path)
        try:
            if self.fault is None or not self._apply_fault():
                self._route()
        except HubError as error:
            self._send_error(error)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            if self.entry is None:  # dropped, stalled or broken before an answer
                self._record(0, 0)

    def _record(self, status: int, bytes_sent: int) -> None:
        self.entry = LogEntry(
            self.method,
            self.role,
            self.url_path,
            self.raw_query,
            self.headers.get("Range"),
            status,
            bytes_sent,
            self.token,
            self.weights,
        )
        self.hub.record(self.entry)

    def _apply_fault(self) -> bool:
        """Apply the injected fault; True if it answered (or dropped) the request."""
        fault = self.fault
        assert fault is not None
        if fault.latency and self.hub.stopping(fault.latency):
            self.close_connection = True
            return True
        if fault.stall:
            self.hub.stopping(fault.stall)
        if fault.drop or fault.stall:
            self.close_connection = True
            return True
        if fault.redirect_loop:
            self._send(302, {"Location": f"{self.url_path}?loop={fault.hits}"})
            return True
        if fault.status is not None:
            headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
            self._send_error(HubError(fault.status, None, f"Injected fault: HTTP {fault.status}", headers))
            return True
        if fault.endless:
            self._send_chunked(_repeat(fault.body or b" ", fault.endless))
            return True
        if fault.gzip_bomb:
            self._send(200, {"Content-Type": fault.content_type, "Content-Encoding": "gzip"},
                       _gzip_bomb(fault.body or b"", fault.gzip_bomb))
            return True
        if fault.body is not None:
            self._send(200, {"Content-Type": fault.content_type}, fault.body)
            return True
        return False

    def _send_chunked(self, chunks: Iterator[bytes]) -> None:
        """A 200 with ``Transfer-Encoding: chunked``, sent until ``chunks`` ends or the client hangs up."""
        self.send_response(200)
        self.send_header("Content-Type", self.fault.content_type if self.fault else "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.close_connection = True
        self._record(200, 0)
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")

    def _write_body(self, chunks: Iterator[bytes]) -> None:
        """Write the body, one byte per ``trickle`` seconds when the fault says so (for at most MAX_STALL_S)."""
        trickle = self.fault.trickle if self.fault else 0.0
        if not trickle:
            for chunk in chunks:
                self.wfile.write(chunk)
            return
        self.close_connection = True
        stop = time.monotonic() + MAX_STALL_S
        for chunk in chunks:
            for i in range(len(chunk)):
                if time.monotonic() > stop or self.hub.stopping(trickle):
                    return
                self.wfile.write(chunk[i : i + 1])
                self.wfile.flush()

    def _send(
        self,
        status: int,
        headers: Mapping[str, str],
        body: bytes | Iterator[bytes] = b"",
        length: int | None = None,
        sending: int | None = None,
    ) -> None:
        """Send an answer of ``length`` bytes (default ``len(body)``), of which ``sending`` are sent.

        The request is logged before the body goes out, so the log is complete by the time the
        client has its answer.
        """
        length = len(body) if isinstance(body, bytes) else length
        assert length is not None
        sending = length if sending is None else sending
        delta = self.fault.length_delta if self.fault else 0
        fault_headers = self.fault.headers if self.fault else {}
        self.send_response(status)
        for key, value in {**headers, "Content-Length": str(max(0, length + delta)), **fault_headers}.items():
            self.send_header(key, value)
        if delta:
            self.send_header("Connection", "close")
            self.close_connection = True
        self._record(status, 0 if self.method == "HEAD" else sending)
        self.end_headers()
        if self.method != "HEAD":
            self._write_body(iter([body]) if isinstance(body, bytes) else body)

    def _send_json(self, data: Any, headers: Mapping[str, str] | None = None) -> None:
        body = json.dumps(data).encode()
        self._send(200, {"Content-Type": "application/json; charset=utf-8", **(headers or {})}, body)

    def _send_error(self, error: HubError) -> None:
        headers = {"Content-Type": "application/json; charset=utf-8", **error.headers}
        if error.code:
            headers["X-Error-Code"] = error.code
        headers["X-Error-Message"] = error.message
        self._send(error.status, headers, json.dumps({"error": error.message}).encode())

    # -------------------------------------------------------------- routing

    def _route(self) -> None:
        parts = [unquote(p) for p in self.url_path.strip("/").split("/")]
        if self.role == "cdn":
            if len(parts) < 4:
                raise HubError(404, None, "Not found")
            return self._cdn("/".join(parts[:2]), parts[2], "/".join(parts[3:]))
        if parts[:2] == ["api", "models"]:
            if self.method != "GET":
                raise HubError(405, None, "Method not allowed")
            return self._api(parts[2:])
        for n in (2, 1):  # "org/name/resolve/..." or a legacy "name/resolve/..."
            if len(parts) > n + 2 and parts[n] == "resolve":
                return self._resolve("/".join(parts[:n]), parts[n + 1], "/".join(parts[n + 2 :]))
        raise HubError(404, None, "Not found")

    def _repo(self, repo_id: str) -> Repo:
        """The repo if this client may see that it exists, else RepoNotFound."""
        repo = self.hub.find_repo(repo_id)
        if repo is None or (repo.private and self.token not in self.hub.tokens):
            raise HubError(401 if self.token is None else 404, "RepoNotFound", "Repository not found")
        return repo

    def _check_gate(self, repo: Repo) -> None:
        if not repo.gated or self.token in self.hub.tokens:
            return
        if self.token is None:
            message = (
                f"Access to model {repo.id} is restricted. You must have access to it and be authenticated"
                " to access it. Please log in."
            )
            raise HubError(401, "GatedRepo", message)
        message = (
            f"Access to model {repo.id} is restricted and you are not in the authorized list."
            f" Visit https://huggingface.co/{repo.id} to ask for access."
        )
        raise HubError(403, "GatedRepo", message)

    def _commit(self, repo: Repo, revision: str) -> str:
        commit = repo.commit(revision)
        if commit is None:
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return commit

    # -------------------------------------------------------------- /resolve and the CDN

    def _resolve(self, repo_id: str, revision: str, path: str) -> None:
        repo = self._repo(repo_id)
        if repo.id != repo_id:  # renamed repo: relative redirect, as the Hub does
            location = "/" + "/".join(quote(p, safe="") for p in (*repo.id.split("/"), "resolve", revision)) + "/" + quote(path)
            return self._send(307, {"Location": location, "X-Repo-Commit": repo.sha})
        self._check_gate(repo)
        commit = self._commit(repo, revision)
        file = repo.trees[commit].get(path)
        if file is None:
            raise HubError(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": commit})
        headers = {"X-Repo-Commit": commit, "ETag": f'"{file.etag}"', "Accept-Ranges": "bytes"}
        if file.is_lfs:
            location = f"{self.hub.cdn_url}/{repo.id}/{commit}/{quote(path)}"
            headers.update({"Location": location, "X-Linked-Etag": f'"{file.lfs_oid}"', "X-Linked-Size": str(file.size)})
            return self._send(302, headers)
        return self._serve_file(file, headers)

    def _cdn(self, repo_id: str, commit: str, path: str) -> None:
        repo = self.hub.repos().get(repo_id)
        file = repo.trees.get(commit, {}).get(path) if repo else None
        if file is None:
            raise HubError(404, None, "Not found")
        return self._serve_file(file, {"ETag": f'"{file.lfs_oid}"', "Accept-Ranges": "bytes"})

    def _serve_file(self, file: RepoFile, headers: dict[str, str]) -> None:
        """200 with the whole file, or 206 for a ``Range: bytes=a-b`` request."""
        headers["Content-Type"] = "application/json" if file.path.endswith(".json") else "application/octet-stream"
        byte_range = _parse_range(self.headers.get("Range"), file.size)
        if byte_range == "unsatisfiable":
            raise HubError(416, None, "Range not satisfiable", {"Content-Range": f"bytes */{file.size}"})
        status, (start, end) = (200, (0, file.size)) if byte_range is None else (206, byte_range)
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{file.size}"
        if self.method == "GET":
            self.weights = file.is_weight_read(start, end, byte_range is not None)
        data_start = max(start, len(file.stored))
        sending = min(end - start, data_start - start + self.hub.max_data_bytes)
        if sending < end - start:  # cut off: a test downloading weights fails fast
            self.close_connection = True
        self._send(status, headers, _take(file.iter_bytes(start, end), sending), end - start, sending)

    # -------------------------------------------------------------- /api/models

    def _api(self, parts: list[str]) -> None:
        if not parts or parts == [""]:
            return self._list_models()
        n = 1 if len(parts) == 1 or parts[1] in ("revision", "tree", "safetensors-metadata") else 2
        repo_id, rest = "/".join(parts[:n]), parts[n:]
        repo = self._repo(repo_id)
        if not rest:
            return self._send_json(self._model_info(repo, repo.sha))
        if rest[0] == "revision" and len(rest) == 2:
            return self._send_json(self._model_info(repo, self._commit(repo, rest[1])))
        if rest[0] == "tree" and len(rest) >= 2:
            return self._tree(repo, self._commit(repo, rest[1]), "/".join(rest[2:]))
        if rest[0] == "safetensors-metadata" and len(rest) >= 2:
            return self._safetensors_metadata(repo, "/".join(rest[1:]))
        raise HubError(404, None, "Not found")

    def _model_info(self, repo: Repo, commit: str) -> dict[str, Any]:
        expand = self.query.get("expand")
        blobs = self.query.get("blobs", ["false"])[0].lower() == "true"
        return _info(repo, commit, ["_id", "id", *expand] if expand else None, blobs=blobs)

    def _tree(self, repo: Repo, commit: str, prefix: str) -> None:
        recursive = self.query.get("recursive", ["false"])[0].lower() == "true"
        base = prefix.strip("/") + "/" if prefix.strip("/") else ""
        entries: dict[str, dict[str, Any]] = {}
        for path, file in repo.trees[commit].items():
            if not path.startswith(base):
                continue
            rest = path[len(base) :]
            if "/" in rest and not recursive:
                directory = base + rest.split("/", 1)[0]
                entry = {"type": "directory", "oid": sha_of(directory), "size": 0, "path": directory}
                entries.setdefault(directory, entry)
                continue
            entries[path] = _file_entry(file)
        if not entries and base:
            raise HubError(404, "EntryNotFound", f"{prefix} does not exist on \"{commit}\"", {"X-Repo-Commit": commit})
        return self._send_json(list(entries.values()), {"X-Repo-Commit": commit})

    def _safetensors_metadata(self, repo: Repo, filename: str) -> None:
        self._check_gate(repo)
        files = repo.trees[repo.sha]
        if filename not in files:
            raise HubError(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": repo.sha})
        index = json.loads(files[filename].stored)
        shards = sorted(set(index.get("weight_map", {}).values()))
        headers = {name: files[name].header for name in shards if name in files}
        if len(headers) != len(shards) or any(h is None for h in headers.values()):
            raise HubError(422, None, "Could not parse every shard header")
        return self._send_json({"index": {k: v for k, v in index.items() if k != "weight_map"}, "headers": headers})

    def _list_models(self) -> None:
        q = {k: v[0] for k, v in self.query.items() if k not in ("expand", "filter")}
        filters = set(self.query.get("filter", []))
        author, search = q.get("author", "").lower(), q.get("search", "").lower()
        matches = []
        for repo_id, repo in sorted(self.hub.repos().items(), key=lambda kv: kv[0].lower()):
            if repo.private and self.token not in self.hub.tokens:
                continue
            if author and repo_id.split("/")[0].lower() != author:
                continue
            if search and search not in repo_id.lower():
                continue
            if filters - set(_info(repo, repo.sha, ["tags"])["tags"]):
                continue
            matches.append(repo)
        offset = int(q.get("cursor", "0") or 0)
        size = min(int(q.get("limit", self.hub.page_size) or self.hub.page_size), self.hub.page_size)
        page = matches[offset : offset + size]
        headers = {}
        if offset + size < len(matches):
            params = [(k, v) for k, vs in self.query.items() if k != "cursor" for v in vs]
            params.append(("cursor", str(offset + size)))
            headers["Link"] = f'<{self.hub.url}/api/models?{urlencode(params)}>; rel="next"'
        keys = self._list_keys()
        return self._send_json([_info(repo, repo.sha, keys) for repo in page], headers)

    def _list_keys(self) -> list[str]:
        """Fields of a listing row: the Hub's short form, or what ``expand``/``full``/``config`` ask."""
        if "expand" in self.query:
            return ["_id", "id", *self.query["expand"]]
        keys = ["_id", "id", "modelId", "likes", "downloads", "private", "tags", "library_name", "createdAt"]
        if self.query.get("full", ["false"])[0].lower() == "true":
            keys += ["author", "sha", "lastModified", "gated", "disabled", "siblings"]
        if self.query.get("config", ["false"])[0].lower() == "true":
            keys.append("config")
        return keys


def _info(repo: Repo, commit: str, keys: Sequence[str] | None = None, *, blobs: bool = False) -> dict[str, Any]:
    """What ``/api/models/{repo}`` says about one commit: the ``keys`` asked for, or all.

    Fields are computed only when asked for: totals and sizes parse every shard header.
    """
    files = repo.trees[commit]
    config = repo.config(commit)
    fields: dict[str, Callable[[], Any]] = {
        "_id": lambda: hashlib.sha1(repo.id.encode()).hexdigest()[:24],
        "id": lambda: repo.id,
        "modelId": lambda: repo.id,
        "author": lambda: repo.id.split("/")[0],
        "sha": lambda: commit,
        "lastModified": lambda: repo.last_modified,
        "createdAt": lambda: repo.last_modified,
        "private": lambda: repo.private,
        "gated": lambda: repo.gated,
        "disabled": lambda: False,
        "downloads": lambda: 0,
        "likes": lambda: 0,
        "library_name": lambda: "transformers",
        "tags": lambda: _tags(files, config),
        "config": lambda: None
        if config is None
        else {k: config[k] for k in ("architectures", "model_type", "quantization_config") if k in config},
        "siblings": lambda: [_sibling(f, blobs) for f in files.values()],
        "spaces": lambda: [],
        "usedStorage": lambda: sum(f.size for f in files.values()),
        "safetensors": lambda: _safetensors_totals(repo.weight_files(commit)),
    }
    values = {key: fields[key]() for key in (keys or fields) if key in fields}
    return {key: value for key, value in values.items() if value is not None}


def _tags(files: Mapping[str, RepoFile], config: dict[str, Any] | None) -> list[str]:
    tags = ["transformers"]
    if any(p.endswith(".safetensors") for p in files):
        tags.append("safetensors")
    if config is not None and isinstance(config.get("model_type"), str):
        tags.append(config["model_type"])
    return tags


def _safetensors_totals(weight_files: list[RepoFile]) -> dict[str, Any] | None:
    """The Hub's ``safetensors`` field: element counts per dtype over the checkpoint's files."""
    if not weight_files or any(f.header is None for f in weight_files):
        return None
    parameters: dict[str, int] = {}
    for f in weight_files:
        for dtype, n in f.parameters().items():
            parameters[dtype] = parameters.get(dtype, 0) + n
    return {"parameters": parameters, "total": sum(parameters.values())}


def _sibling(file: RepoFile, blobs: bool) -> dict[str, Any]:
    sibling: dict[str, Any] = {"rfilename": file.path}
    if blobs:
        sibling.update({"size": file.size, "blobId": file.etag})
        if file.is_lfs:
            sibling["lfs"] = {"sha256": file.lfs_oid, "size": file.size, "pointerSize": len(file.lfs_pointer)}
    return sibling


def _file_entry(file: RepoFile) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "file", "oid": file.etag, "size": file.size, "path": file.path}
    if file.is_lfs:
        entry["lfs"] = {"oid": file.lfs_oid, "size": file.size, "pointerSize": len(file.lfs_pointer)}
    return entry


_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def _parse_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """A single ``bytes=`` range as [start, end), None to serve everything, or "unsatisfiable"."""
    match = _RANGE.match(header.strip()) if header else None
    if match is None or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if first == "":  # suffix range: the last N bytes
        return (max(0, size - int(last)), size) if int(last) > 0 else "unsatisfiable"
    start = int(first)
    end = size if last == "" else min(int(last) + 1, size)
    if start >= size or end <= start:
        return "unsatisfiable"
    return start, end


def _repeat(unit: bytes, total: int) -> Iterator[bytes]:
    """``total`` bytes of ``unit`` repeated, in chunks of about CHUNK bytes."""
    chunk = unit * max(1, CHUNK // len(unit))
    while total > 0:
        yield chunk[:total]
        total -= len(chunk)


@functools.lru_cache(maxsize=4)
def _gzip_bomb(prefix: bytes, size: int) -> bytes:
    """Gzip of ``prefix`` then spaces, ``size`` bytes in all once decoded (compressed in pieces, kept for reuse)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts, left = [compressor.compress(prefix)], size - len(prefix)
    spaces = b" " * CHUNK
    while left > 0:
        parts.append(compressor.compress(spaces[:left]))
        left -= CHUNK
    return b"".join(parts) + compressor.flush()


def _take(chunks: Iterator[bytes], limit: int) -> Iterator[bytes]:
    """The first ``limit`` bytes of ``chunks``."""
    for chunk in chunks:
        if limit <= 0:
            return
        yield chunk[:limit]
        limit -= len(chunk)


__all__ = ["GRANTED_TOKEN", "Fault", "HubServer", "LogEntry", "Repo", "RepoFile", "safetensors_header"]
