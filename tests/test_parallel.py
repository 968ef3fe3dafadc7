"""Tensor, pipeline, context and expert parallelism (hfmem.memory.parallel): Korthikanti et al. 2022's Table 2 and
Megatron-LM's own estimator reproduced by hfmem's functions, the layout's checks, and the settings' flags.

Megatron's figures are what megatron/training/theoretical_memory_usage.py (NVIDIA/Megatron-LM d98e8a6) returns
for the configs below, run as published with an argparse namespace: compute_weight_and_optimizer_memory's most
loaded shard (its bytes / 18, the bytes per parameter without the distributed optimizer, tmu:296) and
compute_activation_memory (sequence parallelism with selective recompute, tmu:308-379).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
from tiny_models import reference_config, reference_model, tiny_config

from hfmem.errors import InvalidInputError
from hfmem.memory.activations import ActivationSettings, estimate_activations
from hfmem.memory.estimate import estimate
from hfmem.memory.parallel import (
    Layout,
    comm_buffers,
    in_flight,
    outputs_in_flight,
    rank_activations,
    rank_layer,
    rank_parameters,
)
from hfmem.memory.settings import Overhead, TrainingSettings
from hfmem.model.architecture import read_architecture
from hfmem.model.meta import build_inventory

# --- Korthikanti et al. 2022, Table 2: activations per layer under TP and SP ---------------------------------


def _gpt_layer(s: int = 1024, b: int = 4):
    """hfmem's GPT layer with the paper's ops (LayerNorm, GELU, dropout everywhere, eager attention, fp16) and its
    shape, and the LayerNorm statistics the paper leaves out."""
    config = reference_config("openai-community/gpt2") | {"activation_function": "gelu"}
    arch, inventory = read_architecture(config), build_inventory(config)
    est = estimate_activations(arch, inventory, ActivationSettings(micro_batch_size=b, seq_len=s, compute_bytes=2,
                                                                   attention="eager"))
    stats = sum(n for name, n in est.layers[0].terms.items() if name.endswith(".stats"))
    return est.layers[0], arch, stats


@pytest.mark.parametrize("t", [2, 4, 8])
def test_korthikanti_table2_tensor_parallel(t: int) -> None:
    layer, arch, stats = _gpt_layer()
    s, b, h, a = 1024, 4, arch.hidden_size, arch.num_attention_heads
    tp = rank_layer(layer, Layout(tp=t), 1)
    assert tp.bytes - stats == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-9)
    sp = rank_layer(layer, Layout(tp=t, sequence_parallel="megatron"), 1)
    assert sp.bytes - stats / t == pytest.approx(s * b * h * (34 / t + 5 * a * s / (h * t)), rel=1e-9)
    # selective recompute drops the attention core: 34·sbh/t with TP and SP
    assert sp.bytes - sp.attention_core_bytes - stats / t == pytest.approx(34 * s * b * h / t, rel=1e-9)


def test_torch_sequence_parallel_keeps_the_gathered_linear_inputs() -> None:
    """torch's DTensor SP splits the norms and dropouts but its column-parallel linears save the all-gathered input
    (2·sbh before attention, 2·sbh before the MLP): 4·sbh more per layer than Megatron's."""
    layer, arch, _ = _gpt_layer()
    s, b, h = 1024, 4, arch.hidden_size
    megatron = rank_layer(layer, Layout(tp=4, sequence_parallel="megatron"), 1).bytes
    torch_sp = rank_layer(layer, Layout(tp=4, sequence_parallel="dtensor"), 1).bytes
    assert torch_sp - megatron == 4 * s * b * h * (1 - 1 / 4)


# --- Megatron-LM's estimator: in-flight micro-batches, activations of the first stage, the most loaded shard -----

GPT3_175B = {"model_type": "gpt2", "n_embd": 12288, "n_head": 96, "n_layer": 96, "vocab_size": 51200,
             "n_positions": 2048, "activation_function": "gelu"}
"""GPT-3 175B as Korthikanti et al. 2022 Table 3 trains it (t = 8, p = 8, s = 2048, b = 1)."""


@pytest.mark.parametrize(("pp", "vpp", "micro", "expected"), [(8, 3, 64, 1 + 7 / 24), (4, 2, 64, 1 + 3 / 8),
                                                             (8, 1, 64, 1.0), (8, 1, 4, 0.5)])
def test_megatron_in_flight_micro_batches(pp: int, vpp: int, micro: int, expected: float) -> None:
    """First stage: pp micro-batches under 1F1B (fewer when the step has fewer, tmu:359-364), times the interleaved
    penalty 1 + (pp-1)/(pp·vpp) (tmu:342-355)."""
    schedule = "interleaved" if vpp > 1 else "1f1b"
    layout = Layout(pp=pp, vpp=vpp, schedule=schedule, micro_batches=micro)
    assert in_flight(layout, 0) == pytest.approx(pp * expected, rel=1e-12)
    assert in_flight(layout, pp - 1) < in_flight(layout, 0)


@pytest.mark.parametrize(("schedule", "factor"), [("interleaved", 2), ("zero-bubble", 1)])
@pytest.mark.parametrize(("pp", "vpp", "micro"), [(4, 3, 4), (8, 2, 8), (4, 2, 16)])
def test_looped_schedules_warm_up_as_torch_does(schedule: str, factor: int, pp: int, vpp: int, micro: int) -> None:
    """Chunks in flight on each stage: torch's own warm-up count (Interleaved1F1B: two per hop from the last stage,
    InterleavedZeroBubble: one) and the first steady-state forward, at most the step's chunks."""
    from torch.distributed.pipelining.schedules import _get_warmup_ops

    layout = Layout(pp=pp, vpp=vpp, schedule=schedule, micro_batches=micro)
    for stage in range(pp):
        warmup = _get_warmup_ops(stage, vpp, pp, pp, micro, multiply_factor=factor)
        assert in_flight(layout, stage) * vpp == min(warmup + 1, micro * vpp)


def test_the_last_stage_keeps_one_loss_unless_gpipe() -> None:
    """Under the 1F1B schedules, interleaved included, each micro-batch's loss is freed by its backward before the
    next last-chunk forward; GPipe keeps them all. So the last stage's head and loss count once."""
    config = reference_config("openai-community/gpt2")
    arch = read_architecture(config)
    act = estimate_activations(arch, build_inventory(config), ActivationSettings(micro_batch_size=1, seq_len=128))
    interleaved = Layout(pp=4, vpp=3, schedule="interleaved", micro_batches=8)
    gpipe = Layout(pp=4, schedule="gpipe", micro_batches=8)
    assert outputs_in_flight(interleaved) == 1 and outputs_in_flight(gpipe) == 8
    assert in_flight(interleaved, 3) == 3
    assert rank_activations(act, arch, interleaved, 3).loss == act.loss
    assert rank_activations(act, arch, gpipe, 3).loss == 8 * act.loss


def test_per_transfer_pipeline_buffers_do_not_grow_with_the_micro_batches() -> None:
    """torch.distributed.pipelining allocates a receive buffer per micro-batch of the step; Megatron-core one
    receive at a time, its output freed once sent (deallocate_pipeline_outputs)."""
    config = reference_config("openai-community/gpt2")
    arch = read_architecture(config)
    boundary = 1024 * arch.hidden_size * 2
    for micro in (4, 64):
        step = comm_buffers(arch, Layout(pp=4, micro_batches=micro), 1, 1, 1024, 2).pp
        transfer = comm_buffers(arch, Layout(pp=4, micro_batches=micro, pp_buffers="transfer"), 1, 1, 1024, 2).pp
        assert step == 2 * boundary * micro + boundary * 3 and transfer == boundary
    assert comm_buffers(arch, Layout(pp=4, micro_batches=64, pp_buffers="transfer"), 3, 1, 1024, 2).pp == 0


def test_kept_pipeline_outputs_add_one_boundary_tensor_per_chunk_in_flight() -> None:
    """Megatron-LM before deallocate_pipeline_outputs (8aa4619, megatron/training.py:413, 477) keeps each sent output
    until its backward: 1F1B's stage s holds pp - s of them, the last stage none; with vpp, one per chunk in flight."""
    arch = read_architecture(reference_config("openai-community/gpt2"))
    boundary = 1024 * arch.hidden_size * 2
    for stage, kept in ((0, 4), (1, 3), (3, 0)):
        layout = Layout(pp=4, micro_batches=32, pp_buffers="kept")
        transfer = comm_buffers(arch, replace(layout, pp_buffers="transfer"), stage, 1, 1024, 2).pp
        assert comm_buffers(arch, layout, stage, 1, 1024, 2).pp == transfer + kept * boundary
    interleaved = Layout(pp=4, vpp=2, schedule="interleaved", micro_batches=32, pp_buffers="kept")
    assert comm_buffers(arch, interleaved, 3, 1, 1024, 2).pp == boundary + 4 * boundary


def test_in_place_cross_entropy_keeps_the_fp32_softmax_and_allocates_the_logits_gradient() -> None:
    """Megatron-core's vocab_parallel_cross_entropy: 4 bytes per logit kept, the compute-dtype gradient in backward,
    where the eager upcast loss needs two fp32 buffers."""
    config = reference_config("openai-community/gpt2")
    arch, inventory = read_architecture(config), build_inventory(config)
    tokens, v = 2 * 256, arch.vocab_size

    def of(in_place: bool):
        return estimate_activations(arch, inventory, ActivationSettings(micro_batch_size=2, seq_len=256,
                                                                        loss_in_place=in_place))

    eager, in_place = of(False), of(True)
    assert in_place.loss == pytest.approx(4 * tokens * v, rel=1e-4) and in_place.loss_peak == 2 * tokens * v
    assert eager.loss_peak == 8 * tokens * v


def test_a_fused_softmax_keeps_only_its_compute_dtype_output() -> None:
    """Megatron's ScaledUpperTriangMaskedSoftmax saves its bf16 output; transformers' Llama upcasts and keeps the
    fp32 softmax and the bf16 probabilities."""
    config = tiny_config("meta-llama/Meta-Llama-3-8B", 2)
    arch, inventory = read_architecture(config), build_inventory(config)

    def terms(fused: bool) -> dict[str, int]:
        return estimate_activations(arch, inventory, ActivationSettings(
            micro_batch_size=1, seq_len=256, attention="eager", fused_softmax=fused)).layers[0].terms

    eager, fused = terms(False), terms(True)
    a, s = arch.num_attention_heads, 256
    assert "attn.softmax_fp32" in eager and "attn.softmax_fp32" not in fused
    assert fused["attn.softmax"] == 2 * a * s * s and "attn.probs" not in fused


def test_expert_tensor_parallel_splits_experts_and_shards_their_states_over_its_own_ranks() -> None:
    """Megatron's --expert-tensor-parallel-size: experts split over ep x expert_tp; their gradients and states
    sharded over the num_gpus / (pp x ep x expert_tp) expert-data-parallel ranks."""
    config = tiny_config("mistralai/Mixtral-8x7B-v0.1", 2)
    arch, inventory = read_architecture(config), build_inventory(config)
    experts = inventory.by_component["experts"]
    assert rank_parameters(arch, inventory, Layout(tp=2, ep=4, expert_tp=1), 0).experts == experts / 4
    assert rank_parameters(arch, inventory, Layout(tp=2, ep=4, expert_tp=2), 0).experts == experts / 8
    base = TrainingSettings(seq_len=256, num_gpus=8, tp=2, ep=4, sharding="zero1")
    etp1 = estimate(arch, inventory, replace(base, expert_tp=1)).per_gpu_bytes
    etp2 = estimate(arch, inventory, base).per_gpu_bytes
    assert etp1.weights - etp2.weights == pytest.approx(experts / 8 * 2, rel=1e-3)
    # expert states: 1/4 of the experts over 8 / (4 x 1) = 2 ranks, or 1/8 of them over 8 / (4 x 2) = 1: the same
    assert etp1.optimizer_states == pytest.approx(etp2.optimizer_states, rel=1e-3)


def test_expert_token_copies_are_whole_on_each_expert_tp_rank() -> None:
    """Megatron's dispatcher gathers the sequence-parallel tokens over the expert-TP ranks: each rank keeps its
    tp/expert_tp share of the top-k copies at the hidden width, and 1/tp of the experts' inner tensors."""
    config = tiny_config("mistralai/Mixtral-8x7B-v0.1", 2)
    arch, inventory = read_architecture(config), build_inventory(config)
    layer = estimate_activations(arch, inventory, ActivationSettings(micro_batch_size=1, seq_len=256)).layers[0]
    for etp, share in ((8, 1), (2, 4), (1, 8)):
        rank = rank_layer(layer, Layout(tp=8, expert_tp=etp, sequence_parallel="megatron"), 1)
        assert rank.terms["experts.gathered_input"] == round(layer.terms["experts.gathered_input"] / share)
        assert rank.terms["experts.down_input"] == round(layer.terms["experts.down_input"] / 8)


@pytest.mark.parametrize(("micro", "vpp", "megatron"), [(None, 1, 10_292_838_400.0), (4, 1, 5_146_419_200.0),
                                                        (None, 3, 13_294_916_266.666668)])
def test_megatron_activation_memory_of_the_first_stage(micro: int | None, vpp: int, megatron: float) -> None:
    """compute_activation_memory for GPT-3 175B, t = 8, p = 8, SP and selective recompute: the first stage's layers
    (34·sbh/t each, tmu:317-325), its embedding input ids and dropout mask (tmu:329-339), in flight."""
    s, b, h = 2048, 1, 12288
    config = reference_config("openai-community/gpt2") | GPT3_175B
    arch = read_architecture(config)
    est = estimate_activations(arch, build_inventory(config), ActivationSettings(
        micro_batch_size=b, seq_len=s, compute_bytes=2, attention="eager", gradient_checkpointing="selective"))
    stats = sum(n for name, n in est.layers[0].terms.items() if name.endswith(".stats"))
    paper = replace(est, layers=(replace(est.layers[0], bytes=est.layers[0].bytes - stats,
                                         terms={k: v for k, v in est.layers[0].terms.items()
                                                if not k.endswith(".stats")}),),
                    embedding=8 * s * b + s * b * h)  # Megatron's: int64 ids and the embedding dropout mask
    layout = Layout(tp=8, pp=8, vpp=vpp, schedule="interleaved" if vpp > 1 else "1f1b", sequence_parallel="megatron",
                    micro_batches=micro or 64)
    first = rank_activations(paper, arch, layout, 0)
    assert first.saved == pytest.approx(megatron, abs=1)


@pytest.mark.parametrize(("pp", "megatron"), [(4, 2_172_192_768), (1, 8_623_235_072)])
def test_megatron_most_loaded_shard_of_llama_2_70b(pp: int, megatron: int) -> None:
    """compute_weight_and_optimizer_memory's most loaded shard for Llama-2-70B (GQA 8, SwiGLU, RMSNorm, untied),
    TP 8: the first stage's 1/pp of the layers and the embedding, over TP, norms whole (tmu:247-267)."""
    arch, inventory = reference_model("meta-llama/Llama-2-70b-hf")
    assert rank_parameters(arch, inventory, Layout(tp=8, pp=pp), 0).total == pytest.approx(megatron, abs=1)


# --- the layout as settings ----------------------------------------------------------------------------------

TINY = tiny_config("meta-llama/Meta-Llama-3-8B", 4)
ARCH, INVENTORY = read_architecture(TINY), build_inventory(TINY)


@pytest.mark.parametrize(("settings", "message"), [
    ({"tp": 3, "num_gpus": 8}, "not a multiple of tp x pp x cp"),
    ({"tp": 4}, "must divide the model's 8 attention heads and 2 KV heads"),
    ({"pp": 8}, "above the model's 4 layers"),
    ({"cp": 3, "seq_len": 1000}, "does not divide the sequence"),
    ({"ep": 2, "num_gpus": 2}, "must divide the model's routed experts"),
    ({"ep": 2, "tp": 2, "num_gpus": 2}, "ep 2 x expert_tp 2 must divide TP x DP x CP = 2"),
    ({"ep": 4, "tp": 2, "expert_tp": 1, "num_gpus": 2}, "ep 4 x expert_tp 1 must divide TP x DP x CP = 2"),
    ({"vpp": 2, "pp": 2}, "needs pp_schedule interleaved or zero-bubble"),
    ({"pp": 2, "pp_stage": 2}, "pp_stage 2 is not a stage of pp 2"),
    ({"pp_schedule": "interleaved", "pp": 2}, "needs pp >= 2 and vpp >= 2"),
])
def test_a_layout_the_model_cannot_take_is_a_one_line_error(settings: dict, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        estimate(ARCH, INVENTORY, TrainingSettings(**settings))


def test_num_gpus_is_the_layouts_product_and_dp_the_rest() -> None:
    s = TrainingSettings(tp=2, pp=2).validated()
    assert (s.num_gpus, s.data_parallel, s.shard_ranks, s.resolved_sharding) == (4, 1, 1, "none")
    s = TrainingSettings(tp=2, cp=2, num_gpus=16, sharding="distributed_optimizer").validated()
    assert (s.data_parallel, s.shard_ranks, s.resolved_sharding) == (4, 8, "zero1")
    assert TrainingSettings(ep=8, cp=2).validated().num_gpus == 8  # EP spans DP x CP: 4 replicas of CP 2


def test_each_dimension_lowers_the_most_loaded_rank() -> None:
    # NCCL's buffers off: a TP 2 communicator's 220 MiB outweigh what a split of this small model saves
    base = TrainingSettings(seq_len=512, micro_batch_size=2, gradient_accumulation_steps=4,
                            overhead=Overhead(nccl_gib=0.0))
    one = estimate(ARCH, INVENTORY, base).per_gpu_bytes
    for layout in ({"tp": 2}, {"pp": 2}, {"cp": 2}):
        ranked = estimate(ARCH, INVENTORY, replace(base, **layout))
        per_gpu = ranked.per_gpu_bytes
        assert per_gpu.total < one.total, layout
        assert per_gpu.parallel_buffers > 0 or layout == {"tp": 2}
        assert ranked.assumptions["parallel"]["layout"] == "".join(f"{k.upper()}{v}" for k, v in layout.items())
    tp = estimate(ARCH, INVENTORY, replace(base, tp=2)).per_gpu_bytes
    sp = estimate(ARCH, INVENTORY, replace(base, tp=2, sequence_parallel="megatron")).per_gpu_bytes
    assert sp.activations < tp.activations and sp.weights == tp.weights


def test_pp_stage_names_the_rank_the_estimate_is_for() -> None:
    base = TrainingSettings(seq_len=512, pp=2, gradient_accumulation_steps=8)
    most = estimate(ARCH, INVENTORY, base)
    stages = [estimate(ARCH, INVENTORY, replace(base, pp_stage=k)) for k in (0, 1)]
    assert [e.assumptions["parallel"]["most_loaded_stage"] for e in stages] == [0, 1]
    assert most.per_gpu_bytes.total == max(e.per_gpu_bytes.total for e in stages)
    assert stages[0].per_gpu_bytes.total != stages[1].per_gpu_bytes.total


def test_gpipe_holds_every_micro_batch_and_1f1b_pp_of_them() -> None:
    base = TrainingSettings(seq_len=512, pp=2, gradient_accumulation_steps=8)
    gpipe = estimate(ARCH, INVENTORY, replace(base, pp_schedule="gpipe")).assumptions["parallel"]
    one_f = estimate(ARCH, INVENTORY, base).assumptions["parallel"]
    assert gpipe["micro_batches_in_flight"] == 8
    assert one_f["micro_batches_in_flight"] == 2 - one_f["most_loaded_stage"]


def test_expert_parallel_shards_experts_and_their_states_over_fewer_ranks() -> None:
    config = tiny_config("mistralai/Mixtral-8x7B-v0.1", 2)
    arch, inventory = read_architecture(config), build_inventory(config)
    dense = TrainingSettings(seq_len=256, num_gpus=8, sharding="zero1")
    ep = estimate(arch, inventory, replace(dense, ep=4)).per_gpu_bytes
    whole = estimate(arch, inventory, dense).per_gpu_bytes
    experts = inventory.by_component["experts"]
    assert whole.weights - ep.weights == pytest.approx(experts * 2 * 3 / 4, rel=1e-3)  # bf16, 3/4 of them gone
    assert ep.parallel_buffers > 0


def test_cli_flags_reach_the_estimate_and_bad_layouts_exit_cleanly() -> None:
    run = [sys.executable, "-m", "hfmem", "example:Meta-Llama-3-8B", "-m", "full", "-g", "h100", "--seq-len", "131072",
           "--gradient-checkpointing", "full", "--zero", "3", "--format", "json"]
    done = subprocess.run(run + ["--cp", "8"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    est = json.loads(done.stdout)["estimates"]
    assert est
    bad = subprocess.run(run + ["--cp", "7"], capture_output=True, text=True, timeout=300, check=False)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert "cp 7" in bad.stderr + bad.stdout
