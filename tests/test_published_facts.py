"""Published memory facts reproduced by hfmem's own functions (not by a copy of the formula)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tiny_models import reference_config, reference_model

from hfmem.memory.activations import ActivationSettings, estimate_activations
from hfmem.model.architecture import read_architecture
from hfmem.memory.estimate import estimate
from hfmem.hardware.gpus import find_gpu
from hfmem.model.inventory import Inventory, LinearGroup
from hfmem.model.meta import build_inventory
from hfmem.memory.model_state import ParameterSplit, model_state_bytes
from hfmem.memory.quantization import NF4_BYTES_PER_PARAM
from hfmem.memory.settings import TrainingSettings





# --- ZeRO (Rajbhandari et al. 2019, Figure 1): 7.5B parameters, Nd = 64, K = 12 ------------------

PSI = 7.5e9


@pytest.mark.parametrize(("sharding", "paper_gb"), [("ddp", 120.0), ("zero1", 31.4), ("zero2", 16.6), ("zero3", 1.9)])
def test_zero_paper_model_state_per_device(sharding: str, paper_gb: float) -> None:
    split = ParameterSplit(total=int(PSI), trainable=int(PSI), frozen_16bit=0, frozen_quantized=0,
                           trainable_matrices=(), trainable_vectors=0, largest_trainable=0)
    settings = TrainingSettings(dtype="fp16", optimizer="adamw", num_gpus=64, sharding=sharding).validated()
    state = model_state_bytes(split, settings, hidden_size=4096, layer_parameters=0, root_parameters=0,
                              largest_root_unit=0, gathered_peak=0)
    assert state.optimizer == pytest.approx(12 * PSI / (64 if sharding != "ddp" else 1))  # K = 12: master + 2 moments
    per_device = (state.weights + state.gradients + state.optimizer) / 1e9
    assert round(per_device, 1) == paper_gb


def test_seed_rule_of_thumb_is_not_mixed_precision_adamw() -> None:
    """'≈ 6 × params(B) GB' undercounts mixed-precision AdamW, which keeps 16 bytes/param of model state."""
    arch, inventory = reference_model("meta-llama/Llama-2-7b-hf")
    est = estimate(arch, inventory, TrainingSettings(method="full", dtype="bf16", optimizer="adamw")).to_dict()
    rule = est["rule_of_thumb"]
    assert rule["model_state_bytes_per_param"] == pytest.approx(16.0)
    assert rule["napkin_gib"] == pytest.approx(6 * inventory.total / 2**30, rel=1e-3)
    assert rule["model_state_gib"] > 2.5 * rule["napkin_gib"]
    assert est["per_gpu_bytes"]["weights"] + est["per_gpu_bytes"]["gradients"] + est["per_gpu_bytes"]["optimizer"] == \
        pytest.approx(16 * inventory.total, rel=1e-6)


# --- Korthikanti et al. 2022, Table 2: s·b·h·(34 + 5·a·s/h) bytes per GPT layer in fp16 -------------

def test_korthikanti_gpt_layer() -> None:
    """A GPT layer (LayerNorm, GELU, dropout everywhere, eager attention, fp16) saves exactly the paper's terms."""
    config = reference_config("openai-community/gpt2") | {"activation_function": "gelu"}  # the paper's GELU keeps its input
    arch, inventory = read_architecture(config), build_inventory(config)
    s, b, h, a = 1024, 4, arch.hidden_size, arch.num_attention_heads
    est = estimate_activations(arch, inventory, ActivationSettings(micro_batch_size=b, seq_len=s, compute_bytes=2,
                                                                   attention="eager"))
    layer = est.layers[0]
    paper = s * b * h * (34 + 5 * a * s / h)
    stats = 2 * 8 * s * b  # LayerNorm mean/rstd (fp32), which the paper leaves out
    assert layer.bytes - stats == pytest.approx(paper, rel=1e-9)
    assert layer.attention_core_bytes == 5 * a * s * s * b
    selective = estimate_activations(arch, inventory, ActivationSettings(
        micro_batch_size=b, seq_len=s, attention="eager", gradient_checkpointing="selective"))
    assert selective.stored < est.stored
    assert (layer.bytes - layer.attention_core_bytes - stats) == pytest.approx(34 * s * b * h, rel=1e-9)


def test_flash_attention_stores_no_attention_matrix() -> None:
    arch, inventory = reference_model("meta-llama/Meta-Llama-3-8B")
    short = estimate_activations(arch, inventory, ActivationSettings(micro_batch_size=1, seq_len=1024,
                                                                     attention="flash_attention_2"))
    long = estimate_activations(arch, inventory, ActivationSettings(micro_batch_size=1, seq_len=4096,
                                                                    attention="flash_attention_2"))
    assert long.layers[0].bytes == pytest.approx(4 * short.layers[0].bytes, rel=1e-9)  # linear in s
    assert short.layers[0].attention_core_bytes == 0
    eager = estimate_activations(arch, inventory, ActivationSettings(
        micro_batch_size=1, seq_len=4096, attention="eager"))
    assert eager.layers[0].attention_core_bytes == 6 * 32 * 4096 * 4096  # fp32 softmax + bf16 probabilities


# --- QLoRA (Dettmers et al. 2023) ----------------------------------------------------------------

def test_nf4_with_double_quantisation_costs_0_127_bits_of_constants() -> None:
    assert (NF4_BYTES_PER_PARAM - 0.5) * 8 == pytest.approx(0.127, abs=5e-4)


def _guanaco(micro_batch: int = 1) -> TrainingSettings:
    """The paper's Guanaco recipe (qlora.py / finetune_guanaco_65b.sh): r=64 on all linear layers,
    paged AdamW (32-bit), bf16, gradient checkpointing, source 16 + target 512 tokens, micro-batch 1."""
    return TrainingSettings(method="qlora", micro_batch_size=micro_batch, gradient_accumulation_steps=16, seq_len=528,
                            gradient_checkpointing="full", lora_rank=64, lora_targets=("all-linear",),
                            optimizer="paged_adamw", dtype="bf16-pure", adapter_dtype="compute")


def test_qlora_65b_fits_one_48gb_gpu() -> None:
    arch, inventory = reference_model("huggyllama/llama-65b")
    est = estimate(arch, inventory, _guanaco())
    assert est.fits(find_gpu("RTX A6000").usable_bytes)  # "a 65B model on a single 48GB GPU"
    assert not est.fits(find_gpu("RTX 4090").usable_bytes)
    full16 = estimate(arch, inventory, replace(_guanaco(), method="lora"))
    assert not full16.fits(find_gpu("A100 80GB").usable_bytes)  # 16-bit LoRA of 65B does not


def test_qlora_33b_fits_one_24gb_gpu() -> None:
    arch, inventory = reference_model("huggyllama/llama-30b")
    assert estimate(arch, inventory, _guanaco()).fits(find_gpu("RTX 4090").usable_bytes)


def test_bitsandbytes_quantises_linear_layers_only() -> None:
    arch, inventory = reference_model("meta-llama/Llama-2-7b-hf")
    est = estimate(arch, inventory, TrainingSettings(method="qlora"))
    by = inventory.by_component
    kept = by["embeddings"] + by["head"] + by["norms"]
    assert est.split.frozen_16bit == kept
    assert est.split.frozen_quantized == inventory.total - kept


def test_lora_trainable_parameters_are_r_times_in_plus_out() -> None:
    inventory = Inventory(model_class="X", total=10_000_000, by_component={"attention": 10_000_000},
                          linears=(LinearGroup("q_proj", "attention", 4096, 4096, 2, "linear", False),
                                   LinearGroup("v_proj", "attention", 4096, 1024, 2, "linear", False)),
                          tied=(), buffers={})
    arch, _ = reference_model("meta-llama/Meta-Llama-3-8B")
    est = estimate(arch, inventory, TrainingSettings(method="lora", lora_rank=8, lora_targets=("q_proj", "v_proj")))
    assert est.split.trainable == 2 * 8 * (4096 + 4096) + 2 * 8 * (4096 + 1024)
