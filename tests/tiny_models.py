"""Scaled-down versions of real architectures (same head/kv/expert ratios, small hidden and vocab) for CPU tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONFIGS = Path(__file__).resolve().parent.parent / "fixtures" / "configs"

# model id -> overrides that shrink it while keeping its shape (GQA/MQA ratio, gating, MoE top-k, MLA ranks).
TINY: dict[str, dict[str, Any]] = {
    "meta-llama/Meta-Llama-3-8B": dict(hidden_size=256, intermediate_size=896, num_attention_heads=8, num_key_value_heads=2, head_dim=32),
    "mistralai/Mistral-7B-v0.1": dict(hidden_size=256, intermediate_size=896, num_attention_heads=8, num_key_value_heads=2, head_dim=32, sliding_window=4096),
    "mistralai/Mixtral-8x7B-v0.1": dict(hidden_size=256, intermediate_size=896, num_attention_heads=8, num_key_value_heads=2, head_dim=32),
    "Qwen/Qwen2.5-0.5B": dict(hidden_size=224, intermediate_size=1216, num_attention_heads=7, num_key_value_heads=1, head_dim=32),
    "google/gemma-2b": dict(hidden_size=256, intermediate_size=2048, num_attention_heads=4, num_key_value_heads=1, head_dim=64),
    "microsoft/phi-2": dict(hidden_size=256, intermediate_size=1024, num_attention_heads=8, num_key_value_heads=8),
    "openai-community/gpt2": dict(n_embd=256, n_head=4, n_positions=1024),
    "tiiuae/falcon-7b": dict(hidden_size=256, num_attention_heads=4, ffn_hidden_size=1024),
    "stabilityai/stablelm-base-alpha-3b": dict(hidden_size=256, num_attention_heads=4, intermediate_size=1024),  # GPT-NeoX
    "deepseek-ai/DeepSeek-V3": dict(
        hidden_size=256, intermediate_size=640, moe_intermediate_size=64, num_attention_heads=4, num_key_value_heads=4,
        q_lora_rank=64, kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=32, qk_head_dim=48, v_head_dim=32, head_dim=16,
        n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1, first_k_dense_replace=1,
    ),
}
# Families only the FLOP tests cover (the activation tests keep to TINY): same shrinking, same ratios.
TINY_EXTRA: dict[str, dict[str, Any]] = {
    "google-bert/bert-large-uncased": {"hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024},
    "bigscience/T0_3B": {"d_model": 256, "d_ff": 640, "d_kv": 32, "num_heads": 4},
    "bigscience/mt0-xxl": {"d_model": 256, "d_ff": 640, "d_kv": 32, "num_heads": 8},
    "bigscience/bloomz-7b1": {"hidden_size": 256, "n_head": 4},
    "megatron-lm/gpt3-functional-7b-gqa": {"hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 8,
                                           "num_key_value_heads": 2},
}
VOCAB = 1024


def reference_config(model_id: str) -> dict[str, Any]:
    """The full-size fixture config of `model_id` (its `_note` provenance key removed)."""
    config = json.loads((CONFIGS / model_id / "config.json").read_text())
    config.pop("_note", None)
    return config


def reference_model(model_id: str) -> tuple[Any, Any]:
    """Architecture and meta-model inventory of the full-size fixture config."""
    from hfmem.model.architecture import read_architecture
    from hfmem.model.meta import build_inventory

    config = reference_config(model_id)
    return read_architecture(config), build_inventory(config)


def tiny_config(model_id: str, layers: int, **extra: Any) -> dict[str, Any]:
    """The fixture config of `model_id` shrunk by TINY (or TINY_EXTRA), with `layers` layers (encoder-decoder: each
    stack) and a small vocabulary."""
    config = json.loads((CONFIGS / model_id / "config.json").read_text())
    config.update(TINY.get(model_id) or TINY_EXTRA[model_id])
    keys = [k for k in ("n_layer", "num_layers", "num_decoder_layers") if k in config] or ["num_hidden_layers"]
    config.update(dict.fromkeys(keys, layers))
    if isinstance(config.get("layer_types"), list):
        config["layer_types"] = config["layer_types"][:layers]
    config["vocab_size"] = VOCAB
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if isinstance(config.get(name), int) and config[name] >= VOCAB:
            config[name] = 0 if name != "pad_token_id" else None
    config.update(extra)
    return config
