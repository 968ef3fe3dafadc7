"""Where a model family's transformers code departs from the common decoder layer, as data looked up once per model."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FamilyTraits:
    """The quirks of one family's modeling code that change what its layers save (all off: the common layer)."""

    softmax_in_compute_dtype: bool = False
    """Eager attention takes softmax in the compute dtype (others upcast to fp32 first)."""
    fp32_norm: bool = False
    """Gemma-style RMSNorm: the whole norm runs in fp32, (1 + weight) included."""
    sandwich_norms: bool = False
    """Sandwich norms: four RMSNorms per layer (input, post-attention, pre- and post-feed-forward)."""
    softcap: bool = False
    """Attention logit soft-capping (eager only: one more a·s² tensor) and final logit soft-capping."""
    fp32_router: bool = False
    """DeepSeek's router runs its linear in fp32 on an fp32 copy of the hidden states."""
    routing_weights_in_compute_dtype: bool = False
    """The router casts its top-k weights back to the compute dtype (Qwen2/3-MoE, OLMoE...); the others keep them in
    fp32, so the experts' weighted outputs are fp32 (transformers' grouped_mm experts multiply by them)."""
    embedding_norm: bool = False
    """A LayerNorm right after the embeddings (BERT-style embeddings, BLOOM's word_embeddings_layernorm)."""
    mlm_head: bool = False
    """A masked-LM head transform before the decoder: dense -> activation -> LayerNorm."""
    causal_mask_materialized: bool = False
    """The model always builds the 4-D causal mask (Falcon adds ALiBi onto it: create_causal_mask with
    allow_is_causal_skip=False), so SDPA gets a mask even for unpadded batches (see attention._fused)."""
    one_parallel_dropout: bool = False
    """Falcon's parallel block: one residual dropout over the summed attention and MLP outputs (counted with the
    attention's), not one per branch."""


COMMON = FamilyTraits()

_BERT_STYLE = FamilyTraits(embedding_norm=True, mlm_head=True)
_FP32_ROUTER = FamilyTraits(fp32_router=True)
_GEMMA3 = FamilyTraits(fp32_norm=True, sandwich_norms=True)
_ROUTING_IN_COMPUTE_DTYPE = FamilyTraits(routing_weights_in_compute_dtype=True)
_SOFTMAX_IN_COMPUTE_DTYPE = FamilyTraits(softmax_in_compute_dtype=True)

FAMILIES: dict[str, FamilyTraits] = {
    "albert": _BERT_STYLE,
    "bert": FamilyTraits(softmax_in_compute_dtype=True, embedding_norm=True, mlm_head=True),
    "bloom": FamilyTraits(softmax_in_compute_dtype=True, embedding_norm=True),
    "deberta": _BERT_STYLE,
    "deberta-v2": _BERT_STYLE,
    "deepseek_v2": _FP32_ROUTER,
    "deepseek_v3": _FP32_ROUTER,
    "electra": _BERT_STYLE,
    "falcon": FamilyTraits(causal_mask_materialized=True, one_parallel_dropout=True),
    "gemma": FamilyTraits(fp32_norm=True),
    "gemma2": FamilyTraits(fp32_norm=True, sandwich_norms=True, softcap=True),
    "gemma3": _GEMMA3,
    "gemma3_text": _GEMMA3,
    "glm4_moe": _FP32_ROUTER,
    "gpt2": _SOFTMAX_IN_COMPUTE_DTYPE,
    "gpt_bigcode": _SOFTMAX_IN_COMPUTE_DTYPE,
    "gpt_neo": _SOFTMAX_IN_COMPUTE_DTYPE,
    "gptj": _SOFTMAX_IN_COMPUTE_DTYPE,
    "kimi_k2": _FP32_ROUTER,
    "olmo2": FamilyTraits(sandwich_norms=True),
    "opt": _SOFTMAX_IN_COMPUTE_DTYPE,
    **dict.fromkeys(("cohere2_moe", "ernie4_5_moe", "ernie4_5_vl_moe", "flex_olmo", "jamba", "longcat_flash", "olmoe",
                     "qwen2_moe", "qwen3_5_moe", "qwen3_moe", "qwen3_next", "qwen3_omni_moe", "qwen3_vl_moe"),
                    _ROUTING_IN_COMPUTE_DTYPE),
    "recurrent_gemma": FamilyTraits(fp32_norm=True),
    "roberta": FamilyTraits(softmax_in_compute_dtype=True, embedding_norm=True, mlm_head=True),
    "xlm-roberta": _BERT_STYLE,
}
"""Families whose code departs from the common layer, by config `model_type`."""


def family_traits(model_type: str) -> FamilyTraits:
    """The quirks of a family's modeling code (the common layer's for families not listed)."""
    return FAMILIES.get(model_type, COMMON)
