"""One bounded transport under every Hub request: decoded bodies capped while they stream, an overall deadline.

huggingface_hub sends its requests (model_info, list_models) and hfmem its Range reads (headers, small JSON
files) through the one httpx2 client that `huggingface_hub.set_client_factory` (its documented hook) makes;
`install` makes that client use `BoundedTransport`. Its bodies are decoded here, in pieces of at most
PIECE_BYTES, and end after MAX_BODY_BYTES decoded bytes (a gzip bomb or an endless chunked answer stops there).
A request made inside `bounded(...)` must be complete by its deadline: checked before it is sent, once its
headers are in and after every chunk, so a server that trickles a byte per read is cut off at the deadline
(plus at most one read timeout). Either failure is an `errors.NetworkError` naming the host. Each request is
listed in hub.inflight while it runs, for a status line while the Hub is slow. Every request, the first and each
redirect's, is checked against hub.hosts before it connects: link-local and cloud metadata hosts are refused.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
from huggingface_hub import set_client_factory
from huggingface_hub.utils._http import default_client_factory

from hfmem import errors
from hfmem.hub import hosts, inflight
from hfmem.hub.files import MAX_JSON_BYTES

MAX_BODY_BYTES = MAX_JSON_BYTES + 1  # one byte past the largest JSON file, so a reader can tell it is larger
PIECE_BYTES = 1 << 16
ENCODINGS = ("gzip", "deflate")  # zlib's auto-detecting window reads both
_local = threading.local()
_install_lock = threading.Lock()
_installed = False


@contextmanager
def bounded(deadline: float, per_request: float) -> Iterator[None]:
    """Requests this thread makes inside the block end by `deadline` (monotonic) and within `per_request` s each."""
    saved = getattr(_local, "bound", None)
    _local.bound = (deadline, per_request)
    try:
        yield
    finally:
        _local.bound = saved


def install() -> None:
    """Make huggingface_hub's shared client use BoundedTransport (once per process; later calls keep it)."""
    global _installed
    with _install_lock:
        if not _installed:
            set_client_factory(_client)
            _installed = True


def _client() -> httpx2.Client:
    """The library's default client (its request hook, redirects, no timeout) over BoundedTransport."""
    with default_client_factory() as default:
        return httpx2.Client(transport=BoundedTransport(), event_hooks=default.event_hooks,
                             follow_redirects=default.follow_redirects, timeout=default.timeout)


class BoundedTransport(httpx2.BaseTransport):
    """httpx2's HTTP transport, with the body cap and the deadline of the thread's `bounded` block."""

    def __init__(self) -> None:
        self._inner = httpx2.HTTPTransport()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send the request; the answer's body is decoded and bounded as it streams."""
        clock = _Clock(origin(request.url), f"{request.method} {request.url.path}")
        try:
            return self._send(request, clock)
        except BaseException:
            clock.done()
            raise

    def _send(self, request: httpx2.Request, clock: _Clock) -> httpx2.Response:
        reason = hosts.refusal(request.url.host)
        if reason:  # before connecting, and not retried (hub/hosts.py)
            raise errors.NetworkError(f"refused to connect: {reason}, where hfmem never connects (a Hub, mirror or "
                                      "redirect that points there is not followed).")
        clock.check()
        request.headers["Accept-Encoding"] = ", ".join(ENCODINGS)
        response = self._inner.handle_request(request)
        clock.check()
        codings = [c.strip().lower() for c in response.headers.get("Content-Encoding", "").split(",")]
        codings = [c for c in codings if c not in ("", "identity")]
        unknown = [c for c in codings if c not in ENCODINGS]
        if unknown:
            response.close()
            raise errors.NetworkError(f"{clock.host} answered in an encoding hfmem did not ask for ({unknown[0]!r}).")
        headers = response.headers.copy()
        if codings:  # decoded here, so the library must not decode again; the length was the encoded one
            del headers["Content-Encoding"]
            headers.pop("Content-Length", None)
        stream = BoundedStream(response.stream, len(codings), clock)  # type: ignore[arg-type]  # sync client: SyncByteStream
        return httpx2.Response(response.status_code, headers=headers, stream=stream, extensions=response.extensions)

    def close(self) -> None:
        self._inner.close()


def origin(url: httpx2.URL) -> str:
    """The host a request goes to, with its port where the URL names one: what an error or status line shows."""
    return url.host if url.port is None else f"{url.host}:{url.port}"


class _Clock:
    """One request in flight: what it asks, since when, and its deadline from the thread's `bounded` block."""

    def __init__(self, host: str, what: str) -> None:
        self.host = host
        self.started = time.monotonic()
        bound = getattr(_local, "bound", None)
        self.due = None if bound is None else min(bound[0], self.started + bound[1])
        inflight.begin(id(self), host, what, self.started)

    def done(self) -> None:
        """The request has its whole answer (or failed): no longer in flight."""
        inflight.end(id(self))

    def check(self) -> None:
        """Raise NetworkError once the deadline has passed."""
        now = time.monotonic()
        if self.due is not None and now > self.due:
            raise errors.NetworkError(
                f"{self.host} sent no complete answer in time: gave up after {now - self.started:.1f}s "
                "(the overall deadline that --timeout sets)."
            )


class BoundedStream(httpx2.SyncByteStream):
    """A response body decoded `layers` times (gzip/deflate), in pieces, cut at MAX_BODY_BYTES and the deadline."""

    def __init__(self, raw: httpx2.SyncByteStream, layers: int, clock: _Clock) -> None:
        self._raw = raw
        self._decoders = [zlib.decompressobj(zlib.MAX_WBITS | 32) for _ in range(layers)]
        self._clock = clock

    def __iter__(self) -> Iterator[bytes]:
        sent = 0
        for piece in self._pieces():
                if sent + len(piece) > MAX_BODY_BYTES:
                    yield piece[:MAX_BODY_BYTES - sent]  # a reader that needs no more stops here
                    raise errors.NetworkError(
                        f"{self._clock.host} sent an answer larger than {MAX_JSON_BYTES:,} bytes.")
                sent += len(piece)
                yield piece

    def _pieces(self) -> Iterator[bytes]:
        """The decoded body, checking the deadline after every chunk, then what the decoders still hold."""
        for chunk in self._raw:
            self._clock.check()
            yield from _decode(chunk, self._decoders)
        for depth in range(len(self._decoders), 0, -1):
            yield from _decode(self._decoders[depth - 1].flush(), self._decoders[:depth - 1])

    def close(self) -> None:
        self._clock.done()
        self._raw.close()


def _decode(data: bytes, decoders: list[Any]) -> Iterator[bytes]:
    """`data` through each decoder in turn (the outermost coding first), in pieces of at most PIECE_BYTES."""
    if not decoders:
        if data:
            yield data
        return
    head, rest = decoders[-1], decoders[:-1]
    try:
        while data:
            piece = head.decompress(data, PIECE_BYTES)
            yield from _decode(piece, rest)
            data = head.unconsumed_tail
    except zlib.error:
        raise httpx2.DecodingError("the answer's compressed body is corrupt.") from None
