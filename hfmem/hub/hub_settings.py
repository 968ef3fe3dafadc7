"""Where and how hfmem talks to the Hub: endpoint, token, cache and offline mode, read from the environment.

A light module: `from_env` imports huggingface_hub only when it is called, which happens once a request is
needed (a warm answer from hfmem's cache never resolves Hub settings).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from hfmem.constants import HUB_TIMEOUT_S

DEADLINE_TIMEOUTS = 4
"""A Hub request must be complete within this many --timeout's, however slowly its bytes arrive."""


@dataclass(frozen=True)
class HubSettings:
    endpoint: str
    token: str | None
    cache_dir: str
    offline: bool
    timeout: float = HUB_TIMEOUT_S
    retries: int = 4
    max_retry_wait: float = 30.0

    @property
    def shown_endpoint(self) -> str:
        """The endpoint as messages and records show it: without credentials."""
        return redact_url(self.endpoint)

    @property
    def request_deadline(self) -> float:
        """Seconds one request may take in all (the timeout counts per read)."""
        return DEADLINE_TIMEOUTS * self.timeout

    @property
    def model_deadline(self) -> float:
        """Seconds all the requests for one model may take, retries included."""
        return (self.retries + 1) * self.request_deadline

    @staticmethod
    def from_env(token: str | None = None, timeout: float = HUB_TIMEOUT_S, retries: int = 4) -> HubSettings:
        """Resolve endpoint, token (flag, then huggingface_hub's lookup: HF_TOKEN, the saved login), cache, offline.

        Read now rather than from huggingface_hub.constants, which holds the environment of import time, so one
        process can serve several endpoints; the offline test is the library's (HF_HUB_OFFLINE or
        TRANSFORMERS_OFFLINE, with its truthy values).
        """
        from huggingface_hub import constants
        from huggingface_hub.utils import get_token

        cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        hf_home = os.environ.get("HF_HOME") or os.path.join(cache_home, "huggingface")
        offline = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
        return HubSettings(
            endpoint=(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/"),
            token=token or get_token() or None,
            cache_dir=os.environ.get("HF_HUB_CACHE") or os.path.join(hf_home, "hub"),
            offline=offline.upper() in constants.ENV_VARS_TRUE_VALUES,
            timeout=timeout,
            retries=retries,
        )


def redact_url(url: str) -> str:
    """`url` without the user name and password it may carry: what hfmem prints or stores of any URL."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])) if "@" in parts.netloc else url
