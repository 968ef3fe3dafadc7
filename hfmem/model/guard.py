"""Refuse absurd or mistyped configs before anything is built from them: dimensions, structure and nesting.

Parameter limits alone do not bound a meta build: a config with a million tiny layers, thousands of
per-expert modules or a 40 MB per-layer pattern is small in parameters and still takes minutes and
gigabytes to build. So every layer-count field (encoder, decoder, text and vision), the product of
layers and experts, and every per-layer list or pattern string is bounded here, in one pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from hfmem import errors
from hfmem.model.architecture import LIMITS

MAX_DEPTH = 8
"""Objects and lists nested deeper than this are not a model config (real ones stay under 5)."""
MAX_LAYER_MODULES = 1 << 16
"""Layers summed over every layer-count field, times the most experts any part has. DeepSeek-V3 is
62 x 256 = 15,872; the largest Switch Transformer (15 + 15 layers, 2,048 experts) about 61,440."""
MAX_PER_LAYER_ENTRIES = LIMITS["num_layers"]
"""A per-layer list or pattern string cannot have more entries than a model can have layers."""
MAX_LIST_ENTRIES = 1 << 16
MAX_STRING_CHARS = 1 << 20

# Integer fields that count layers or blocks: num_hidden_layers, num_decoder_layers, n_layer, encoder_layers,
# num_sparse_encoder_layers, vision `depth`, num_nextn_predict_layers... (over-counting aliases only tightens
# the bound by a factor of two or three, which real configs are far from).
_LAYER_COUNT = re.compile(r"(^|_)(layers?|depth)$")
_PER_LAYER = re.compile(r"layer|pattern|block")
_EXPERT_COUNT = {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"}
_DIM_KEYS = {"num_hidden_layers": "num_layers", "n_layer": "num_layers", "n_embd": "hidden_size",
             "d_model": "hidden_size", "num_local_experts": "num_experts", "n_routed_experts": "num_experts",
             "n_head": "num_attention_heads",
             "n_positions": "max_position_embeddings", "encoder_layers": "num_layers", "decoder_layers": "num_layers"}


@dataclass
class _Structure:
    """What the walk adds up over the whole config: layers in every part, the most experts of any part."""

    layers: int = 0
    experts: int = 0
    fields: list[str] = field(default_factory=list)


def guard_config(config: Any) -> None:
    """Refuse absurd or mistyped dimensions and structures anywhere in the (nested) config."""
    found = _Structure()
    _walk(config, 0, found)
    modules = found.layers * max(1, found.experts)
    if modules > MAX_LAYER_MODULES:
        raise errors.AbsurdConfigError(
            f"config.json describes {found.layers:,} layers ({', '.join(found.fields)}) x {max(1, found.experts):,} "
            f"experts = {modules:,} layer modules, over the {MAX_LAYER_MODULES:,} any real model has; "
            "refusing to build it.")


def _walk(value: Any, depth: int, found: _Structure) -> None:
    if depth > MAX_DEPTH:
        raise errors.MalformedConfigError("config.json nests too deeply.")
    if isinstance(value, list):
        for item in value:
            _walk(item, depth + 1, found)
    elif isinstance(value, dict):
        _check_types(value)
        for key, item in value.items():
            _check_field(str(key), item, found)
            if isinstance(item, (dict, list)):
                _walk(item, depth + 1, found)


def _check_types(config: dict[str, Any]) -> None:
    """The fields transformers looks classes up by must be what they claim, or its lookups fail in odd ways."""
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise errors.MalformedConfigError(f"config.json `model_type` must be a string, got {_short(model_type)}.")
    names = config.get("architectures")
    if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise errors.MalformedConfigError(
            f"config.json `architectures` must be a list of class names, got {_short(names)}.")


def _check_field(key: str, value: Any, found: _Structure) -> None:
    if key in {"torch_dtype", "dtype"}:
        if value is not None and not isinstance(value, str):
            raise errors.MalformedConfigError(f"config.json `{key}` must be a dtype name, got {_short(value)}.")
    elif key in LIMITS or key in _DIM_KEYS:
        _check_dimension(key, value)
    elif isinstance(value, (str, list)):
        _check_length(key, value)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        if _LAYER_COUNT.search(key):
            _check_dimension(key, value, limit=LIMITS["num_layers"])
            found.layers += value
            found.fields.append(f"{key} {value:,}")
        elif key in _EXPERT_COUNT:
            found.experts = max(found.experts, value)


def _check_dimension(key: str, value: Any, limit: int | None = None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise errors.MalformedConfigError(f"config.json `{key}` must be an integer, got {_short(value)}.")
    if value < 0:
        raise errors.MalformedConfigError(f"config.json `{key}` must not be negative, got {value}.")
    limit = limit if limit is not None else LIMITS.get(key, LIMITS.get(_DIM_KEYS.get(key, ""), None))
    if limit is not None and value > limit:
        raise errors.AbsurdConfigError(f"config.json `{key}` = {value:,} exceeds {limit:,}; refusing to build it.")


def _check_length(key: str, value: str | list[Any]) -> None:
    """Per-layer lists and patterns (layer_types, hybrid_override_pattern...) are at most one entry per layer."""
    if _PER_LAYER.search(key):
        limit, what = MAX_PER_LAYER_ENTRIES, "a per-layer field"
    else:
        limit, what = (MAX_STRING_CHARS, "a string") if isinstance(value, str) else (MAX_LIST_ENTRIES, "a list")
    if len(value) > limit:
        raise errors.AbsurdConfigError(
            f"config.json `{key}` has {len(value):,} entries, more than {what} can have ({limit:,}); "
            "refusing to build it.")


def _short(value: Any) -> str:
    """A value for a one-line message: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
