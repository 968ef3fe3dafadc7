"""What the attention block saves after its normed input, one function per kernel (eager, SDPA math, fused)."""

from __future__ import annotations

from typing import NamedTuple

from hfmem.memory.activations.linears import linear_inputs
from hfmem.memory.activations.norms import norm
from hfmem.memory.activations.ops import mask_bytes
from hfmem.memory.activations.saved import Saved
from hfmem.memory.activations.spec import ActivationSpec
from hfmem.memory.activations.structure import LayerModules

_KEYLESS = frozenset({"q_proj", "v_proj", "query", "value", "q", "v"})
"""Leaf names of input projections that produce queries or values only, never keys."""


class _Heads(NamedTuple):
    """Query heads, K/V heads as the kernel receives them, and the Q/K and V head dims."""

    a: int
    kv: int
    dq: int
    dv: int

    @property
    def rep(self) -> int:
        """Query heads per K/V head."""
        return self.a // self.kv if self.kv else 1


def attention(saved: Saved, spec: ActivationSpec, s: int, mods: LayerModules, *, sliding: bool,
              input_grad: bool = True) -> None:
    """What the attention block saves per token at length s, after the (shared) normed input.

    Under autocast (spec.autocast) torch runs softmax in fp32 whatever the model code asks for; with compiled
    layers torch.compile's partitioner keeps eager attention's raw scores and fp32 row max/sum and recomputes
    the fp32 softmax in backward, and its norms keep input and rstd.
    """
    arch = spec.arch
    mla = arch.mla
    if mla is not None:
        _mla_latents(saved, spec, mods, input_grad)
        heads = _Heads(arch.num_attention_heads, arch.num_attention_heads,
                       mla.qk_nope_head_dim + mla.qk_rope_head_dim, mla.v_head_dim)
    else:
        heads = _Heads(arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim, arch.head_dim)
    if arch.qk_norm:
        for head, n in (("q", heads.a), ("k", heads.kv)):
            norm(saved, f"{head}_norm", spec, n * heads.dq, compiled=spec.compiled)
    o_needed = any(spec.trained.needs_input(m.name) for m in mods.attn_out)
    if spec.kernel == "eager":
        _eager(saved, spec, s, heads, o_needed, q_needed=input_grad or mla is not None or _adapts_keys(spec, mods))
    elif spec.kernel == "sdpa_math":
        _sdpa_math(saved, spec, s, heads, o_needed)
    else:
        _fused(saved, spec, s, heads, o_needed, sliding, mods)
    if o_needed and spec.q is not None:  # the kernel keeps its 16-bit output; o_proj saves its own quantized copy
        saved.add("attn.o_proj_quantized_input", spec.q * heads.a * heads.dv)


def _mla_latents(saved: Saved, spec: ActivationSpec, mods: LayerModules, input_grad: bool) -> None:
    """MLA's low-rank query and key/value latents: their norms and the up-projections' inputs."""
    mla = spec.arch.mla
    assert mla is not None, "called for MLA layers only"
    grad = input_grad or any(m.name in spec.trained.lora for m in mods.attn_in)  # q_a/kv_a outputs need grad?
    if mla.q_lora_rank:
        norm(saved, "q_a_norm", spec, mla.q_lora_rank, compiled=spec.compiled, input_needed=grad)
        linear_inputs(saved, "q_b.input", spec, mla.q_lora_rank, mods.q_b)
    norm(saved, "kv_a_norm", spec, mla.kv_lora_rank, compiled=spec.compiled, input_needed=grad)
    linear_inputs(saved, "kv_b.input", spec, mla.kv_lora_rank, mods.kv_b)


def _adapts_keys(spec: ActivationSpec, mods: LayerModules) -> bool:
    """Whether an adapter or trained weight of the attention's input projections produces the keys (a fused
    q/k/v projection does; a LoRA on q_proj and v_proj only does not)."""
    trained = spec.trained
    return trained.full or any(trained.weight(m.name) and m.name not in _KEYLESS for m in mods.attn_in)


def _eager(saved: Saved, spec: ActivationSpec, s: int, heads: _Heads, o_needed: bool, *, q_needed: bool) -> None:
    """The explicit softmax(QK^T)V: q, k, v and the a·s² attention matrices (softmax, dropout, soft-capping).

    q_needed=False: the keys need no gradient (the first layer of a LoRA without a key adapter), so QK^T's
    backward never needs q and autograd does not keep it.
    """
    a, kv, dq, dv = heads
    p, softcap = spec.p, spec.traits.softcap
    drop = spec.arch.attention_dropout > 0
    softmax_fp32 = spec.softmax_fp32
    k_heads = a if heads.rep > 1 else kv
    if q_needed:
        saved.add("attn.q", p * a * dq)
    saved.add("attn.k", p * k_heads * dq)
    saved.add("attn.v", p * k_heads * dv)
    if softcap:
        saved.add("attn.softcap_tanh", p * a * s, s2=True)
    if softmax_fp32 and p < 4 and spec.compiled and not drop and not softcap:
        saved.add("attn.scores", p * a * s, s2=True)  # QK^T before the fp32 softmax, recomputed from it
        saved.add("attn.row_stats", 8 * a)  # the softmax's fp32 row max and sum
        saved.add("attn.probs", p * a * s, s2=True)
    elif softmax_fp32 and p < 4:
        saved.add("attn.softmax_fp32", 4 * a * s, s2=True)
        if not drop:
            saved.add("attn.probs", p * a * s, s2=True)
    else:
        saved.add("attn.softmax", p * a * s, s2=True)
    if drop:
        saved.add("attn.dropout_mask", mask_bytes(spec.mask_bytes, p) * a * s, s2=True)
        saved.add("attn.probs_dropped", p * a * s, s2=True)
    if o_needed:
        saved.add("attn.out", p * a * dv)  # transpose(1, 2).contiguous() before o_proj


def _sdpa_math(saved: Saved, spec: ActivationSpec, s: int, heads: _Heads, o_needed: bool) -> None:
    """SDPA's math path: fp32 copies of q, k, v and the fp32 attention matrix."""
    # torch >= 2.5 runs SDPA's math path in fp32 for half inputs; q and k are scaled copies,
    # K/V broadcast or repeated to all query heads.
    a, _, dq, dv = heads
    acc = 4
    saved.add("attn.q", acc * a * dq)
    saved.add("attn.k", acc * a * dq)
    saved.add("attn.v", acc * a * dv)
    saved.add("attn.softmax_fp32", acc * a * s, s2=True)
    if spec.arch.attention_dropout > 0:
        saved.add("attn.dropout_mask", mask_bytes(spec.mask_bytes, acc) * a * s, s2=True)
        saved.add("attn.probs_dropped", acc * a * s, s2=True)
    if o_needed:
        saved.add("attn.out", spec.p * a * dv)


def _fused_qkv_rotated(spec: ActivationSpec, mods: LayerModules) -> bool:
    """One linear projects q, k and v (GPT-NeoX, Falcon, Phi-3) and RoPE turns q and k into new tensors, leaving
    V a view of that projection's output. Without RoPE q, k and v are all views and their sum is that output."""
    return len(mods.attn_in) == 1 and spec.arch.mla is None and spec.arch.position_embedding == "rope"


def _fused(saved: Saved, spec: ActivationSpec, s: int, heads: _Heads, o_needed: bool, sliding: bool,
           mods: LayerModules) -> None:
    """flash_attention_2, or sdpa's flash / memory-efficient kernels: q, k, v, the output and its logsumexp.

    SDPA with a mask (padded batches, or a sliding window the sequence reaches): transformers repeats grouped
    K/V to every query head (use_gqa_in_sdpa wants no mask; a single MQA head expands to a stride-0 view, no
    copy) and torch converts the boolean 4-D mask to an additive one in the compute dtype in each call, which
    the memory-efficient kernel keeps for backward.
    """
    a, kv, dq, dv = heads
    p, mla = spec.p, spec.arch.mla
    if spec.kernel == "flash_attention_2":
        if mla is not None and dv != dq:
            _flash_padded_v(saved, p, heads, o_needed)
            return
        k_heads = kv
    else:
        masked = sliding or spec.padding_mask or spec.traits.causal_mask_materialized
        gqa_native = not masked and dq == dv and dq <= 256
        k_heads = kv if (heads.rep == 1 or gqa_native or (masked and kv == 1)) else a
        if masked:
            saved.add("attn.mask", p * s, s2=True)  # (b, 1, s, s): s elements per token
    if spec.repeat_kv and kv > 1:
        k_heads = a  # expanded and reshaped into a copy per query head (MQA's single head stays broadcast)
    saved.add("attn.q", p * a * dq)
    saved.add("attn.k", p * k_heads * dq)
    if k_heads == kv and _fused_qkv_rotated(spec, mods) and not spec.trained.prefix_tokens:
        # V is a view of the one q/k/v projection's output (q and k were rotated into copies), so the kernel's
        # saved V keeps that whole output alive: measured on GPT-NeoX and Falcon's query_key_value under SDPA
        # (a prefix-tuning cache concatenates V into a copy instead)
        saved.add("attn.v_in_qkv_output", p * (a * dq + kv * (dq + dv)))
    else:
        saved.add("attn.v", p * k_heads * dv)
    saved.add("attn.out", p * a * dv)
    saved.add("attn.lse", 4 * a)
    head_major_q = mla is not None or spec.arch.partial_rotary_factor < 1
    if head_major_q and o_needed:
        saved.add("attn.out_copy", p * a * dv)  # head-major output needs a copy before o_proj


def _flash_padded_v(saved: Saved, p: int, heads: _Heads, o_needed: bool) -> None:
    """flash-attn with MLA's V head dim below the Q/K one: V padded up, the output sliced back."""
    a, _, dq, dv = heads
    saved.add("attn.q", p * a * dq)
    saved.add("attn.k", p * a * dq)
    saved.add("attn.v_padded", p * a * dq)  # transformers pads V to the QK head dim
    saved.add("attn.out", p * a * dq)
    saved.add("attn.lse", 4 * a)
    if o_needed:
        saved.add("attn.out_sliced", p * a * dv)
