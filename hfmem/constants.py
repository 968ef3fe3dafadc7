"""Defaults that are not a training setting, defined once for every module that needs them."""

from __future__ import annotations

DEFAULT_SEQ_LEN = 2048
"""The sequence length estimated when none is set (capped at the model's max_position_embeddings)."""

HUB_TIMEOUT_S = 10.0
"""Seconds per Hub request before it is retried (the CLI's --timeout default)."""
