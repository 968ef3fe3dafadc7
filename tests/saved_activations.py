"""Measure what a real forward pass saves for backward: unique storages seen by saved_tensors_hooks.

Parameters (and views of them) are excluded; storages are deduplicated by data pointer and counted
at their full size, which is what they occupy. The forward runs bf16 matrix products in fp32 (Fp32Products,
tests/live_peak.py): the same tensors are saved. Used by tests/test_activations.py.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import torch

from live_peak import Fp32Products
from tiny_models import tiny_config


def build_model(config_dict: dict[str, Any], attention: str, dtype: torch.dtype = torch.bfloat16) -> Any:
    """A randomly initialised causal LM on CPU in training mode, with the given attention kernel."""
    import transformers

    data = dict(config_dict)
    model_type = data.pop("model_type")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        config = transformers.AutoConfig.for_model(model_type, **{k: v for k, v in data.items() if k not in {"architectures", "auto_map"}})
        config._attn_implementation = attention
        config.use_cache = False
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.train()
    return model


@contextlib.contextmanager
def sdpa_backends() -> Any:
    """Record which SDPA backend torch picks for each call (0 math, 1 flash, 2 efficient, ...)."""
    chosen: list[int] = []
    original = torch.nn.functional.scaled_dot_product_attention

    def wrapper(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        chosen.append(int(torch._fused_sdp_choice(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)))
        return original(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)

    torch.nn.functional.scaled_dot_product_attention = wrapper
    try:
        yield chosen
    finally:
        torch.nn.functional.scaled_dot_product_attention = original


def _closure_counting(func: Any, params: set[int], seen: dict[int, int]) -> Any:
    """Wrap a checkpoint function so that tensors bound in its recompute closure count as kept."""

    def wrapped(function: Any, *args: Any, **kwargs: Any) -> Any:
        bound = list(getattr(function, "keywords", {}).values()) + list(getattr(function, "args", ()))
        for value in bound:
            values = value if isinstance(value, (tuple, list)) else (value,)
            for t in values:
                if isinstance(t, torch.Tensor):
                    ptr = t.untyped_storage().data_ptr()
                    if ptr not in params and ptr not in seen:
                        seen[ptr] = t.untyped_storage().nbytes()
        return func(function, *args, **kwargs)

    return wrapped


def saved_bytes(model: Any, batch: int, seq: int, *, checkpointing: bool = False, seed: int = 0) -> tuple[int, list[int]]:
    """Bytes of unique non-parameter storages saved during forward + loss; and the SDPA backends used."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in params and ptr not in seen:
            seen[ptr] = storage.nbytes()
        return t

    if checkpointing:
        # Reentrant checkpointing saves each layer's positional inputs through the hooks; the tensors
        # it keeps in the recompute closure (keyword arguments: RoPE tables, masks) are counted too.
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": True})
        for module in model.modules():
            if getattr(module, "gradient_checkpointing", False) and hasattr(module, "_gradient_checkpointing_func"):
                module._gradient_checkpointing_func = _closure_counting(module._gradient_checkpointing_func, params, seen)
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=generator)
    with sdpa_backends() as backends, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), Fp32Products():
        out = model(input_ids=ids, labels=ids, use_cache=False)
    assert out.loss.requires_grad
    return sum(seen.values()), backends


def measure(model_id: str, attention: str, *, layers: int, batch: int, seq: int, dtype: torch.dtype = torch.bfloat16,
            checkpointing: bool = False, **extra: Any) -> tuple[int, list[int]]:
    """Saved bytes of the tiny `model_id` with `layers` layers."""
    model = build_model(tiny_config(model_id, layers, **extra), attention, dtype)
    return saved_bytes(model, batch, seq, checkpointing=checkpointing)
