"""The load phase and host RAM: where loading the whole model on every GPU before sharding is the peak, and what a
machine's RAM must hold (offloaded states of its ranks, every rank's copy of the checkpoint while loading, or rank
0's copy while it saves a full checkpoint)."""

from __future__ import annotations

from tiny_models import reference_model

from hfmem.hardware.gpus import find_gpu, parse_gpu_spec
from hfmem.memory.estimate import estimate
from hfmem.memory.fit import fit_one
from hfmem.memory.settings import TrainingSettings
from hfmem.units import GIB

LLAMA3 = reference_model("meta-llama/Meta-Llama-3-8B")
SHARDED_LORA = dict(method="lora", sharding="fsdp", num_gpus=4, gradient_checkpointing="full")


def _whole_model_bytes(est) -> int:
    """The checkpoint as the training holds it before sharding: bf16 base weights and fp32 adapters (PEFT)."""
    return est.split.frozen_16bit * 2 + est.split.trainable * 4


def test_loading_the_whole_model_on_each_gpu_is_the_peak_of_a_sharded_lora() -> None:
    on_cpu = estimate(*LLAMA3, TrainingSettings(**SHARDED_LORA))
    on_gpu = estimate(*LLAMA3, TrainingSettings(**SHARDED_LORA, model_loading="per-rank-gpu"))
    steady = on_cpu.to_dict()["phases"]
    assert steady["largest"] == "train_step" and steady["train_step"] == on_cpu.total
    assert steady["load"] is steady["evaluation"] is None and steady["save"] < on_cpu.total  # a unit, no activations
    phases = on_gpu.to_dict()["phases"]
    assert phases["largest"] == "load" and phases["train_step"] == on_cpu.total  # the step itself is the same
    assert on_gpu.total == phases["load"] > _whole_model_bytes(on_gpu) > on_cpu.total
    card = parse_gpu_spec(f"card={(on_cpu.total + on_gpu.total) / 2 / GIB:.3f}")
    assert fit_one(*LLAMA3, TrainingSettings(**SHARDED_LORA), card, "lora").fits
    fit = fit_one(*LLAMA3, TrainingSettings(**SHARDED_LORA, model_loading="per-rank-gpu"), card, "lora").to_dict()
    assert not fit["fits"] and fit["phase"] == "load" and fit["short_of"] == "GPU memory"


def test_host_ram_per_machine_counts_every_loading_rank() -> None:
    """Loading copies per rank, or rank 0's copy of a full checkpoint save (a LoRA's optimizer state is smaller)."""
    for loading, save, copies in (("per-rank-cpu", "full", 4), ("rank0", "full", 1), ("per-rank-gpu", "full", 1),
                                  ("per-rank-gpu", "sharded", 0)):
        est = estimate(*LLAMA3, TrainingSettings(**SHARDED_LORA, model_loading=loading, state_dict_type=save))
        assert est.per_gpu_bytes.host_per_node == copies * _whole_model_bytes(est), loading
    two_machines = estimate(*LLAMA3, TrainingSettings(**SHARDED_LORA | {"num_gpus": 16}, gpus_per_node=8))
    assert two_machines.per_gpu_bytes.host_per_node == 8 * _whole_model_bytes(two_machines)


def test_a_setup_whose_host_ram_is_short_does_not_fit_and_says_why() -> None:
    offload = dict(method="full", sharding="zero3", num_gpus=8, offload_optimizer=True, gradient_checkpointing="full",
                   model_loading="rank0")
    est = estimate(*LLAMA3, TrainingSettings(**offload))
    need = est.per_gpu_bytes.host_per_node
    assert need >= 8 * est.state.cpu_bytes > 12 * 8.03e9 * 0.99  # fp32 master + AdamW moments of every parameter
    gpu = find_gpu("h100")
    roomy = fit_one(*LLAMA3, TrainingSettings(**offload, host_ram_gib=need / GIB + 1), gpu, "full").to_dict()
    short = fit_one(*LLAMA3, TrainingSettings(**offload, host_ram_gib=need / GIB - 1), gpu, "full").to_dict()
    assert roomy["fits"] and roomy["short_of"] is None
    assert not short["fits"] and short["short_of"].startswith("host RAM")
    assert short["host_per_node_bytes"] == need


def test_a_full_checkpoint_save_short_of_host_ram_suggests_sharded_checkpoints() -> None:
    """Rank 0's host gathers the whole optimizer state (AdamW: 8 bytes per parameter) to save it in full; saving
    shards instead is the change that fits, before any that costs speed or accuracy."""
    from hfmem.render.labels import advice_text

    sharded = dict(method="full", sharding="fsdp", num_gpus=8, model_loading="rank0")
    full = estimate(*LLAMA3, TrainingSettings(**sharded))
    assert full.state.host_save_bytes == 8 * full.split.trainable  # the fp32 moments, larger than the fp32 weights
    assert full.per_gpu_bytes.host_per_node == full.state.host_save_bytes
    ram = full.state.host_save_bytes / GIB - 1
    cell = fit_one(*LLAMA3, TrainingSettings(**sharded, host_ram_gib=ram), find_gpu("h100"), "full").to_dict()
    assert cell["short_of"].startswith("host RAM") and cell["mitigations"][0]["name"] == "sharded_checkpoints"
    assert advice_text(cell).startswith("sharded save")
    saved = estimate(*LLAMA3, TrainingSettings(**sharded, state_dict_type="sharded"))
    assert saved.per_gpu_bytes.host_per_node < full.per_gpu_bytes.host_per_node and saved.total == full.total


def test_a_generation_short_of_gpu_memory_suggests_the_generation_s_own_changes() -> None:
    """GRPO-style generation between steps (128 sequences per GPU, the KV cache up to 2,048 tokens) outgrows an
    A100 40GB where the training step fits: the change that fits is a smaller generation batch (the micro-batch),
    not a training-side one; under ZeRO-3 the whole-model gather for generate is the peak, and gathering layer by
    layer is the change."""
    from hfmem.render.labels import advice_text

    grpo = dict(method="lora", generation_batch_size=128, generation_tokens=512)
    cell = fit_one(*LLAMA3, TrainingSettings(**grpo), find_gpu("a100-40gb"), "lora").to_dict()
    assert cell["phase"] == "generation" and not cell["fits"]
    assert [m["name"] for m in cell["mitigations"]][:1] == ["smaller_generation_batch"]
    assert cell["mitigations"][0]["settings_changes"] == {"generation_batch_size": 1}
    assert advice_text(cell).startswith("gen b=1")
    one = estimate(*LLAMA3, TrainingSettings(**grpo | {"generation_batch_size": 1}))
    assert cell["mitigations"][0]["total_bytes"] == one.per_gpu_bytes.total < 40 * GIB

    seventy = reference_model("meta-llama/Llama-2-70b-hf")
    zero3 = dict(method="lora", sharding="zero3", num_gpus=8, gradient_checkpointing="full", generation_batch_size=2)
    cell = fit_one(*seventy, TrainingSettings(**zero3), find_gpu("h100"), "lora").to_dict()
    assert cell["phase"] == "generation" and not cell["fits"]
    assert cell["mitigations"][0]["name"] == "layerwise_generation_gather"
    assert cell["mitigations"][0]["settings_changes"] == {"generation_gathers_weights": False}
