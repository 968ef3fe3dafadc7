"""Model state bytes per parameter, sharding, offload and LoRA parameter counts."""

from __future__ import annotations


import pytest

from tiny_models import reference_model

from hfmem.memory.estimate import estimate
from hfmem.model.meta import build_inventory
from hfmem.memory.model_state import lora_parameters, lora_targets
from hfmem.memory.settings import TrainingSettings





LLAMA = reference_model("meta-llama/Llama-2-7b-hf")
N = LLAMA[1].total


def _state(**kw) -> dict:
    return estimate(*LLAMA, TrainingSettings(**kw)).to_dict()["per_gpu_bytes"]


@pytest.mark.parametrize(("dtype", "optimizer", "weights", "grads", "optimizer_bytes"), [
    ("bf16", "adamw", 2, 2, 12),             # ZeRO accounting: fp32 master + two fp32 moments
    ("fp16", "adamw", 2, 2, 12),
    ("bf16-pure", "adamw", 2, 2, 4),         # moments in bf16, no master copy
    ("fp32", "adamw", 4, 4, 8),
    ("amp-bf16", "adamw", 4, 4, 8),          # autocast over fp32 weights
    ("bf16", "sgd", 2, 2, 4),                # master copy only
    ("bf16", "sgd_momentum", 2, 2, 8),
    ("bf16", "lion", 2, 2, 8),
    ("bf16-pure", "lion", 2, 2, 2),
    ("bf16", "adamw_8bit", 2, 2, 4 + 2 + 8 / 256),
    ("bf16", "paged_adamw_8bit", 2, 2, 4 + 2 + 8 / 256),
])
def test_bytes_per_parameter(dtype: str, optimizer: str, weights: float, grads: float, optimizer_bytes: float) -> None:
    b = _state(dtype=dtype, optimizer=optimizer)
    assert b["weights"] == pytest.approx(weights * N, rel=1e-6)
    assert b["gradients"] == pytest.approx(grads * N, rel=1e-6)
    assert b["optimizer"] == pytest.approx(optimizer_bytes * N, rel=1e-6)


def test_adafactor_factors_the_second_moment() -> None:
    b = _state(dtype="bf16-pure", optimizer="adafactor")
    assert 0 < b["optimizer"] < 0.01 * 4 * N  # rows + columns per matrix instead of one value per weight


def test_paged_states_live_outside_the_allocator() -> None:
    b = _state(dtype="bf16", optimizer="paged_adamw_8bit")
    assert b["paged_optimizer"] == b["optimizer_states"]
    assert b["required"] == b["total"] - b["paged_optimizer"]


def test_foreach_adamw_needs_one_more_moment_at_the_step() -> None:
    fused, foreach = _state(dtype="bf16-pure", optimizer="adamw"), _state(dtype="bf16-pure", optimizer="adamw_foreach")
    assert foreach["optimizer_step_transient"] == pytest.approx(2 * N, rel=1e-6)
    assert foreach["total"] > fused["total"]


def test_sharding_shrinks_the_right_terms() -> None:
    ddp, z1, z2, z3 = (_state(num_gpus=8, sharding=s) for s in ("ddp", "zero1", "zero2", "zero3"))
    assert ddp["sharding_buffers"] == ddp["gradients"]  # DDP buckets copy the gradients
    assert z1["weights"] == ddp["weights"] and z1["gradients"] == ddp["gradients"]
    assert z1["optimizer"] == pytest.approx(ddp["optimizer"] / 8, rel=1e-6)
    assert z2["gradients"] == pytest.approx(ddp["gradients"] / 8, rel=1e-6)
    assert z3["weights"] == pytest.approx(ddp["weights"] / 8, rel=1e-6)
    assert z3["sharding_buffers"] > z2["sharding_buffers"]  # gathered parameters
    fsdp = _state(num_gpus=8, sharding="fsdp")
    assert fsdp["weights"] == z3["weights"] and fsdp["sharding_buffers"] > 0
    assert ddp["total"] > z1["total"] > z2["total"] > z3["total"]


def test_offload_moves_state_to_the_cpu() -> None:
    settings = TrainingSettings(num_gpus=2, sharding="zero3", offload_optimizer=True, offload_params=True)
    est = estimate(*LLAMA, settings).to_dict()
    b = est["per_gpu_bytes"]
    assert b["optimizer"] == 0 and b["weights"] == 0
    assert est["cpu_bytes"] > 12 * N / 2


def test_optimizer_in_backward_keeps_one_gradient() -> None:
    b = _state(dtype="bf16-pure", optimizer_in_backward=True)
    assert b["gradients"] == 2 * 32000 * 4096  # the largest tensor: the embedding / head matrix


def test_lora_all_linear_is_every_linear_but_the_head() -> None:
    arch, inventory = LLAMA
    groups = lora_targets(inventory, ("all-linear",))
    assert {g.name for g in groups} == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    per_layer = 4 * (4096 + 4096) + 3 * (4096 + 11008)
    assert lora_parameters(groups, 16) == 16 * per_layer * 32


def test_lora_targets_that_match_nothing_are_refused_like_peft() -> None:
    """PEFT raises "Target modules ... not found in the base model"; a count of 0 trainable parameters is no answer."""
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from saved_activations import build_model
    from tiny_models import tiny_config

    from hfmem.errors import InvalidInputError

    config = tiny_config("stabilityai/stablelm-base-alpha-3b", 2)
    with pytest.raises(ValueError, match="not found"):
        peft.get_peft_model(build_model(config, "eager", torch.float32),
                            peft.LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
    with pytest.raises(InvalidInputError, match="match no linear layer.*query_key_value"):
        lora_targets(build_inventory(config), ("q_proj", "v_proj"))


@pytest.mark.parametrize(("model_id", "targets"), [
    ("meta-llama/Meta-Llama-3-8B", ["q_proj", "v_proj"]),
    ("meta-llama/Meta-Llama-3-8B", "all-linear"),
    ("openai-community/gpt2", ["c_attn"]),
    ("microsoft/phi-2", "all-linear"),
    ("tiiuae/falcon-7b", ["query_key_value", "dense"]),
])
def test_lora_parameter_count_equals_peft(model_id: str, targets) -> None:
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from saved_activations import build_model
    from tiny_models import tiny_config

    config = tiny_config(model_id, 2)
    model = build_model(config, "eager", torch.float32)
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules=targets))
    peft_trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    inventory = build_inventory(config)
    names = ("all-linear",) if targets == "all-linear" else tuple(targets)
    assert lora_parameters(lora_targets(inventory, names), 8) == peft_trainable


def test_nf4_without_double_quant_keeps_an_fp32_absmax_per_64_weights() -> None:
    """bitsandbytes.functional.quantize_4bit(compress_statistics=False) (lightning's _NF4Linear, LitGPT bnb.nf4)
    keeps a float32 absmax per 64-weight block; double quantisation stores it in 8 bits (+ fp32 per 256 blocks)."""
    dq = estimate(*LLAMA, TrainingSettings(method="qlora"))
    plain = estimate(*LLAMA, TrainingSettings(method="qlora", qlora_double_quant=False))
    quantized = dq.split.frozen_quantized
    extra = plain.to_dict()["per_gpu_bytes"]["weights"] - dq.to_dict()["per_gpu_bytes"]["weights"]
    assert extra == pytest.approx(quantized * (4 / 64 - 1 / 64 - 4 / (64 * 256)), rel=1e-6)
    assert plain.to_dict()["assumptions"]["quantization"]["double_quant"] is False


def test_a_quantized_head_is_stored_in_nf4_and_dequantized_whole() -> None:
    """LitGPT's QLoRA quantises every nn.Linear, lm_head included (transformers keeps it in 16 bits): the
    head's 32000 x 4096 weights move to NF4, and it becomes the largest matrix dequantised at a time."""
    arch, inventory = LLAMA
    head = 32000 * 4096
    assert arch.vocab_size * arch.hidden_size == head
    kept = estimate(*LLAMA, TrainingSettings(method="qlora"))
    quantized = estimate(*LLAMA, TrainingSettings(method="qlora", quantize_head=True))
    assert quantized.split.frozen_quantized - kept.split.frozen_quantized == head
    saved = kept.per_gpu_bytes.weights - quantized.per_gpu_bytes.weights
    assert saved == pytest.approx(head * (2 - 0.5 - 0.127 / 8), rel=1e-3)
    assert quantized.activations.dequant_workspace == 2 * head
    assert kept.activations.dequant_workspace == 2 * 11008 * 4096  # the largest MLP matrix


def test_fsdp_embeddings_as_units_of_their_own_gather_one_at_a_time() -> None:
    """torchtune's custom_sharded_layers make tok_embeddings and output FSDP units of their own: instead of the
    root unit (embeddings and head, 2 x 32000 x 4096 for Llama-2-7B) held for the whole step, one of them is
    gathered while in use: one 32000 x 4096 bf16 matrix less."""
    base = dict(method="full", dtype="bf16-pure", sharding="fsdp_full_shard", num_gpus=8)
    root = estimate(*LLAMA, TrainingSettings(**base)).per_gpu_bytes.sharding_buffers
    own = estimate(*LLAMA, TrainingSettings(**base, fsdp_wrap_embeddings=True)).per_gpu_bytes.sharding_buffers
    assert root - own == 2 * 32000 * 4096


@pytest.mark.parametrize(("sharding", "per_param"), [("ddp", 18), ("zero1", 6 + 12 / 8)])
def test_megatron_fp32_gradient_buffer(sharding: str, per_param: float) -> None:
    """Megatron-LM's bytes per parameter (megatron/training/theoretical_memory_usage.py#L296 at d98e8a6: 18, or
    6 + 12/DP with the distributed optimizer): bf16 weights, an fp32 main_grad buffer the reduction works in, and
    fp32 master weights and moments; the buffer is no extra DDP copy or reduce bucket and ZeRO-1 keeps it whole."""
    b = _state(num_gpus=8, sharding=sharding, grad_dtype="fp32", grad_bucket_view=True)
    assert b["gradients"] == 4 * N and b["sharding_buffers"] == 0 and b["optimizer_step_transient"] == 0
    assert b["gradient_activation_overlap"] == 0  # the buffer is allocated once: alive beside the activations
    assert b["weights"] + b["gradients"] + b["optimizer"] == pytest.approx(per_param * N, rel=1e-6)
    torch_ddp = _state(num_gpus=8, sharding=sharding, grad_dtype="fp32")  # the same gradients in torch's buckets
    assert torch_ddp["sharding_buffers"] == (4 * N if sharding == "ddp" else 4 * 4096 ** 2)


def test_grad_dtype_fp32_gradients_shard_under_zero2() -> None:
    z2 = _state(num_gpus=8, sharding="zero2", grad_dtype="fp32")
    assert z2["gradients"] == pytest.approx(4 * N / 8, rel=1e-6)
    assert _state(grad_dtype="fp32", dtype="fp32")["gradients"] == _state(dtype="fp32")["gradients"] == 4 * N
