"""What one token costs in a decoder's KV cache, per layer: the one count both model.generate's phase
(generation.py) and the serving engines (hfmem.serving) read, so grouped, multi-latent and windowed attention are
modelled once. Pure arithmetic over an Architecture."""

from __future__ import annotations

from hfmem.model.architecture import Architecture


def kv_bytes_per_token(arch: Architecture, p: int) -> int:
    """One layer's cached key and value of one token: the K/V heads, or under multi-head latent attention the
    compressed latent and the shared RoPE key that transformers' DeepSeek layers cache."""
    if arch.mla:
        return p * (arch.mla.kv_lora_rank + arch.mla.qk_rope_head_dim)
    return 2 * p * arch.num_key_value_heads * arch.head_dim


def larger_half(arch: Architecture, p: int) -> int:
    """The larger of one token's cached pair: the cache appends the key (then frees the old one), then the value."""
    if arch.mla:
        return p * max(arch.mla.kv_lora_rank, arch.mla.qk_rope_head_dim)
    return p * arch.num_key_value_heads * arch.head_dim


def expanded_bytes_per_token(arch: Architecture, p: int) -> int:
    """What one layer builds per cached token to attend under multi-head latent attention (0 otherwise): the
    latent's up-projection (every head's no-RoPE key and value) and the keys assembled from it and the RoPE key."""
    if not arch.mla:
        return 0
    m = arch.mla
    return p * arch.num_attention_heads * (2 * m.qk_nope_head_dim + m.v_head_dim + m.qk_rope_head_dim)


def cached_layers(arch: Architecture) -> int:
    """Decoder layers that keep a KV cache (attention layers; a hybrid's SSM layers keep a small fixed state)."""
    attention = sum(n for kind, n in arch.layer_types.items() if "attention" in kind)
    return attention or arch.num_layers


def windowed_layers(arch: Architecture) -> int:
    """Cached layers that keep the last sliding_window tokens only (transformers' DynamicSlidingWindowLayer: the
    config's sliding layers, or every layer where a window is set without layer types); 0 without a window."""
    if arch.sliding_window is None:
        return 0
    return arch.layer_types.get("sliding_attention", 0) or cached_layers(arch)
