"""Errors hfmem reports to users: one line each, with a distinct exit code per kind."""

from __future__ import annotations


class HfmemError(Exception):
    """Base class: `str(err)` is the one-line message, `exit_code` the process status."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class InvalidInputError(HfmemError):
    """The command line or a model reference is malformed."""

    exit_code = 2


class RepoNotFoundError(HfmemError):
    exit_code = 3


class GatedRepoError(HfmemError):
    exit_code = 4


class RevisionNotFoundError(HfmemError):
    exit_code = 5


class NetworkError(HfmemError):
    """The Hub could not be reached, timed out or kept failing after retries."""

    exit_code = 6


class MalformedConfigError(HfmemError):
    exit_code = 7


class MalformedCheckpointError(HfmemError):
    """A safetensors header or index is truncated, oversized or inconsistent."""

    exit_code = 8


class AbsurdConfigError(HfmemError):
    """The config describes a model too large to be real; refused before building anything."""

    exit_code = 9


class OfflineCacheMissError(HfmemError):
    """HF_HUB_OFFLINE is set and the model is not in the local cache."""

    exit_code = 10


class UnsupportedArchitectureError(HfmemError):
    exit_code = 11


class DoesNotFitError(HfmemError):
    """Raised by `--fail-on`-style checks when a required fit is not met."""

    exit_code = 12
