"""The precision table: every dtype's record is what the estimate's bytes, notes and summaries read."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tiny_models import reference_model

from hfmem.compute.flops import forward_flops
from hfmem.constants import DEFAULT_SEQ_LEN
from hfmem.errors import InvalidInputError
from hfmem.github.action import Inputs, settings_line
from hfmem.hardware.gpus import catalogue, find_gpu
from hfmem.memory.estimate import Context, estimate, rule_of_thumb
from hfmem.memory.gpu_defaults import matrix_gpus
from hfmem.memory.lowprecision import RECIPES
from hfmem.memory.precision import PRECISIONS, precision
from hfmem.memory.settings import DTYPES, TrainingSettings
from hfmem.reporting.timing import float8_gather_share, flops_of, matmul_dtype, step_for

LLAMA = reference_model("meta-llama/Llama-2-7b-hf")
N = LLAMA[1].total


def test_every_dtype_has_one_record_under_its_name() -> None:
    assert set(DTYPES) == set(PRECISIONS)
    for name, record in PRECISIONS.items():
        assert record.name == name and precision(name) is record


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_full_fine_tune_holds_weights_and_gradients_at_the_records_bytes(dtype: str) -> None:
    est = estimate(*LLAMA, TrainingSettings(dtype=dtype, optimizer="sgd"))
    p, b = precision(dtype), est.per_gpu_bytes
    assert b.weights == p.weight_bytes * N and b.gradients == p.gradient_bytes * N
    assert b.master_weights == (4 * N if p.master_copy else 0)
    assert (b.autocast_weight_copies > 0) == p.weight_copies
    assert est.assumptions["compute_bytes"] == p.compute_bytes


def test_only_autocast_over_fp32_weights_copies_them() -> None:
    assert {name for name, p in PRECISIONS.items() if p.weight_copies} == {"amp-bf16", "amp-fp16"}
    assert {name for name, p in PRECISIONS.items() if p.residual_bytes > p.compute_bytes} == {"amp-bf16", "amp-fp16"}


@pytest.mark.parametrize("dtype", ["bf16", "amp-bf16", "fp32"])
def test_rule_of_thumb_counts_the_frozen_base_as_stored(dtype: str) -> None:
    """The seed-rule comparison counts LoRA's frozen base at the stored weight bytes (4 under AMP, not 2)."""
    est = estimate(*LLAMA, TrainingSettings(method="lora", dtype=dtype))
    b = est.per_gpu_bytes
    state = b.weights + b.gradients + b.optimizer
    assert rule_of_thumb(est)["model_state_gib"] == round(state / 2**30, 2)


def test_the_mixed_precision_note_follows_the_master_copy() -> None:
    noted = {d for d in DTYPES if any(n.startswith("mixed precision") for n in estimate(
        *LLAMA, TrainingSettings(dtype=d)).notes)}
    assert noted == {name for name, p in PRECISIONS.items() if p.master_copy}


def test_the_actions_settings_line_names_the_precision() -> None:
    inputs = Inputs(models=["a/b"], config_globs=[], gpus=["H100 80GB"], methods=["full"], seq_len=None,
                    batch_size=1, token="", hf_token="", fail_on=[])
    assert f" · {TrainingSettings().precision.label} · " in settings_line(inputs)
    assert f"sequence length {DEFAULT_SEQ_LEN:,} " in settings_line(inputs)


DECODER = [g for g in LLAMA[1].linears if g.component != "head"]
DECODER_WEIGHTS = sum(g.count * g.in_features * g.out_features for g in DECODER)


@pytest.mark.parametrize("dtype", sorted(RECIPES))
def test_a_recipe_adds_its_weight_copies_and_scaling_state_to_bf16_mixed_precision(dtype: str) -> None:
    """Weights, gradients, master weights and states are bf16 mixed precision's; the quantized copies cover the
    decoder's linear weights (not the head) at the recipe's bytes; only delayed scaling keeps amax histories: 5
    quantizers per GEMM of history_len + 1 fp32 values (amaxes and the scale)."""
    r = RECIPES[dtype]
    bf16 = estimate(*LLAMA, TrainingSettings(dtype="bf16")).per_gpu_bytes
    b = estimate(*LLAMA, TrainingSettings(dtype=dtype, fp8_amax_history_len=16)).per_gpu_bytes
    assert (b.weights, b.gradients, b.optimizer) == (bf16.weights, bf16.gradients, bf16.optimizer)
    assert b.quantized_weight_copies == round(r.weight_copy_bytes * DECODER_WEIGHTS)
    gemms = sum(g.count for g in DECODER)
    assert b.scaling_state == (5 * gemms * 17 * 4 if dtype == "fp8-te" else 0)
    if r.weight_copy_bytes:  # the copies outweigh what the quantized inputs save
        assert b.total > bf16.total and b.activations < bf16.activations
    else:  # torchao: bf16 mixed precision's figures throughout
        assert b == bf16


@pytest.mark.parametrize("dtype", ["fp8-te", "fp8-te-current", "mxfp8", "nvfp4"])
def test_fp8_params_keep_the_decoder_linears_only_as_their_quantized_copies(dtype: str) -> None:
    """TE's quantized_model_init holds only the quantized copies (quantization.py lines 878-905 at d0067d0): the
    decoder linears' bf16 weights (2 bytes each) are gone, their copies, gradients and fp32 master copy stay."""
    plain = estimate(*LLAMA, TrainingSettings(dtype=dtype)).per_gpu_bytes
    b = estimate(*LLAMA, TrainingSettings(dtype=dtype, fp8_params=True)).per_gpu_bytes
    assert plain.weights - b.weights == 2 * DECODER_WEIGHTS
    assert (b.quantized_weight_copies, b.gradients, b.master_weights) == (
        plain.quantized_weight_copies, plain.gradients, plain.master_weights)


@pytest.mark.parametrize("dtype", ["bf16", "fp8-torchao"])
def test_fp8_params_need_a_transformer_engine_recipe(dtype: str) -> None:
    with pytest.raises(InvalidInputError, match="fp8_params needs"):
        TrainingSettings(dtype=dtype, fp8_params=True).validated()


def test_a_bf16_optimizer_keeps_bf16_moments_and_no_master_copy_of_bf16_weights() -> None:
    """Apex DistributedFusedAdam with dtype bf16 over bf16 weights (NeMo: store_params False,
    megatron_base_model.py lines 802-807 at 8e3d65d): AdamW's two moments at 2 bytes, no master copy; over
    fp8_params weights a bf16 copy of every weight (store_params True, line 805)."""
    fp32 = estimate(*LLAMA, TrainingSettings(dtype="bf16")).per_gpu_bytes
    b = estimate(*LLAMA, TrainingSettings(dtype="bf16", optimizer_dtype="bf16")).per_gpu_bytes
    assert (b.master_weights, b.optimizer_states, fp32.optimizer_states) == (0, 4 * N, 8 * N)
    assert (b.weights, b.gradients) == (fp32.weights, fp32.gradients)
    fp8 = estimate(*LLAMA, TrainingSettings(dtype="fp8-te", optimizer_dtype="bf16", fp8_params=True)).per_gpu_bytes
    assert (fp8.master_weights, fp8.optimizer_states) == (2 * N, 4 * N)


def test_master_remainders_keep_two_bytes_of_each_fp32_master_weight() -> None:
    """Apex's store_param_remainders: an int16 remainder per bf16 weight (distributed_fused_adam.py line 462 at
    f9f19d5) in place of the fp32 master copy; the moments stay fp32."""
    fp32 = estimate(*LLAMA, TrainingSettings(dtype="bf16")).per_gpu_bytes
    b = estimate(*LLAMA, TrainingSettings(dtype="bf16", master_remainders=True)).per_gpu_bytes
    assert (fp32.master_weights, b.master_weights, b.optimizer_states) == (4 * N, 2 * N, fp32.optimizer_states)


def test_master_remainders_need_bf16_weights_not_fp8_params() -> None:
    with pytest.raises(InvalidInputError, match="master_remainders needs bf16 weights"):
        TrainingSettings(dtype="fp8-te", fp8_params=True, master_remainders=True).validated()


@pytest.mark.parametrize("dtype", ["fp32", "bf16-pure", "fp16", "amp-bf16"])
def test_a_bf16_optimizer_needs_bf16_weights_it_can_update(dtype: str) -> None:
    with pytest.raises(InvalidInputError, match="optimizer_dtype bf16 needs"):
        TrainingSettings(dtype=dtype, optimizer_dtype="bf16").validated()


@pytest.mark.parametrize("dtype", sorted(RECIPES))
def test_a_recipe_saves_the_decoder_linears_inputs_at_its_bytes(dtype: str) -> None:
    """Llama under FlashAttention: q/k/v's and gate/up's normed inputs and down's input are stored at the recipe's
    bytes instead of bf16's 2, and o_proj keeps a quantized copy beside the kernel's bf16 output (heads x head_dim =
    hidden): per layer and token (2 - q)(2h + ffn) - q·h fewer bytes; torchao saves bf16 inputs, no change."""
    arch = LLAMA[0]
    tokens, h, ffn = DEFAULT_SEQ_LEN, arch.hidden_size, arch.intermediate_size
    bf16 = estimate(*LLAMA, TrainingSettings(dtype="bf16")).activations.stored
    stored = estimate(*LLAMA, TrainingSettings(dtype=dtype)).activations.stored
    q = RECIPES[dtype].input_bytes
    saved = 0 if q is None else arch.num_layers * tokens * ((2 - q) * (2 * h + ffn) - q * h)
    assert bf16 - stored == pytest.approx(saved, rel=1e-9, abs=arch.num_layers)


def test_a_recipe_applies_to_a_full_fine_tune_only() -> None:
    lora = estimate(*LLAMA, TrainingSettings(method="lora", dtype="fp8-te"))
    assert lora.per_gpu_bytes == estimate(*LLAMA, TrainingSettings(method="lora", dtype="bf16")).per_gpu_bytes
    assert any("bf16 mixed precision's" in n for n in lora.notes)
    assert matmul_dtype(lora.settings) == "bf16"
    assert [matmul_dtype(TrainingSettings(dtype=d).validated()) for d in ("fp8-te", "mxfp8", "nvfp4", "bf16")] == [
        "fp8", "fp8", "fp4", "bf16"]


def test_a_gpu_without_the_recipes_matmuls_is_a_one_line_error() -> None:
    fp8, fp4 = TrainingSettings(dtype="fp8-torchao").validated(), TrainingSettings(dtype="nvfp4").validated()
    with pytest.raises(InvalidInputError, match="A100 80GB has none"):
        matrix_gpus(fp8, (find_gpu("a100"), find_gpu("h100")))
    with pytest.raises(InvalidInputError, match="H100 80GB, MI300X 192GB have none"):
        matrix_gpus(fp4, (find_gpu("h100"), find_gpu("mi300x")))
    assert matrix_gpus(fp4, (find_gpu("b200"),)) == (find_gpu("b200"),)
    default = matrix_gpus(fp8, ())
    assert find_gpu("h100") in default and find_gpu("a100") not in default and find_gpu("t4") not in default
    assert [g.name for g in matrix_gpus(fp4, ())] == [g.name for g in catalogue() if g.arch == "blackwell"]
    assert matrix_gpus(TrainingSettings().validated(), ()) == catalogue()


def test_a_recipe_saves_the_routed_experts_inputs_quantized_too() -> None:
    """Mixtral: each token's k routed copies keep the experts' gate/up input and down input at the recipe's byte
    (TE's GroupedLinear quantizes its inputs as Linear does); the MLP's normed input stays bf16, since the bf16
    router reads it too: per layer and token (2 - 1)(h + k(h + ffn)) - h (o_proj's copy) fewer bytes for fp8-te."""
    mixtral = reference_model("mistralai/Mixtral-8x7B-v0.1")
    arch = mixtral[0]
    h, ffn, k = arch.hidden_size, arch.intermediate_size, arch.experts_per_token
    bf16 = estimate(*mixtral, TrainingSettings(dtype="bf16")).activations.stored
    fp8 = estimate(*mixtral, TrainingSettings(dtype="fp8-te")).activations.stored
    per_token = (h + k * (h + ffn)) - h
    assert bf16 - fp8 == pytest.approx(arch.num_layers * DEFAULT_SEQ_LEN * per_token, abs=arch.num_layers)


def test_float8_all_gather_gathers_the_decoder_linears_at_one_byte() -> None:
    """fp8-torchao with FSDP2's float8 all-gather: two gathered Llama-2-7B layers hold their linear weights (4·h² +
    3·h·ffn each) at 1 byte instead of 2, and the all-gathers move the decoder linears' half of the bytes less."""
    arch = LLAMA[0]
    h, ffn = arch.hidden_size, arch.intermediate_size
    fsdp = TrainingSettings(dtype="fp8-torchao", num_gpus=8, sharding="fsdp_full_shard")
    plain, gathered = estimate(*LLAMA, fsdp), estimate(*LLAMA, replace(fsdp, fp8_all_gather=True))
    saved = plain.per_gpu_bytes.sharding_buffers - gathered.per_gpu_bytes.sharding_buffers
    assert saved == pytest.approx(2 * (4 * h * h + 3 * h * ffn), rel=1e-5)
    assert plain.per_gpu_bytes.weights == gathered.per_gpu_bytes.weights  # the shards stay bf16
    assert float8_gather_share(plain) == 1.0
    assert float8_gather_share(gathered) == pytest.approx(1 - DECODER_WEIGHTS / N / 2)
    ddp = replace(fsdp, sharding="ddp", fp8_all_gather=True)
    assert estimate(*LLAMA, ddp).per_gpu_bytes == estimate(*LLAMA, replace(ddp, fp8_all_gather=False)).per_gpu_bytes
    with pytest.raises(InvalidInputError, match="fp8_all_gather needs dtype fp8-torchao"):
        replace(fsdp, dtype="fp8-torchao-rowwise", fp8_all_gather=True).validated()


def test_te_copies_under_sharding_follow_what_te_saves() -> None:
    """FSDP full shard is FSDP2 to TE (is_fsdp2): no copy is saved, so two gathered layers' copies are alive; DeepSpeed
    ZeRO-3 has no TE handling and every rank keeps the whole copies for its backward."""
    layer = Context(*LLAMA).layer_parameters
    copies = 2.0 * DECODER_WEIGHTS
    fsdp = estimate(*LLAMA, TrainingSettings(dtype="fp8-te", num_gpus=8, sharding="fsdp_full_shard"))
    zero3 = estimate(*LLAMA, TrainingSettings(dtype="fp8-te", num_gpus=8, sharding="zero3"))
    assert fsdp.per_gpu_bytes.quantized_weight_copies == round(copies * 2 * layer / N)
    assert zero3.per_gpu_bytes.quantized_weight_copies == round(copies)


def test_a_recipe_runs_its_quantized_linears_at_its_cited_gemm_speedup_and_the_rest_at_bf16() -> None:
    """Under a recipe the decoder's linears (3 passes each, plus their recompute) run the recipe's GEMM speedup over
    bf16 on the GPU's architecture (TE's benchmark: delayed scaling 1.69x on Hopper, 1.61x on Blackwell, NVFP4
    2.03x), the attention core and the head at bf16's rate: the compute terms shrink by 1 / (f / S + 1 - f)."""
    def step(dtype: str, gpu: str) -> dict:
        est = estimate(*LLAMA, TrainingSettings(dtype=dtype, gradient_checkpointing="full"))
        return step_for(est, flops_of(*LLAMA, est), find_gpu(gpu), LLAMA[0])

    flops = flops_of(*LLAMA, estimate(*LLAMA, TrainingSettings(gradient_checkpointing="full")))
    forward = forward_flops(*LLAMA, DEFAULT_SEQ_LEN)
    layer_linears = sum(v for k, v in forward.linears.items() if k not in {"head", "other", "router"})
    assert 0 < layer_linears < forward.linear and flops.quantized == pytest.approx(4 * layer_linears)
    for dtype, gpu, speedup in (("fp8-te", "h100", 1.69), ("fp8-te", "b200", 1.61), ("nvfp4", "b200", 2.03),
                                ("fp8-te-current", "h100", 1.57)):
        bf16, low = step("bf16", gpu), step(dtype, gpu)
        share = low["low_precision"]["quantized_share"]
        assert low["low_precision"]["gemm_speedup"] == speedup and share == pytest.approx(
            flops.quantized / flops.hardware, rel=1e-3)
        for term in ("compute_forward", "compute_backward"):
            assert bf16["terms"][term] / low["terms"][term] == pytest.approx(1 / (share / speedup + 1 - share),
                                                                            rel=1e-3)
    assert "low_precision" not in step("bf16", "h100")
