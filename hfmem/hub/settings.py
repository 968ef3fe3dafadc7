"""Where and how hfmem talks to the Hub: endpoint, token, cache and offline mode, read from the environment.

A light module: `from_env` imports huggingface_hub only when it is called, which happens once a request is
needed (a warm answer from hfmem's cache never resolves Hub settings).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class HubSettings:
    endpoint: str
    token: str | None
    cache_dir: str
    offline: bool
    timeout: float = 10.0
    retries: int = 4
    max_retry_wait: float = 30.0

    @staticmethod
    def from_env(token: str | None = None, timeout: float = 10.0, retries: int = 4) -> HubSettings:
        """Resolve endpoint, token (flag, HF_TOKEN, then the saved login), cache and offline mode now."""
        from huggingface_hub.utils import get_token

        hf_home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
        offline = os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}
        return HubSettings(
            endpoint=(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/"),
            token=token or os.environ.get("HF_TOKEN") or get_token() or None,
            cache_dir=os.environ.get("HF_HUB_CACHE") or os.path.join(hf_home, "hub"),
            offline=offline,
            timeout=timeout,
            retries=retries,
        )
