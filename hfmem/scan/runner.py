"""`hfmem scan`'s engine: read model lists, shard them, analyse models concurrently, append one JSONL record each.

A record is written and flushed the moment its model finishes, so a crash or Ctrl-C loses only the
models in flight; `--resume` skips every (model, settings digest) already recorded. Sharding hashes
each model id, so N jobs given the same list cover it exactly once whatever order they read it in.
Meta builds are shared through hfmem's cache by config hash (see model.derive).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx2
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError

from hfmem import errors
from hfmem.hub import cache
from hfmem.hub.client import MALFORMED_ANSWER, HubClient
from hfmem.hub.hub_settings import HubSettings
from hfmem.hub.modelref import ModelRef, parse_model_ref
from hfmem.model import derive

try:
    import fcntl
except ImportError:  # Windows: no advisory lock, the rest works
    fcntl = None  # type: ignore[assignment]  # checked before each use

RECORD_VERSION = 1

ReportFn = Callable[[ModelRef], dict[str, Any]]


# -- model lists ---------------------------------------------------------------------------------
def read_list(lines: Iterable[str]) -> list[str]:
    """Model references from list lines: `#` starts a comment, blanks are skipped, repeats kept once."""
    seen: dict[str, None] = {}
    for line in lines:
        text = line.split("#", 1)[0].strip()
        if text:
            seen.setdefault(text)
    return list(seen)


def load_list(path: str) -> list[str]:
    """Read a list file, or standard input for `-`."""
    if path == "-":
        return read_list(sys.stdin)
    try:
        with open(path, encoding="utf-8") as handle:
            return read_list(handle)
    except (OSError, UnicodeDecodeError) as err:
        raise errors.InvalidInputError(
            f"cannot read model list {path}: {getattr(err, 'strerror', None) or err}.") from None


def list_hub_models(settings: HubSettings, author: str | None, search: str | None, limit: int | None) -> list[str]:
    """Model ids from the Hub's list API (`HfApi.list_models`), sorted so every shard job sees one order."""
    if settings.offline:
        raise errors.InvalidInputError("--author/--search/--limit need the Hub, but HF_HUB_OFFLINE is set.")
    api = HfApi(endpoint=settings.endpoint, token=settings.token or False, library_name="hfmem")
    try:
        infos = HubClient(settings)._retry(lambda: list(api.list_models(author=author, search=search, limit=limit)))
    except HfHubHTTPError as err:
        status = getattr(err.response, "status_code", "?")
        raise errors.NetworkError(
            f"listing models on {settings.shown_endpoint}: the Hub answered HTTP {status}.") from None
    except httpx2.HTTPError as err:
        raise errors.NetworkError(
            f"listing models on {settings.shown_endpoint} failed ({type(err).__name__}).") from None
    except MALFORMED_ANSWER:
        raise errors.NetworkError(
            f"listing models on {settings.shown_endpoint}: the answer is not a model list.") from None
    return sorted({info.id for info in infos if isinstance(info.id, str) and info.id})


# -- sharding ------------------------------------------------------------------------------------
def parse_shard(text: str) -> tuple[int, int]:
    """`K/N` (1 <= K <= N) -> (K, N)."""
    k, _, n = text.partition("/")
    if not (k.strip().isdigit() and n.strip().isdigit()) or not 1 <= int(k) <= int(n):
        raise errors.InvalidInputError(f"--shard {text!r}: expected K/N with 1 <= K <= N, e.g. 3/8.")
    return int(k), int(n)


def shard_of(model: str, count: int) -> int:
    """The 1-based shard a model belongs to: a stable hash of its reference, independent of list order."""
    digest = hashlib.sha256(model.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def select_shard(models: list[str], shard: tuple[int, int] | None) -> list[str]:
    """The models shard K of N scans (all of them without --shard)."""
    if shard is None:
        return models
    k, n = shard
    return [m for m in models if shard_of(m, n) == k]


# -- records and the JSONL store -----------------------------------------------------------------
def settings_digest(settings: dict[str, Any]) -> str:
    """A short stable digest of the settings a result depends on: half of the resume key."""
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def ok_record(model: str, settings: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """The record of a model that was analysed: its report as `hfmem MODEL --format json` prints it."""
    return {"record_version": RECORD_VERSION, "model": model, "settings_digest": settings_digest(settings),
            "settings": settings, "status": "ok", "repo_id": report.get("model"), "revision": report.get("revision"),
            "sha": report.get("sha"), "report": report, "error": None}


def error_record(model: str, settings: dict[str, Any], err: Exception, ref: ModelRef | None = None) -> dict[str, Any]:
    """The record of a model that failed: the error's class, exit code and one-line message (`errors.classify`)."""
    code, message = errors.classify(err)
    kind = "InternalError" if code is errors.ExitCode.INTERNAL else type(err).__name__  # a bug, recorded
    error = {"type": kind, "exit_code": int(code), "message": message}
    return {"record_version": RECORD_VERSION, "model": model, "settings_digest": settings_digest(settings),
            "settings": settings, "status": "error", "repo_id": ref.name if ref else None,
            "revision": ref.revision if ref else None, "sha": None,
            "report": None, "error": error}


def record_key(record: dict[str, Any]) -> tuple[str, str]:
    """What --resume matches on: the model as listed and the settings digest."""
    return record["model"], record["settings_digest"]


def iter_records(path: Path) -> Iterator[dict[str, Any]]:
    """Every complete record of a JSONL file, in order; a line a kill cut short (or any non-record) is skipped."""
    if not path.exists():
        return
    for line in _lines(path):
        if (record := _record(line)) is not None:
            yield record


class ResultStore:
    """Append-only JSONL results: one line per record, written whole and flushed at once."""

    def __init__(self, path: Path, resume: bool) -> None:
        self.path = path
        self.recorded, self._tail = read_store(path)
        if self.recorded and not resume:
            raise errors.InvalidInputError(f"{path} already holds {len(self.recorded)} models' records; pass --resume "
                                           "to continue it, or choose another --out.")
        self._handle = self._open()

    def _open(self) -> IO[bytes]:
        """Open for appending, locked against a second scan; end the last line as read_store decided."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(self.path, "ab+")  # noqa: SIM115 (the store holds it, locked, until close())
        except OSError as err:
            raise errors.OutputError(f"cannot write {self.path}: {err.strerror}.") from None
        if fcntl is not None:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                raise errors.InvalidInputError(f"another scan is writing {self.path}.") from None
        if self._tail == "whole":
            handle.write(b"\n")
        elif self._tail == "cut":
            _drop_partial_line(handle)
        return handle

    def append(self, record: dict[str, Any]) -> None:
        """Write one record whole and flush it; a full disk is one line naming the file, records so far kept."""
        try:
            self._handle.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")
            self._handle.flush()
        except OSError as err:
            raise errors.OutputError(f"cannot write {self.path}: {err.strerror or type(err).__name__}; the records "
                                     "written so far are kept: rerun with --resume once there is room.") from None
        self.recorded.add(record_key(record))

    def close(self) -> None:
        with contextlib.suppress(OSError):  # only after a failed append (which said so): its bytes are still buffered
            self._handle.close()


def read_store(path: Path) -> tuple[set[tuple[str, str]], str | None]:
    """The resume keys an existing --out holds, and what its last line needs: None, "whole" (a complete record
    whose newline is missing) or "cut" (a record a kill cut short). Anything else is refused, file untouched."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return set(), None
    except OSError as err:
        raise errors.InvalidInputError(f"cannot read {path}: {err.strerror}.") from None
    if not stat.S_ISREG(info.st_mode):  # reading a pipe back (-o /dev/stdout | cat) would wait forever
        raise errors.InvalidInputError(f"--out {path} is not a regular file (a pipe, terminal or device); records go "
                                       "to a file that --resume can read back: write to a file, then read that.")
    keys: set[tuple[str, str]] = set()
    tail = None
    for number, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        record = _record(line)
        if record is not None:
            keys.add(record_key(record))
            tail = None if line.endswith(b"\n") else "whole"
        elif not line.endswith(b"\n") and line.lstrip().startswith(b"{"):
            tail = "cut"  # a JSON object a kill cut short
        else:
            raise errors.InvalidInputError(f"{path} is not an hfmem scan results file (line {number:,} is not a scan "
                                           "record); it is left untouched: choose another --out.")
    return keys, tail


def _lines(path: Path) -> Iterator[bytes]:
    try:
        with open(path, "rb") as handle:
            yield from handle
    except OSError as err:
        raise errors.InvalidInputError(f"cannot read {path}: {err.strerror}.") from None


def _record(line: bytes) -> dict[str, Any] | None:
    """The record a JSONL line holds, or None when it is not one."""
    try:
        record = json.loads(line)
        record_key(record)
    except (ValueError, TypeError, KeyError):
        return None
    return record


def _drop_partial_line(handle: IO[bytes]) -> None:
    """Truncate after the last newline: a record without one was being written when the process died."""
    size = handle.seek(0, os.SEEK_END)
    pos = size
    while pos > 0:
        step = min(65536, pos)
        handle.seek(pos - step)
        chunk = handle.read(step)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            handle.truncate(pos - step + cut + 1)
            return
        pos -= step
    handle.truncate(0)


# -- running -------------------------------------------------------------------------------------
@dataclass
class ScanStats:
    """Counts for the progress bar and the closing summary."""

    total: int = 0
    ok: int = 0
    failed: int = 0
    cached: int = 0
    skipped: int = 0
    builds: int = 0
    started: float = field(default_factory=time.monotonic)
    elapsed: float = 0.0

    @property
    def done(self) -> int:
        """Models recorded by this run (analysed or failed)."""
        return self.ok + self.failed

    @property
    def rate(self) -> float:
        """Models recorded per second by this run."""
        return self.done / self.elapsed if self.elapsed > 0 else 0.0


def run_scan(models: list[str], report_fn: ReportFn, settings: dict[str, Any], store: ResultStore, concurrency: int,
             progress: Callable[[ScanStats], None] | None = None) -> ScanStats:
    """Analyse every model not yet recorded under these settings, `concurrency` at a time, recording each."""
    digest = settings_digest(settings)
    todo = [m for m in models if (m, digest) not in store.recorded]
    stats = ScanStats(total=len(models), skipped=len(models) - len(todo))
    builds_before = derive.meta_builds

    def tick() -> None:
        stats.elapsed = time.monotonic() - stats.started
        stats.builds = derive.meta_builds - builds_before
        if progress:
            progress(stats)

    tick()
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="hfmem-scan")
    queue = iter(todo)
    in_flight: set[Future[tuple[dict[str, Any], bool]]] = set()
    try:
        while True:  # at most 2 x concurrency submitted: a finished record is dropped once written (flat memory)
            in_flight |= {pool.submit(analyse_one, m, report_fn, settings)
                          for m in itertools.islice(queue, 2 * concurrency - len(in_flight))}
            if not in_flight:
                return stats
            done, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in done:
                record, was_cached = future.result()
                store.append(record)
                stats.ok += record["status"] == "ok"
                stats.failed += record["status"] == "error"
                stats.cached += was_cached
            tick()
    finally:  # on Ctrl-C: queued models are never submitted, the few in flight finish unrecorded
        pool.shutdown(wait=False, cancel_futures=True)


def analyse_one(model: str, report_fn: ReportFn, settings: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """One model's record, never raising for the model's own problems; also whether hfmem's cache answered."""
    started = time.time()
    ref = None
    try:
        ref = parse_model_ref(model)
        report = report_fn(ref)
    except Exception as err:  # every failure is the model's record, never the scan's end
        return error_record(model, settings, err, ref), False
    return ok_record(model, settings, report), _served_from_cache(report, started)


def _served_from_cache(report: dict[str, Any], started: float) -> bool:
    """True when the repo's config and headers came from hfmem's cache (its entry predates this model's start).

    Read from the entry's file time because build_report does not say; `cache._path` is the cache's own naming.
    """
    if report.get("source") != "hub" or not report.get("sha"):
        return False
    try:
        return cache._path("repos", f"{report['model']}@{report['sha']}").stat().st_mtime < started
    except OSError:
        return False


def collect_models(path: str | None, hub_settings: HubSettings, author: str | None, search: str | None,
                   limit: int | None) -> list[str]:
    """The models to scan: the list file's (in order), then the Hub listing's, each once."""
    listed = load_list(path) if path else []
    if author or search or limit is not None:
        listed += list_hub_models(hub_settings, author, search, limit)
    return list(dict.fromkeys(listed))
