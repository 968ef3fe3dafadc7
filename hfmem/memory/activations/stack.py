"""The decoder stack's per-layer figures: each group of the layer plan at b·s tokens, and an encoder's layers."""

from __future__ import annotations

from dataclasses import replace

from hfmem.memory.activations.attention import attention
from hfmem.memory.activations.backward import backward_working
from hfmem.memory.activations.layer import layer_at
from hfmem.memory.activations.linears import boft_rotations, dequantized_weights, merged_weights, oft_rotations
from hfmem.memory.activations.norms import norm
from hfmem.memory.activations.result import LayerActivation
from hfmem.memory.activations.saved import Saved
from hfmem.memory.activations.spec import ActivationSpec


def stack(spec: ActivationSpec, s: int, tokens: int, cache: dict, notes: list[str]) -> list[LayerActivation]:
    """One LayerActivation per group of the layer plan (and the encoder's layers), noting the approximations."""
    arch = spec.arch
    layers = []
    for kind, mlp_kind, count in spec.plan:
        saved = layer_at(cache, spec, kind, mlp_kind, s)
        working = backward_working(spec, kind, mlp_kind, s, saved)
        mods = spec.modules(mlp_kind)
        weights = {} if kind == "mamba" else {"dequantized_weights": dequantized_weights(spec, mods)}
        merged, largest = merged_weights(spec, mods)
        weights["lora_merged_experts"] = merged
        weights["oft_rotations"] = oft_rotations(spec, mods)
        weights["boft_rotations"] = boft_rotations(spec, mods)
        if spec.trained.prefix_tokens and "attention" in kind:
            weights["prefix_kv"] = prefix_kv_bytes(spec, tokens // max(1, s), s)
        layers.append(_layer_activation(_label(kind, mlp_kind), count, saved, tokens, working, weights, largest))
    if spec.trained.merged:
        notes.append("LoRA on fused MoE expert tensors (PEFT's ParamWrapper): each layer's forward builds W + B·A, a "
                     "whole copy of its expert tensors that autograd keeps for backward, and backward builds its "
                     "full-size gradient one tensor at a time")
    if spec.trained.dequantized:
        notes.append("quantized base (GPTQ/AWQ torch kernels): each layer dequantises its weights and matmuls them, "
                     "so autograd keeps every layer's dequantised weights for backward (full checkpointing: one "
                     "layer's, recomputed)")
    if arch.is_encoder_decoder and layers:
        notes.append("encoder-decoder: encoder layers approximated as decoder layers at the same length, "
                     "cross-attention as a second attention block")
    if arch.is_encoder_decoder and arch.encoder_layers:
        layers = _with_encoder(spec, s, tokens, layers)
    if any(layer.kind == "mamba" for layer in layers):
        notes.append("mamba layers: approximate (projections, conv and gated output; the scan's own state is "
                     "not modelled)")
    return layers


def prefix_kv_bytes(spec: ActivationSpec, b: int, s: int) -> float:
    """What prefix tuning's n virtual keys and values add to one layer's saved attention, beyond its s tokens:
    under SDPA transformers passes an explicit (b, 1, s, s + n) mask, with grouped K/V repeated to every query head
    (MQA's one head stays a broadcast view; measured: tests/test_peft_methods.py), so n more keys and values per
    head and n more mask columns; FlashAttention keeps them grouped and unmasked; eager also keeps the n more
    columns of its attention probabilities."""
    arch, n = spec.arch, spec.trained.prefix_tokens
    kv_heads = arch.num_key_value_heads or arch.num_attention_heads
    # MQA's single head stays a broadcast view (attention.attention's k_heads rule)
    grouped = spec.kernel == "flash_attention_2" or kv_heads == 1
    heads = kv_heads if grouped else arch.num_attention_heads
    kv = 2 * b * n * heads * arch.head_dim * spec.p
    if spec.kernel == "flash_attention_2":
        return kv
    probabilities = b * arch.num_attention_heads * s * n * spec.p if spec.kernel in {"eager", "sdpa_math"} else 0
    return kv + b * s * n * spec.p + probabilities


def _label(kind: str, mlp_kind: str) -> str:
    return kind if mlp_kind in {"dense", "none"} else f"{kind}+moe"


def _layer_activation(kind: str, count: int, saved: Saved, tokens: int, working: float, weights: dict[str, float],
                      weight_gradient: float) -> LayerActivation:
    """A layer's per-token terms (and its backward's working set per token) at b·s tokens, the whole weights it saves
    whatever the token count (dequantised, LoRA-merged experts), and a weight-sized gradient its backward builds."""
    terms = {k: round(v * tokens) for k, v in saved.terms.items()}
    terms |= {k: round(v) for k, v in weights.items() if v}
    return LayerActivation(
        kind=kind, count=count, bytes=round(saved.total * tokens) + round(sum(weights.values())), terms=terms,
        attention_core_bytes=round(saved.s2_total * tokens),
        backward_working=round(working * tokens) + round(weight_gradient),
    )


def _with_encoder(spec: ActivationSpec, s: int, tokens: int, layers: list[LayerActivation]) -> list[LayerActivation]:
    """The first decoder layers with a cross-attention block added, and the encoder's layers as copies of them.

    The cross-attention is counted with the plain rules: on a compute-dtype input, uncompiled, K/V as the
    config gives them.
    """
    base = layers[0]
    plain = replace(spec, r=spec.p, compiled=False, repeat_kv=False)
    cross = Saved()
    attention(cross, plain, s, spec.dense, sliding=False)  # per token, exact s
    norm(cross, "cross_norm", plain, spec.arch.hidden_size)
    cross_bytes = round(cross.total * tokens)
    decoder = LayerActivation(base.kind, base.count, base.bytes + cross_bytes,
                              base.terms | {"cross_attention": cross_bytes},
                              base.attention_core_bytes + round(cross.s2_total * tokens), base.backward_working)
    encoder = LayerActivation("encoder", spec.arch.encoder_layers, base.bytes, base.terms, base.attention_core_bytes,
                              base.backward_working)
    return [decoder, *layers[1:], encoder]


def compiled_layer_notes(spec: ActivationSpec, layers: list[LayerActivation]) -> list[str]:
    """What compiling the decoder layers changes, and where that rule is not validated."""
    if not spec.compiled:
        return []
    notes = [("compiled decoder layers: norms keep input and rstd, activation functions and eager attention's fp32 "
              "softmax are recomputed in backward (inductor's min-cut partitioner)")]
    if any(layer.kind == "mamba" for layer in layers) or spec.traits.sandwich_norms:
        notes.append("compiled layers: sandwich norms and mamba mixers are counted with the generic rule "
                     "(not validated)")
    return notes
