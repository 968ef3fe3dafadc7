"""Refuse absurd or mistyped dimensions anywhere in a config.json before anything is built from it."""

from __future__ import annotations

from typing import Any

from hfmem import errors
from hfmem.model.architecture import LIMITS


def guard_config(config: Any, depth: int = 0) -> None:
    """Refuse absurd or mistyped dimensions anywhere in the (nested) config before building anything."""
    if depth > 8:
        raise errors.MalformedConfigError("config.json nests too deeply.")
    for key, value in (config.items() if isinstance(config, dict) else []):
        if isinstance(value, dict):
            guard_config(value, depth + 1)
        elif key in {"torch_dtype", "dtype"}:
            if value is not None and not isinstance(value, str):
                raise errors.MalformedConfigError(f"config.json `{key}` must be a dtype name, got {value!r}.")
        elif key in LIMITS or key in _DIM_KEYS:
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise errors.MalformedConfigError(f"config.json `{key}` must be an integer, got {value!r}.")
            if value < 0:
                raise errors.MalformedConfigError(f"config.json `{key}` must not be negative, got {value}.")
            limit = LIMITS.get(key, LIMITS.get(_DIM_KEYS.get(key, ""), None))
            if limit is not None and value > limit:
                raise errors.AbsurdConfigError(f"config.json `{key}` = {value:,} exceeds {limit:,}; refusing to build it.")


_DIM_KEYS = {"num_hidden_layers": "num_layers", "n_layer": "num_layers", "n_embd": "hidden_size", "d_model": "hidden_size",
             "num_local_experts": "num_experts", "n_routed_experts": "num_experts", "n_head": "num_attention_heads",
             "n_positions": "max_position_embeddings", "encoder_layers": "num_layers", "decoder_layers": "num_layers"}
