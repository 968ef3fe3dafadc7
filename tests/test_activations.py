"""hfmem's activation model against real forward passes of scaled-down real architectures on CPU.

Each tiny model (tests/tiny_models.py) runs forward + loss in training mode under
saved_tensors_hooks; the bytes of unique non-parameter storages saved for backward are compared
with hfmem's prediction, per layer (2-layer minus 1-layer model) and in total (loss included).
bf16 unless stated. On CPU the dropout mask is kept in the masked tensor's dtype (CUDA keeps a
bool), so predictions use dropout_mask_bytes=None; SDPA's backend is read from torch
(_fused_sdp_choice) and a math fallback is predicted as the "sdpa_math" kernel.
"""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from saved_activations import build_model, saved_bytes  # noqa: E402
from tiny_models import TINY, tiny_config  # noqa: E402

from hfmem.memory.activations import ActivationSettings, Trainability, estimate_activations  # noqa: E402
from hfmem.model.architecture import read_architecture  # noqa: E402
from hfmem.model.meta import build_inventory  # noqa: E402
from hfmem.memory.model_state import parameter_split  # noqa: E402
from hfmem.memory.settings import TrainingSettings  # noqa: E402

B, S = 2, 128
TOLERANCE = 0.05
MODELS = list(TINY)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


@functools.lru_cache(maxsize=None)
def _measured(model_id: str, attention: str, layers: int, dtype: str, checkpointing: bool = False,
              seed: int = 0) -> tuple[int, tuple[int, ...]]:
    model = build_model(tiny_config(model_id, layers), attention, DTYPES[dtype])
    total, backends = saved_bytes(model, B, S, checkpointing=checkpointing, seed=seed)
    return total, tuple(backends)


@functools.lru_cache(maxsize=None)
def _arch(model_id: str, layers: int = 2):
    config = tiny_config(model_id, layers)
    return read_architecture(config), build_inventory(config)


def _kernel(attention: str, backends: tuple[int, ...]) -> str:
    if attention == "sdpa" and backends and all(b == 0 for b in backends):
        return "sdpa_math"  # torch picked the math backend (broadcast MQA, differing head dims, dropout)
    return attention


def _predict(model_id: str, kernel: str, dtype: str, checkpointing: str = "off", layers: int = 2, **kw):
    arch, inventory = _arch(model_id, layers)
    return estimate_activations(arch, inventory, ActivationSettings(
        micro_batch_size=B, seq_len=S, compute_bytes=4 if dtype == "fp32" else 2,
        attention=kernel, gradient_checkpointing=checkpointing, dropout_mask_bytes=None, **kw))


def _close(predicted: float, measured: float) -> bool:
    return abs(predicted / measured - 1) <= TOLERANCE


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("model_id", MODELS)
def test_layer_and_total_match_a_real_forward_pass(model_id: str, attention: str) -> None:
    one, _ = _measured(model_id, attention, 1, "bf16")
    two, backends = _measured(model_id, attention, 2, "bf16")
    kernel = _kernel(attention, backends)
    est = _predict(model_id, kernel, "bf16")
    per_layer_measured = two - one
    per_layer_predicted = est.layers[-1].bytes  # the second layer's kind (DeepSeek: its first MoE layer)
    assert _close(per_layer_predicted, per_layer_measured), (model_id, kernel, per_layer_predicted, per_layer_measured)
    assert _close(est.stored, two), (model_id, kernel, est.stored, two)


@pytest.mark.parametrize("model_id", ["meta-llama/Meta-Llama-3-8B", "openai-community/gpt2", "deepseek-ai/DeepSeek-V3", "google/gemma-2b"])
def test_fp32_matches(model_id: str) -> None:
    one, _ = _measured(model_id, "eager", 1, "fp32")
    two, _ = _measured(model_id, "eager", 2, "fp32")
    est = _predict(model_id, "eager", "fp32")
    assert _close(est.layers[-1].bytes, two - one)
    assert _close(est.stored, two)


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("model_id", ["meta-llama/Meta-Llama-3-8B", "mistralai/Mixtral-8x7B-v0.1", "google/gemma-2b",
                                      "microsoft/phi-2", "openai-community/gpt2", "tiiuae/falcon-7b"])
def test_full_checkpointing_keeps_layer_inputs(model_id: str, attention: str) -> None:
    one, _ = _measured(model_id, attention, 1, "bf16", True)
    two, backends = _measured(model_id, attention, 2, "bf16", True)
    est = _predict(model_id, _kernel(attention, backends), "bf16", "full")
    assert _close(est.checkpoint_inputs / 2, two - one)
    assert _close(est.stored, two)
    # and checkpointing really is the saving it claims against the same model without it
    assert two < _measured(model_id, attention, 2, "bf16")[0] / 2


def test_moe_routing_is_data_dependent_but_routed_tokens_are_b_s_k() -> None:
    """Different routings (seeds) save the same bytes: the routed copies always total b·s·k tokens."""
    model_id = "mistralai/Mixtral-8x7B-v0.1"
    first = _measured(model_id, "sdpa", 2, "bf16", False, 0)[0]
    second = _measured(model_id, "sdpa", 2, "bf16", False, 1)[0]
    est = _predict(model_id, "sdpa", "bf16")
    assert _close(est.stored, first) and _close(est.stored, second)
    assert abs(first - second) / first < 0.001


def test_autocast_over_fp32_weights() -> None:
    """AMP: fp32 residual stream, each linear casting its own copy, 16-bit weight copies kept for backward.

    Llama's code fixes the softmax dtype itself, so CPU and CUDA autocast agree on it (CUDA autocast
    also forces softmax/layer_norm/pow to fp32 in other families; CPU autocast does not)."""
    model_id = "meta-llama/Meta-Llama-3-8B"
    measured = {}
    for layers in (1, 2):
        model = build_model(tiny_config(model_id, layers), "sdpa", torch.float32)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            measured[layers] = saved_bytes(model, B, S)[0]
    arch, inventory = _arch(model_id)
    est = estimate_activations(arch, inventory, ActivationSettings(
        micro_batch_size=B, seq_len=S, compute_bytes=2, residual_bytes=4, attention="sdpa", dropout_mask_bytes=None))
    copies = parameter_split(arch, inventory, TrainingSettings()).matmul_parameters * 2
    assert _close(est.stored + copies, measured[2])


# ---------------------------------------------------------------------------------------------
# LoRA through PEFT itself: frozen base, fp32 adapters (PEFT's default), pure bf16 model, no autocast


def _lora_names(inventory, targets) -> frozenset[str]:
    if targets == "all-linear":
        return frozenset(g.name for g in inventory.linears if g.kind in {"linear", "conv1d"} and g.component != "head")
    return frozenset(targets)


_LORA_CASES = [
    ("meta-llama/Meta-Llama-3-8B", ("q_proj", "v_proj")),
    ("meta-llama/Meta-Llama-3-8B", "all-linear"),
    ("mistralai/Mixtral-8x7B-v0.1", ("q_proj", "k_proj", "v_proj", "o_proj")),
    ("microsoft/phi-2", ("q_proj", "v_proj")),
    ("microsoft/phi-2", "all-linear"),
    ("openai-community/gpt2", ("c_attn",)),
    ("tiiuae/falcon-7b", ("query_key_value",)),
    ("deepseek-ai/DeepSeek-V3", ("q_b_proj", "kv_b_proj")),
]


@pytest.mark.parametrize(("model_id", "targets"), _LORA_CASES)
def test_lora_frozen_path_matches_peft(model_id: str, targets) -> None:
    peft = pytest.importorskip("peft")
    measured = {}
    for layers in (1, 2):
        model = build_model(tiny_config(model_id, layers), "sdpa", torch.bfloat16)
        config = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                 target_modules=targets if isinstance(targets, str) else list(targets))
        wrapped = peft.get_peft_model(model, config)
        wrapped.train()
        measured[layers], backends = saved_bytes(wrapped.base_model.model, B, S)
    arch, inventory = _arch(model_id)
    trained = Trainability(trainable=frozenset(), lora=_lora_names(inventory, targets), lora_rank=8,
                           adapter_input_bytes=4, adapter_output_bytes=4, input_requires_grad=False)
    est = _predict(model_id, _kernel("sdpa", tuple(backends)), "bf16", trained=trained)
    assert _close(est.layers[-1].bytes, measured[2] - measured[1])
    assert _close(est.stored, measured[2])
    if targets == "all-linear":
        # PEFT's fp32 adapters on a bf16 model (no autocast) keep an fp32 copy of every adapted
        # layer's input: all-linear LoRA then saves more activations than a full fine-tune.
        assert est.stored > _predict(model_id, _kernel("sdpa", tuple(backends)), "bf16").stored


def test_repeated_kv_heads_are_saved_at_the_query_heads_count() -> None:
    """LitGPT expands grouped K/V to every query head and reshapes (a copy) before SDPA; the fused kernel then
    saves K and V at the query heads' count. Seen with saved_tensors_hooks on the same three lines of code."""
    b, s, heads, groups, head_dim = 2, 64, 8, 2, 32
    q = torch.randn(b, heads, s, head_dim, dtype=torch.bfloat16, requires_grad=True)
    kv = [torch.randn(b, groups, 1, s, head_dim, dtype=torch.bfloat16, requires_grad=True) for _ in range(2)]
    saved: dict[int, int] = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        k, v = (x.expand(b, groups, heads // groups, s, head_dim).reshape(b, heads, s, head_dim) for x in kv)
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    expanded = sorted(n for ptr, n in saved.items() if ptr in {k.untyped_storage().data_ptr(), v.untyped_storage().data_ptr()})
    assert expanded == [b * heads * s * head_dim * 2] * 2

    config = tiny_config("meta-llama/Meta-Llama-3-8B", 1)
    arch, inventory = read_architecture(config), build_inventory(config)
    assert (arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim) == (heads, groups, head_dim)
    terms = {flag: estimate_activations(arch, inventory, ActivationSettings(
        micro_batch_size=b, seq_len=s, attention="sdpa", repeat_kv=flag)).layers[0].terms for flag in (False, True)}
    assert terms[True]["attn.k"] == terms[True]["attn.v"] == expanded[0]
    assert terms[False]["attn.k"] == expanded[0] * groups // heads
