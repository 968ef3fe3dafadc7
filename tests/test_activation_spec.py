"""The activation spec as a cache key, and the affine-in-s layer forms the cache keeps."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest

from tiny_models import reference_model

from hfmem.memory.activations import ActivationSettings, Trainability, estimate_activations
from hfmem.memory.activations.layer import attends_sliding, layer, layer_at
from hfmem.memory.activations.spec import activation_spec

MODELS = ("meta-llama/Meta-Llama-3-8B", "mistralai/Mistral-7B-v0.1", "mistralai/Mixtral-8x7B-v0.1",
          "deepseek-ai/DeepSeek-V3", "microsoft/phi-2", "tiiuae/falcon-7b", "openai-community/gpt2",
          "google-bert/bert-large-uncased")
LORA = Trainability(trainable=frozenset(), lora=frozenset({"q_proj", "v_proj", "query_key_value", "c_attn"}),
                    lora_rank=8, input_requires_grad=False)
BASE = ActivationSettings(micro_batch_size=2, seq_len=2048)
# Each of these changes what a layer saves, so a cache shared between them must keep them apart.
VARIANTS = (
    BASE, replace(BASE, attention="eager"), replace(BASE, attention="sdpa"), replace(BASE, attention="sdpa_math"),
    replace(BASE, compute_bytes=4), replace(BASE, residual_bytes=4), replace(BASE, trained=LORA),
    replace(BASE, dropout_mask_bytes=None), replace(BASE, compiled_layers=True), replace(BASE, repeat_kv=True),
    replace(BASE, attention="eager", compiled_layers=True), replace(BASE, trained=LORA, residual_bytes=4),
    replace(BASE, moe_probs_in_activation=True),
)


@functools.cache
def _model(model_id: str):
    return reference_model(model_id)


@pytest.mark.parametrize("model_id", MODELS)
def test_a_shared_cache_gives_what_a_fresh_one_does(model_id: str) -> None:
    """Estimates through one cache kept across settings equal those computed from scratch, in either order."""
    arch, inventory = _model(model_id)
    fresh = [estimate_activations(arch, inventory, v).to_dict() for v in VARIANTS]
    for order in (VARIANTS, VARIANTS[::-1]):
        cache: dict = {}
        shared = {v: estimate_activations(arch, inventory, v, cache=cache).to_dict() for v in order}
        assert [shared[v] for v in VARIANTS] == fresh
    assert len({str(f["per_layer"]) for f in fresh}) > len(VARIANTS) // 2  # the variants do change the layers


@pytest.mark.parametrize("model_id", MODELS)
@pytest.mark.parametrize("attention", ["eager", "sdpa_math", "flash_attention_2"])
def test_cached_layer_forms_are_the_layer_at_any_length(model_id: str, attention: str) -> None:
    """The cache's a + b·s form of each layer equals the layer computed directly at length s, term by term."""
    arch, inventory = _model(model_id)
    for seq_len in (1, 100, 4096, 32768):
        spec = activation_spec(arch, inventory, replace(BASE, seq_len=seq_len, attention=attention))
        for kind, mlp_kind, _ in spec.plan:
            cached = layer_at({}, spec, kind, mlp_kind, seq_len)
            direct = layer(spec, kind, mlp_kind, seq_len, sliding=attends_sliding(arch, kind, seq_len))
            assert cached.terms == pytest.approx(direct.terms, rel=1e-12)
            assert cached.s2_terms == direct.s2_terms


@pytest.mark.parametrize("model_id", ["mistralai/Mixtral-8x7B-v0.1", "deepseek-ai/DeepSeek-V3"])
def test_routing_weights_in_the_activation_keep_no_expert_output(model_id: str) -> None:
    """Megatron-core's weighted SwiGLU keeps (input, weights) only (fused_bias_swiglu.py line 270 at d98e8a6): each MoE
    layer saves top-k copies of the hidden-wide expert output fewer per token, k·p·h bytes; dense layers are unchanged."""
    arch, inventory = _model(model_id)
    plain = estimate_activations(arch, inventory, BASE)
    fused = estimate_activations(arch, inventory, replace(BASE, moe_probs_in_activation=True))
    tokens = BASE.micro_batch_size * BASE.seq_len
    per_layer = arch.experts_per_token * 2 * arch.hidden_size * tokens
    moe_layers = arch.num_layers - arch.num_dense_layers
    assert plain.stored - fused.stored == moe_layers * per_layer
