"""The Hub client: repo metadata, config.json and safetensors headers through `huggingface_hub`.

Settings come from `hfmem.hub.hub_settings` (read from the environment when a request is first needed). Weights
are never downloaded: headers are read with HTTP Range on a streamed response that is closed as soon as the
header is in. Every Hub failure becomes one `hfmem.errors` exception with a one-line message.

What the library does, it does here (model_info, the cache lookup of a file at a commit, offline cache
lookup, headers, sessions, status errors); what is kept has its reason next to it.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx2
from huggingface_hub import HfApi, hf_hub_url, try_to_load_from_cache
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status, logging as hf_logging

from hfmem import __version__, errors
from hfmem.constants import MAX_HUB_REQUESTS
from hfmem.hub import http
from hfmem.hub.files import INDEX_FILE, MAX_JSON_BYTES, SINGLE_FILE, parse_json, read_json_file
from hfmem.hub.hub_settings import HubSettings, redact_url
from hfmem.hub.modelref import is_commit, is_repo_id, shorten
from hfmem.hub.safetensors import (
    FIRST_READ_BYTES,
    PREFIX_BYTES,
    Checkpoint,
    header_length,
    parse_header,
    shard_files,
)

if TYPE_CHECKING:
    from huggingface_hub.hf_api import ExpandModelProperty_T

T = TypeVar("T")
RESOLVE_FIELDS: list[ExpandModelProperty_T] = ["sha", "siblings"]
"""What `resolve` asks the model description for: the commit and the file list (a popular model's full description
lists its Spaces, card data and widget examples too, often hundreds of kB)."""
# What huggingface_hub raises on an API answer that is HTML, a JSON list or has fields of the wrong type.
MALFORMED_ANSWER = (ValueError, TypeError, KeyError, AttributeError)


@dataclass(frozen=True)
class RepoState:
    """A repo at one resolved commit."""

    repo_id: str
    sha: str
    files: tuple[str, ...]


class HubClient:
    """Thin, retrying client over huggingface_hub for the three things hfmem reads."""

    def __init__(self, settings: HubSettings, sleep: Callable[[float], None] = time.sleep) -> None:
        self.settings = settings
        self._sleep = sleep
        self._started = time.monotonic()
        self._deadline = self._started + settings.model_deadline
        self._requests = itertools.count(1)  # next() is atomic under the GIL: header reads share it across threads
        self._asked = "the model"
        http.install()
        # The library logs each retry it makes on stderr, while hfmem's contract is one line per failure; its
        # public verbosity knob is process-wide, which suits a command-line tool (set once: setting it clears every
        # logger's cache, milliseconds a model in a scan).
        if hf_logging.get_verbosity() != hf_logging.ERROR:
            hf_logging.set_verbosity_error()

    # -- repo metadata -------------------------------------------------------------------------
    def resolve(self, repo_id: str, revision: str | None) -> RepoState:
        """Resolve a revision to its commit and list the repo's files (one API request)."""
        if self.settings.offline:
            return self._resolve_offline(repo_id, revision)
        self._asked = repo_id
        api = HfApi(endpoint=self.settings.endpoint, token=self.settings.token or False, library_name="hfmem",
                    library_version=__version__)
        with self._errors(repo_id, revision):
            try:
                info = self._retry(lambda: api.model_info(repo_id, revision=revision, timeout=self.settings.timeout,
                                                          expand=RESOLVE_FIELDS))
            except MALFORMED_ANSWER:
                raise errors.NetworkError(f"{repo_id}: the Hub's answer is not a model description.") from None
        return _repo_state(repo_id, info.id, info.sha, info.siblings)

    def _resolve_offline(self, repo_id: str, revision: str | None) -> RepoState:
        """The commit a revision points to in the huggingface_hub cache (offline mode), by the library's lookup."""
        config = try_to_load_from_cache(repo_id, "config.json", cache_dir=self.settings.cache_dir, revision=revision)
        if not isinstance(config, str):
            raise errors.OfflineCacheMissError(
                f"{repo_id}@{revision or 'main'} is not in the local cache and HF_HUB_OFFLINE is set; "
                "run once online first."
            )
        snapshot = Path(config).parent
        files = tuple(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_file())
        return RepoState(repo_id=repo_id, sha=snapshot.name, files=files)

    # -- small JSON files ------------------------------------------------------------------------
    def fetch_json(self, repo: RepoState, filename: str, malformed: type[errors.HfmemError]) -> Any:
        """A small JSON file at the resolved commit: from the huggingface_hub cache, else one bounded GET.

        A file at a commit never changes, so the library's cache lookup (`try_to_load_from_cache`, which also finds
        what other tools downloaded) needs no request; hf_hub_download would add a HEAD per file and read a body of
        any size, so the body is read here under the request timeout and MAX_JSON_BYTES.
        """
        label = f"{repo.repo_id}/{filename}"
        cached = try_to_load_from_cache(repo.repo_id, filename, cache_dir=self.settings.cache_dir, revision=repo.sha)
        if isinstance(cached, str):
            return read_json_file(Path(cached), label, malformed)
        if self.settings.offline:
            raise errors.OfflineCacheMissError(
                f"{repo.repo_id}@{repo.sha}: {filename} is not cached and HF_HUB_OFFLINE is set.")
        url = hf_hub_url(repo.repo_id, filename, revision=repo.sha, endpoint=self.settings.endpoint)
        with self._errors(repo.repo_id, repo.sha, filename):
            body, size = self._retry(lambda: self._range(url, 0, MAX_JSON_BYTES))
        _refuse_oversized(max(size or 0, len(body)), label, malformed)
        return parse_json(body, label, malformed)

    # -- safetensors headers ---------------------------------------------------------------------
    def fetch_checkpoint(self, repo: RepoState, workers: int = 8) -> Checkpoint | None:
        """Read every shard header (concurrently); None when the repo has no safetensors weights."""
        guesses: dict[str, int] = {}
        if INDEX_FILE in repo.files:
            index = self.fetch_json(repo, INDEX_FILE, errors.MalformedCheckpointError)
            shards, total = shard_files(index)
            guesses = header_size_guesses(index["weight_map"])
        elif SINGLE_FILE in repo.files:
            shards, total = [SINGLE_FILE], None
        else:
            return None
        missing = [s for s in shards if s not in repo.files]
        if missing:
            raise errors.MalformedCheckpointError(f"{repo.repo_id}: index names missing shard {missing[0]}.")
        if len(shards) == 1:  # no pool (and its thread) for the one header most models have
            headers = [self.read_header(repo, shards[0], guesses.get(shards[0]))]
        else:
            with ThreadPoolExecutor(max_workers=min(workers, len(shards))) as pool:
                headers = list(pool.map(lambda name: self.read_header(repo, name, guesses.get(name)), shards))
        checkpoint = Checkpoint(index_total_size=total)
        for name, tensors in zip(shards, headers, strict=True):
            checkpoint.add(name, tensors)
        return checkpoint

    def read_header(self, repo: RepoState, filename: str, guess: int | None = None) -> dict:
        """Range-read one file's header: one request when `guess` (or 100 kB) covers it, else two.

        Kept rather than HfApi.get_safetensors_metadata, which adds a HEAD per repo, always asks for 100 kB,
        reads a whole body when a server ignores Range, does not retry and checks less of the header.
        """
        url = hf_hub_url(repo.repo_id, filename, revision=repo.sha, endpoint=self.settings.endpoint)
        label = f"{repo.repo_id}/{filename}"
        first_read = guess or FIRST_READ_BYTES
        with self._errors(repo.repo_id, repo.sha, filename):
            first, size = self._retry(lambda: self._range(url, 0, first_read - 1))
            length = header_length(first, label, size)
            raw = first[PREFIX_BYTES:PREFIX_BYTES + length]
            if len(raw) < length:
                rest, _ = self._retry(lambda: self._range(url, PREFIX_BYTES + len(raw), PREFIX_BYTES + length - 1))
                raw += rest
            if len(raw) != length:
                raise errors.MalformedCheckpointError(f"{label}: file ends inside its safetensors header.")
        return parse_header(raw, label, None if size is None else size - PREFIX_BYTES - length)

    def _range(self, url: str, start: int, end: int) -> tuple[bytes, int | None]:
        """GET bytes start..end; reads at most that many bytes even if the server ignores Range."""
        headers = build_hf_headers(token=self.settings.token or False, library_name="hfmem",
                                   library_version=__version__)
        headers["Range"] = f"bytes={start}-{end}"
        want = end - start + 1
        with get_session().stream("GET", url, headers=headers, timeout=self.settings.timeout) as response:
            if response.status_code >= 400:
                response.read()
                hf_raise_for_status(response)
            if response.status_code == 200 and start > 0:
                raise errors.MalformedCheckpointError(f"{redact_url(url)}: server ignored the Range request.")
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) >= want:
                    break
            size = _total_size(response.headers.get("Content-Range")) or (
                _count(response.headers.get("Content-Length")) if response.status_code == 200 else None
            )
        return bytes(body[:want]), size

    # -- retries and error translation -----------------------------------------------------------
    def _retry(self, call: Callable[[], T]) -> T:
        """Retry 429 (honouring Retry-After), 5xx and transport errors, a bounded number of times.

        Kept rather than huggingface_hub.utils.http_backoff, which wraps raw requests only (not model_info), sleeps
        Retry-After + 1 s and has no overall time budget: one policy for every request.

        Transport errors (timeouts, drops) are retried only while the attempts so far have spent less
        than `(retries + 1) * timeout` in all (sleeps not counted): one attempt that already retried
        internally uses that budget up, so waits never multiply. Every attempt counts against the model's
        MAX_HUB_REQUESTS.
        """
        budget, spent = (self.settings.retries + 1) * self.settings.timeout, 0.0
        for attempt in range(self.settings.retries + 1):
            if next(self._requests) > MAX_HUB_REQUESTS:
                raise errors.MalformedCheckpointError(
                    f"{self._asked}: over {MAX_HUB_REQUESTS:,} Hub requests for one model, retries included; "
                    "refusing to make more.")
            started = time.monotonic()
            try:
                with http.bounded(self._deadline, self.settings.request_deadline):
                    return call()
            except (HfHubHTTPError, httpx2.TransportError) as err:
                spent += time.monotonic() - started
                status = getattr(getattr(err, "response", None), "status_code", None)
                transport = isinstance(err, httpx2.TransportError)
                transient = (transport and spent < budget) or status == 429 or (status or 0) >= 500
                if not transient or attempt == self.settings.retries:
                    raise
                self._sleep(self._wait(err, attempt))
        raise AssertionError("unreachable")

    def _wait(self, err: Exception, attempt: int) -> float:
        response = getattr(err, "response", None)
        retry_after = response.headers.get("Retry-After") if response is not None else None
        try:
            wait = float(retry_after) if retry_after is not None else 0.5 * 2**attempt
        except ValueError:
            wait = 0.5 * 2**attempt
        return min(max(wait, 0.0), self.settings.max_retry_wait)

    @contextmanager
    def _errors(self, repo_id: str, revision: str | None, filename: str | None = None) -> Iterator[None]:
        where = f"{repo_id}@{revision}" if revision else repo_id
        try:
            yield
        except GatedRepoError:
            raise errors.GatedRepoError(
                f"{repo_id} is gated: accept its licence at {self.settings.shown_endpoint}/{repo_id}, "
                "then set HF_TOKEN (or pass --token) with a token of that account."
                + (" The token given was refused." if self.settings.token else "")
            ) from None
        except RevisionNotFoundError:
            raise errors.RevisionNotFoundError(f"{repo_id} has no revision {revision!r}.") from None
        except RepositoryNotFoundError:
            raise errors.RepoNotFoundError(
                f"{repo_id} was not found on {self.settings.shown_endpoint}"
                + ("." if self.settings.token else " (if it is private, set HF_TOKEN).")
            ) from None
        except EntryNotFoundError:
            raise errors.MalformedCheckpointError(f"{where} has no file {filename!r}.") from None
        except OfflineModeIsEnabled:
            raise errors.OfflineCacheMissError(
                f"{where}: {filename} is not cached and HF_HUB_OFFLINE is set.") from None
        except HfHubHTTPError as err:
            status = getattr(err.response, "status_code", "?")
            raise errors.NetworkError(f"{where}: the Hub answered HTTP {status} after retries.") from None
        except httpx2.TimeoutException as err:
            raise errors.NetworkError(
                f"{where}: no answer from {_host_of(err) or self.settings.shown_endpoint} after waiting "
                f"{time.monotonic() - self._started:.1f}s (--timeout "
                f"{self.settings.timeout:g}s per read, with retries)."
            ) from None
        except httpx2.HTTPError as err:
            raise errors.NetworkError(
                f"{where}: cannot reach {self.settings.shown_endpoint} ({type(err).__name__}).") from None


def _host_of(err: httpx2.HTTPError) -> str | None:
    """The host a failed request went to (the CDN a download redirects to, say), where the error knows it."""
    try:
        return http.origin(err.request.url)
    except RuntimeError:  # an error raised outside a request has none
        return None


def header_size_guesses(weight_map: dict[str, str]) -> dict[str, int]:
    """Bytes to ask for per shard: its tensor names plus ~100 bytes of JSON each, with room to spare.

    Reading a little more than the header in one request beats both a fixed 100 kB read (15 shards
    of a 70B model would cost 1.5 MB) and a second round trip.
    """
    sizes: dict[str, int] = {}
    for name, shard in weight_map.items():
        sizes[shard] = sizes.get(shard, 0) + len(name) + 100
    return {shard: min(FIRST_READ_BYTES, PREFIX_BYTES + 1024 + size * 5 // 4) for shard, size in sizes.items()}


def _refuse_oversized(size: int, label: str, malformed: type[errors.HfmemError]) -> None:
    """Small JSON files past MAX_JSON_BYTES are not real: refuse them with the caller's error type."""
    if size > MAX_JSON_BYTES:
        raise malformed(f"{label} is larger than {MAX_JSON_BYTES:,} bytes.")


def _repo_state(asked: str, repo_id: Any, sha: Any, siblings: Any) -> RepoState:
    """The Hub's model description, checked: a valid id, a commit sha, file names as strings."""
    if repo_id is not None and (not isinstance(repo_id, str) or not is_repo_id(repo_id)):
        raise errors.NetworkError(f"{asked}: the Hub answered with an invalid model id {shorten(repo_id)!r}.")
    if not isinstance(sha, str) or not is_commit(sha):
        raise errors.NetworkError(f"{asked}: the Hub answered without a commit sha.")
    names = tuple(getattr(s, "rfilename", None) for s in siblings or [])
    files = tuple(f for f in names if isinstance(f, str))
    if len(files) != len(names):
        raise errors.NetworkError(f"{asked}: the Hub's file list is not a list of file names.")
    return RepoState(repo_id=repo_id or asked, sha=sha, files=files)


def _total_size(content_range: str | None) -> int | None:
    """The total of a `Content-Range: bytes a-b/total` header, None when absent or not a number."""
    return _count(content_range.rsplit("/", 1)[1]) if content_range and "/" in content_range else None


def _count(text: str | None) -> int | None:
    """A header's decimal count (ASCII digits only: int() also reads other scripts' digits), else None."""
    return int(text) if text and text.isascii() and text.isdigit() else None

