"""Errors hfmem reports to users: one line each, with a distinct exit code per kind.

`ExitCode` lists every status hfmem's programs (the CLI, `hfmem scan`, the GitHub Action) return,
each with its meaning; `classify` turns any exception into one (code, message) pair so all of them
report the same failure the same way.
"""

from __future__ import annotations

import os
from enum import IntEnum
from typing import NoReturn, Self

DEBUG_ENV = "HFMEM_DEBUG"
"""Set (to anything) to get a traceback instead of the one-line internal error."""


class ExitCode(IntEnum):
    """A process status and its one-line meaning (`code.phrase`), as httpx's `codes` pairs a status with a phrase."""

    phrase: str

    def __new__(cls, value: int, phrase: str) -> Self:
        member = int.__new__(cls, value)
        member._value_ = value
        member.phrase = phrase
        return member

    OK = 0, "success"
    FAILURE = 1, "some models of a scan failed (each record says why)"
    INVALID_INPUT = 2, "bad command line, model reference or Action input"
    REPO_NOT_FOUND = 3, "repository not found (or private without a token)"
    GATED_REPO = 4, "gated repository: accept the licence on the Hub and set `HF_TOKEN`"
    REVISION_NOT_FOUND = 5, "revision not found"
    NETWORK = 6, ("network failure, timeout or repeated 429/5xx after retries, or a link-local or cloud metadata "
                  "host refused")
    MALFORMED_CONFIG = 7, "malformed `config.json`"
    MALFORMED_CHECKPOINT = 8, ("malformed or oversized safetensors header or index, or more shards or Hub requests "
                               "than any real model needs")
    ABSURD_CONFIG = 9, "absurd config (refused before building anything)"
    OFFLINE_CACHE_MISS = 10, "`HF_HUB_OFFLINE` set and the model is not cached"
    UNSUPPORTED_ARCHITECTURE = 11, "unsupported architecture with nothing to count from"
    DOES_NOT_FIT = 12, "the Action's `fail-on` condition holds (the comment is still posted)"
    GITHUB_API = 13, "the GitHub API refused or kept failing a request (the Action)"
    OUTPUT = 14, ("an output file or stdout cannot be written (disk full, no permission, closed); a scan keeps every "
                  "finished record; a reader of stdout that stops early (as head does) is no failure: exit 0")
    INTERNAL = 70, "internal error (a bug: please report it)"  # EX_SOFTWARE in BSD's sysexits.h
    INTERRUPTED = 130, "interrupted (Ctrl-C); a scan keeps every finished record"  # 128 + SIGINT, as shells report it


class HfmemError(Exception):
    """Base class: `str(err)` is the one-line message, `exit_code` the process status."""

    exit_code = ExitCode.FAILURE

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class InvalidInputError(HfmemError):
    """The command line or a model reference is malformed."""

    exit_code = ExitCode.INVALID_INPUT


class RepoNotFoundError(HfmemError):
    exit_code = ExitCode.REPO_NOT_FOUND


class GatedRepoError(HfmemError):
    exit_code = ExitCode.GATED_REPO


class RevisionNotFoundError(HfmemError):
    exit_code = ExitCode.REVISION_NOT_FOUND


class NetworkError(HfmemError):
    """The Hub could not be reached, timed out or kept failing after retries."""

    exit_code = ExitCode.NETWORK


class MalformedConfigError(HfmemError):
    exit_code = ExitCode.MALFORMED_CONFIG


class MalformedCheckpointError(HfmemError):
    """A safetensors header or index is truncated, oversized or inconsistent."""

    exit_code = ExitCode.MALFORMED_CHECKPOINT


class AbsurdConfigError(HfmemError):
    """The config describes a model too large to be real; refused before building anything."""

    exit_code = ExitCode.ABSURD_CONFIG


class OfflineCacheMissError(HfmemError):
    """HF_HUB_OFFLINE is set and the model is not in the local cache."""

    exit_code = ExitCode.OFFLINE_CACHE_MISS


class UnsupportedArchitectureError(HfmemError):
    exit_code = ExitCode.UNSUPPORTED_ARCHITECTURE


class DoesNotFitError(HfmemError):
    """The Action's `fail-on` found a model that errs, regresses or does not fit a required GPU."""

    exit_code = ExitCode.DOES_NOT_FIT


class GitHubApiError(HfmemError):
    """GitHub refused or kept failing a request; `status` is the HTTP status (None for transport errors)."""

    exit_code = ExitCode.GITHUB_API

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ScanFailuresError(HfmemError):
    """The scan finished but some models could not be analysed (each has an error record)."""

    exit_code = ExitCode.FAILURE


class ScanInterruptedError(HfmemError):
    """Ctrl-C during a scan: every finished model is already recorded."""

    exit_code = ExitCode.INTERRUPTED


class OutputError(HfmemError):
    """A results, export or Action output file cannot be written; the message names the file."""

    exit_code = ExitCode.OUTPUT


_ctrl_c: list[int] = []
"""The SIGINTs `note_interrupt` has seen in this process."""


def note_interrupt(signum: int, frame: object) -> NoReturn:
    """The programs' SIGINT handler (hfmem/entry.py): remember the Ctrl-C, then raise KeyboardInterrupt as Python does.

    Remembered because a library may swallow the exception (an import it interrupts can fail later in another way, a
    RecursionError in a half-imported numpy, say): once Ctrl-C was pressed, `classify` calls any failure an interrupt.
    """
    _ctrl_c.append(signum)
    raise KeyboardInterrupt


def interrupted() -> bool:
    """Whether Ctrl-C was pressed in this process (as seen by `note_interrupt`)."""
    return bool(_ctrl_c)


def classify(exc: BaseException) -> tuple[ExitCode, str]:
    """The exit code and one-line message for a failure: hfmem's own errors as raised, Ctrl-C, or a bug."""
    if isinstance(exc, HfmemError) and (exc.exit_code == ExitCode.INTERRUPTED or not interrupted()):
        return exc.exit_code, str(exc)
    if isinstance(exc, KeyboardInterrupt) or interrupted():  # after Ctrl-C, whatever failed failed because of it
        return ExitCode.INTERRUPTED, "interrupted."
    detail = " ".join(f"{type(exc).__name__}: {exc}".split())
    return ExitCode.INTERNAL, f"internal error ({detail}); rerun with {DEBUG_ENV}=1 and report it."


def debugging() -> bool:
    """Whether HFMEM_DEBUG asks for the traceback of an internal error instead of its one line."""
    return bool(os.environ.get(DEBUG_ENV))
