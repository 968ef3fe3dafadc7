"""Tensor, pipeline, context and expert parallelism: what the most-loaded rank of a TP x PP x CP (x EP) layout holds.

Each function is one term of Megatron-LM's accounting (megatron/training/theoretical_memory_usage.py at
NVIDIA/Megatron-LM d98e8a6, cited by line as `tmu:N`) or of Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models" (Table 2): weights split by TP within a stage's share of the layers,
experts by EP x expert-TP, the embedding on the first stage and the head and loss on the last; activations inside
attention and MLP split by TP, the rest by TP only with sequence parallelism, all of them by CP, times the
micro-batches the schedule keeps in flight on the stage; and the buffers each dimension communicates through.
Pure functions over hfmem's own per-layer activation terms (memory/activations/) and parameter inventory.

Checked against real runs on CPU (tests/layout_ranks.py, bench/parallel_ranks.py): TP and TP+SP (Llama, Qwen2,
Mixtral), FSDP2 x TP, GPipe, 1F1B and interleaved 1F1B. Context parallelism does not run there (torch 2.13's
context_parallel maps only the CUDA flash, efficient and cuDNN SDPA kernels and raises for any other,
torch/distributed/tensor/experimental/_context_parallel/_attention.py:917-933; DTensor has no sharding rule for the
CPU kernel aten._scaled_dot_product_flash_attention_for_cpu), nor Megatron-core; the CP and EP buffers rest on the
sources cited at each term.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from hfmem.errors import InvalidInputError
from hfmem.memory.activations import ActivationEstimate, LayerActivation
from hfmem.memory.activations.recompute import stage_checkpointing, tensor_parallel_notes
from hfmem.memory.model_state import ModelState, ParameterSplit
from hfmem.memory.settings import TrainingSettings
from hfmem.model.architecture import Architecture
from hfmem.model.inventory import Inventory

TP_SPLIT_PREFIXES = ("attn.", "mlp.", "experts.", "shared_expert.", "attn_out.", "mlp_out.")
"""Saved tensors inside the column-parallel -> row-parallel pair of attention and MLP (their residual dropout
aside): split by TP with or without sequence parallelism (Korthikanti Table 2: the 24·sbh + 5·as²b of
34·sbh + 5·as²b)."""
RESIDUAL_DROPOUT = "resid_dropout"
"""The dropout after a row-parallel linear's all-reduce: on the whole residual stream, split only by SP."""
LINEAR_INPUT_SUFFIX = "norm.out"
"""The normed input of the column-parallel linears (and their LoRA inputs, `attn_in.`/`mlp_in.`): whole on every
rank without SP; under Megatron's SP saved sharded (gathered again in backward); under torch's DTensor SP the
all-gathered input is what the linears save, whole."""
LINEAR_INPUT_PREFIXES = ("attn_in.", "mlp_in.")
EXPERT_TOKEN_TERMS = ("experts.gathered_input", "experts.weighted_output", "experts.routing")
"""The routed experts' tensors of the hidden width, one per token copy: Megatron's token dispatcher gathers the
sequence-parallel tokens over the expert-TP ranks before the experts (MoEAlltoAllTokenDispatcher.dispatch_postprocess,
megatron/core/transformer/moe/token_dispatcher.py:741-751 at d98e8a6; core_v0.6.0's MoEAllGatherTokenDispatcher over
TP x EP, token_dispatcher.py:110-166), so a rank holds tp/expert_tp of the copies a TP rank's tokens would make,
each whole; the experts' inner tensors split over expert-TP as well, which nets 1/tp."""


@dataclass(frozen=True)
class Layout:
    """A training layout's dimensions as the memory model reads them."""

    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    dp: int = 1
    vpp: int = 1
    schedule: str = "1f1b"
    sequence_parallel: str = "off"
    cp_kind: str = "ring"
    micro_batches: int = 1
    """Micro-batches per step (gradient_accumulation_steps): what a pipeline schedule runs through its stages."""
    expert_tp: int = 1
    """Tensor parallel ranks of each routed expert (Megatron's expert_tensor_parallel_size)."""
    pp_buffers: str = "step"
    """How a stage allocates its boundary tensors: per step (torch.distributed.pipelining) or per transfer
    (Megatron-core)."""

    @classmethod
    def of(cls, s: TrainingSettings) -> Layout:
        """The layout of validated settings."""
        return cls(s.tp, s.pp, s.cp, s.ep, s.data_parallel, s.vpp, s.pp_schedule, s.sequence_parallel, s.cp_kind,
                   s.gradient_accumulation_steps, s.resolved_expert_tp, s.pp_buffers)

    @property
    def trivial(self) -> bool:
        """No model parallelism: one GPU holds the whole model (data parallelism aside)."""
        return self.tp == self.pp == self.cp == self.ep == 1

    @property
    def stages(self) -> tuple[int, ...]:
        """The stages that can be the most loaded: the first (embedding, most micro-batches in flight) and the last
        (head and loss)."""
        return (0,) if self.pp == 1 else (0, self.pp - 1)

    def describe(self) -> str:
        """The layout in words, its dimensions above 1: TP8+SP·PP4x2·DP2."""
        sp = "+SP" if self.sequence_parallel != "off" else ""
        dims = (("TP", self.tp, sp), ("PP", self.pp, f"x{self.vpp}" if self.vpp > 1 else ""), ("CP", self.cp, ""),
                ("EP", self.ep, ""), ("DP", self.dp, ""))
        return "·".join(f"{name}{n}{extra}" for name, n, extra in dims if n > 1) or "1 GPU"


def check_layout(arch: Architecture, s: TrainingSettings, seq_len: int) -> None:
    """InvalidInputError, in one line, for a layout the model cannot be split by: TP not dividing the attention
    heads or above the KV heads (Megatron asserts num_query_groups % tp == 0), PP above the layers, CP not dividing
    the sequence, EP not dividing the routed experts."""
    heads, kv = arch.num_attention_heads, arch.num_key_value_heads or arch.num_attention_heads
    if s.tp > 1 and heads and (heads % s.tp or s.tp > kv or kv % s.tp):
        raise InvalidInputError(f"tp {s.tp} must divide the model's {heads} attention heads and {kv} KV heads "
                                "(each rank holds whole heads).")
    if s.pp * s.vpp > arch.num_layers:
        raise InvalidInputError(f"pp {s.pp} x vpp {s.vpp} is above the model's {arch.num_layers} layers.")
    if seq_len % s.cp:
        raise InvalidInputError(f"cp {s.cp} does not divide the sequence of {seq_len:,} tokens.")
    if s.ep > 1 and (not arch.is_moe or arch.num_experts % s.ep):
        raise InvalidInputError(f"ep {s.ep} must divide the model's routed experts ({arch.num_experts or 0}).")


def stage_layers(num_layers: int, pp: int, stage: int) -> int:
    """Decoder layers on `stage`: an even split, the first stages taking one more where it does not divide
    (torchtitan's and torch.distributed.pipelining's split; Megatron asserts an even one)."""
    return num_layers // pp + (1 if stage < num_layers % pp else 0)


def in_flight(layout: Layout, stage: int) -> float:
    """Micro-batches whose activations `stage` holds at its peak, in units of the stage's whole layer set.

    1F1B (Narayanan et al. 2021): pp - stage warm-up forwards, at most the step's micro-batches (tmu:359-364;
    torch's Schedule1F1B: warmup_chunks = min(n_microbatches, num_stages - stage_index));
    interleaved: (2(pp - stage - 1) + (vpp - 1)·pp + 1) model chunks of 1/vpp of the layers, which on the first
    stage is Megatron's penalty pp·(1 + (pp-1)/(pp·vpp)) (tmu:342-355); GPipe: every micro-batch; zero-bubble
    (ZB-H1, Qi et al. 2023): as 1F1B; with vpp > 1 (torch's ScheduleInterleavedZeroBubble) one warm-up chunk per
    stage away from the last instead of two: (pp - stage - 1) + (vpp - 1)·pp + 1 chunks (torch/distributed/
    pipelining/schedules.py _get_warmup_ops with multiply_factor=1)."""
    p, m = layout.pp, layout.micro_batches
    if p == 1:
        return 1.0
    if layout.schedule == "gpipe":
        return float(m)
    if layout.vpp > 1:
        hops = (2 if layout.schedule == "interleaved" else 1) * (p - stage - 1)
        chunks = hops + (layout.vpp - 1) * p + 1
        return min(chunks, m * layout.vpp) / layout.vpp
    return float(min(p - stage, m))


def outputs_in_flight(layout: Layout) -> float:
    """Micro-batches whose head input, logits and loss the last stage holds at its peak: GPipe keeps every
    micro-batch's; the 1F1B schedules run each one's backward right after its last-chunk forward, so one (with vpp,
    the last stage's warm-up forwards are its earlier model chunks: Megatron's get_model_chunk_id,
    megatron/core/pipeline_parallel/schedules.py, and torch's forward_stage_index take chunk (k // pp) % vpp)."""
    return float(layout.micro_batches) if layout.pp > 1 and layout.schedule == "gpipe" else 1.0


def outputs_kept(layout: Layout, stage: int) -> int:
    """Sent outputs a stage that keeps them (Megatron-LM 8aa4619, megatron/training.py:413, 474, 477) holds at its
    peak: one per model chunk in flight, less the last stage's own last chunk, whose output is the loss."""
    chunks = round(in_flight(layout, stage) * layout.vpp)
    return max(0, chunks - (1 if stage == layout.pp - 1 else 0))


@dataclass(frozen=True)
class RankParameters:
    """Parameters on one rank, by how the layout holds them."""

    tp_split: float
    """The stage's attention and dense MLP linears, each rank 1/tp of them."""
    replicated: float
    """Norms, routers and other small tensors, whole on every TP rank."""
    experts: float
    """Routed experts, 1/(ep x expert-tp) of them (Megatron's expert_tensor_parallel_size defaults to tp,
    megatron/training/arguments.py:587-588; the expert_tp setting)."""
    vocabulary: float
    """The embedding (first stage) or the untied head, or the tied head's copy (last stage), split by TP."""
    layer: float
    """One decoder layer's parameters on this rank: what ZeRO-3/FSDP gather at a time."""

    @property
    def total(self) -> float:
        return self.tp_split + self.replicated + self.experts + self.vocabulary


def rank_parameters(arch: Architecture, inventory: Inventory, layout: Layout, stage: int) -> RankParameters:
    """The parameters `stage`'s rank holds (tmu:214-267): the stage's share of the decoder layers, TP-split linears
    /tp, experts /(ep·tp), replicated norms and routers whole; the embedding on the first stage, the head on the
    last (a tied head keeps a copy of the embedding there when pp > 1, as Megatron's shared embedding does)."""
    by = inventory.by_component
    layers = max(1, arch.num_layers + arch.encoder_layers)
    share = stage_layers(layers, layout.pp, stage) / layers
    linear = sum(g.parameters for g in inventory.linears if g.component in {"attention", "mlp"})
    replicated = sum(by.get(k, 0) for k in ("attention", "mlp", "norms", "router", "ssm", "other")) - linear
    experts = by.get("experts", 0)
    first, last = stage == 0, stage == layout.pp - 1
    embed, head = by.get("embeddings", 0), by.get("head", 0)
    vocabulary = (embed if first else 0) + (head if last else 0)
    if last and not first and not head:
        vocabulary += arch.vocab_size * arch.hidden_size  # the tied head's copy of the embedding
    extra = sum(by.get(k, 0) for k in ("vision", "projector")) if first else 0
    tp, ep_tp = layout.tp, layout.ep * layout.expert_tp
    moe_layers = max(1, arch.num_layers - arch.num_dense_layers) if arch.is_moe else 1
    layer = (linear / tp + replicated) / layers + experts / moe_layers / ep_tp
    return RankParameters(tp_split=linear * share / tp, replicated=replicated * share + extra,
                          experts=experts * share / ep_tp, vocabulary=vocabulary / tp, layer=layer)


def dense_and_experts(rank: RankParameters) -> tuple[RankParameters, RankParameters]:
    """The rank's parameters as two groups whose gradients and states shard over different ranks: the dense part
    over DP x CP, the routed experts over the expert-data-parallel ranks, DP x CP / EP (tmu:205-212, 296-303)."""
    return replace(rank, experts=0.0), RankParameters(0.0, 0.0, rank.experts, 0.0, 0.0)


def summed_states(a: ModelState, b: ModelState) -> ModelState:
    """Two parameter groups' model states on one rank, added term by term."""
    ints = {f.name: getattr(a, f.name) + getattr(b, f.name) for f in fields(ModelState)
            if isinstance(getattr(a, f.name), int) and not isinstance(getattr(a, f.name), bool)}
    return replace(a, **ints, gradients_persist=a.gradients_persist or b.gradients_persist,
                   notes=tuple(dict.fromkeys(a.notes + b.notes)))


def gradients_at_peak(layout: Layout, stage: int) -> bool:
    """Whether a stage's gradients exist while its activations peak: only when a backward has run before the last
    forward of the in-flight micro-batches (1F1B's steady state with more micro-batches than in flight); a GPipe
    step runs every forward first, so its first backward allocates the gradients as it frees activations."""
    return layout.pp == 1 or layout.micro_batches > in_flight(layout, stage)


def rank_split(split: ParameterSplit, whole: int, rank: RankParameters) -> ParameterSplit:
    """The parameter split as one rank holds it: every count scaled by the rank's share of the model's parameters
    (adapters and frozen weights alike; a matrix keeps its columns and loses rows)."""
    f = rank.total / whole if whole else 1.0

    def scaled(n: float) -> int:
        return round(n * f)

    return replace(
        split, total=scaled(split.total), trainable=scaled(split.trainable), frozen_16bit=scaled(split.frozen_16bit),
        frozen_quantized=scaled(split.frozen_quantized),
        trainable_matrices=tuple((max(1, scaled(r)), c, n) for r, c, n in split.trainable_matrices),
        trainable_vectors=scaled(split.trainable_vectors), largest_trainable=scaled(split.largest_trainable),
        matmul_parameters=scaled(split.matmul_parameters), trainable_copies=scaled(split.trainable_copies),
        quantized_bytes=split.quantized_bytes * f, last_trainable=scaled(split.last_trainable),
        decoder_linear_weights=scaled(split.decoder_linear_weights))


def term_divisor(name: str, layout: Layout) -> float:
    """What TP divides one saved tensor of a layer by (Korthikanti Table 2): the attention and MLP insides always;
    the norms, dropouts and residual stream only with sequence parallelism; the column-parallel linears' input
    only with Megatron's (torch's DTensor plan saves the all-gathered input); the routed experts' token copies by
    tp / expert_tp (EXPERT_TOKEN_TERMS)."""
    sp = layout.sequence_parallel
    if name in EXPERT_TOKEN_TERMS:
        return layout.tp / layout.expert_tp
    if name.startswith(TP_SPLIT_PREFIXES) and RESIDUAL_DROPOUT not in name:
        return layout.tp
    if name.endswith(LINEAR_INPUT_SUFFIX) or name.startswith(LINEAR_INPUT_PREFIXES):
        return layout.tp if sp == "megatron" else 1
    return layout.tp if sp != "off" else 1


def rank_layer(layer: LayerActivation, layout: Layout, count: int) -> LayerActivation:
    """One layer kind's saved bytes on a rank: each term divided per `term_divisor` and by CP, `count` of them."""
    terms = {name: round(n / term_divisor(name, layout) / layout.cp) for name, n in layer.terms.items()}
    whole = sum(layer.terms.values())
    ratio = sum(terms.values()) / whole if whole else 1.0
    return replace(layer, count=count, bytes=sum(terms.values()), terms=terms,
                   attention_core_bytes=round(layer.attention_core_bytes / layout.tp / layout.cp),
                   backward_working=round(layer.backward_working * ratio))


def rank_activations(act: ActivationEstimate, arch: Architecture, layout: Layout, stage: int) -> ActivationEstimate:
    """The activation estimate of `stage`'s rank: its layers' saved tensors split by TP/SP and CP, times the
    micro-batches in flight (tmu:317-379); the embedding's on the first stage, the final norm's, the head's and the
    vocabulary-parallel loss's (split by TP: Megatron's vocab_parallel_cross_entropy, torchtitan's loss_parallel)
    on the last, for each micro-batch in flight there (GPipe: all of them; 1F1B: one)."""
    layers = max(1, arch.num_layers + arch.encoder_layers)
    own = stage_layers(layers, layout.pp, stage)
    flight, outputs = in_flight(layout, stage), outputs_in_flight(layout)
    first, last = stage == 0, stage == layout.pp - 1
    total_count = max(1, sum(x.count for x in act.layers))
    kinds = [rank_layer(x, layout, round(x.count * own / total_count * flight)) for x in act.layers]
    before = sum(x.bytes * x.count for x in act.layers) / total_count
    after = sum(x.bytes * x.count for x in kinds) / max(1, sum(x.count for x in kinds))
    ratio = after / before if before else 1.0
    residual = layout.cp * (layout.tp if layout.sequence_parallel != "off" else 1)
    vocab = layout.cp * layout.tp
    sp = layout.sequence_parallel != "off"
    ckpt_inputs, kept_share, group, op_extra = stage_checkpointing(act, total_count, own, layout.vpp, tp=layout.tp,
                                                                   sequence_parallel=sp, cp=layout.cp)
    final = act.final / residual if last else 0  # one micro-batch's; the last stage keeps `outputs` of them
    loss = act.loss / vocab if last else 0
    return replace(
        act, layers=tuple(kinds),
        embedding=round(act.embedding * flight / residual) if first else 0,
        checkpoint_inputs=round((ckpt_inputs / residual + op_extra) * flight), kept_share=kept_share,
        notes=act.notes + tensor_parallel_notes(act, layout.tp, sp),
        final=round(final * outputs), loss=round(loss * outputs), loss_peak=round(act.loss_peak / vocab) if last else 0,
        recompute=round(act.recompute * ratio * group),
        adjustments=round(act.adjustments * ratio * flight) if first else 0,
        offloaded=round(act.offloaded * ratio * flight), retained=round(act.retained * ratio),
        dequant_workspace=round(act.dequant_workspace / layout.tp),
        released=round(final + loss) if last else 0)


@dataclass(frozen=True)
class CommBuffers:
    """Bytes each dimension's communication allocates on a rank beside the activations (one layer's at a time)."""

    tp: int = 0
    """Megatron's SP all-gather of a layer's input into a whole-sequence buffer (gathered again in backward)."""
    pp: int = 0
    """The stage's boundary tensors. Per step (torch.distributed.pipelining's PipelineStage): a receive buffer per
    micro-batch of the step for each model chunk's input (not the first stage's) and its output's gradient (not
    the last stage's), allocated once for the step's micro-batches; and the output of each micro-batch in flight, kept
    for its backward (the logits on the last stage, whose loss_fn runs outside the stage). Per transfer
    (Megatron-core): the received input is the stage's own input, kept by its first layer (counted there), and the
    sent output's data is freed, so only the output gradient being received is extra. Kept (Megatron-LM before
    deallocate_pipeline_outputs): as per transfer, and the sent output of each model chunk in flight stays whole
    until its backward."""
    cp: int = 0
    """Ring attention's next K/V chunk received while the current one is used (double-buffered), all-gather's K/V
    of the whole sequence for the layer being computed (torch's _AllGatherRotater, its default:
    torch/distributed/tensor/experimental/_context_parallel/_attention.py:77, 273-300), or all-to-all's
    re-laid-out Q, K, V and output."""
    ep: int = 0
    """The token dispatcher's permuted tokens, top-k copies of each (dropless): the local tokens permuted for the
    all-to-all and the experts' tokens received from it, then the same on the way back (Megatron-core's
    MoEAlltoAllTokenDispatcher, megatron/core/transformer/moe/token_dispatcher.py:624-720)."""

    @property
    def total(self) -> int:
        return self.tp + self.pp + self.cp + self.ep

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def comm_buffers(arch: Architecture, layout: Layout, stage: int, micro_batch: int, seq_len: int,
                 p: int) -> CommBuffers:
    """Each dimension's communication buffers on `stage` for micro-batches of `micro_batch` x `seq_len` tokens in
    `p`-byte elements."""
    h = arch.hidden_size
    local = micro_batch * seq_len // layout.cp
    sp = layout.tp if layout.sequence_parallel != "off" else 1
    tp = local * h * p if layout.tp > 1 and layout.sequence_parallel == "megatron" else 0
    pp = 0
    if layout.pp > 1:
        first, last = stage == 0, stage == layout.pp - 1
        boundary = local * h * p // sp
        if layout.pp_buffers != "step":
            pp = 0 if last and layout.vpp == 1 else boundary
            if layout.pp_buffers == "kept":
                pp += boundary * outputs_kept(layout, stage)
        else:
            chunks = 2 * layout.vpp - (1 if first else 0) - (1 if last else 0)  # each model chunk's input and grad
            receive = chunks * boundary * layout.micro_batches
            output = local * arch.vocab_size * p // layout.tp if last else boundary
            outputs = outputs_in_flight(layout) if last else in_flight(layout, stage)
            pp = round(receive + output * outputs)
    kv_width = (arch.num_key_value_heads or arch.num_attention_heads) * arch.head_dim // layout.tp
    if layout.cp == 1:
        cp = 0
    elif layout.cp_kind == "ring":
        cp = 2 * 2 * local * kv_width * p
    elif layout.cp_kind == "all-gather":
        cp = 2 * local * layout.cp * kv_width * p
    else:
        cp = 4 * local * arch.num_attention_heads * arch.head_dim // layout.tp * p
    topk = arch.experts_per_token if arch.is_moe else 0
    ep = 2 * local * topk * h * p // sp if layout.ep > 1 else 0
    return CommBuffers(tp=tp, pp=pp, cp=cp, ep=ep)


def layout_record(layout: Layout, stage: int, rank: RankParameters, buffers: CommBuffers) -> dict[str, Any]:
    """The layout and the most-loaded rank's figures as the estimate's assumptions show them."""
    return {"layout": layout.describe(), **asdict(layout), "most_loaded_stage": stage,
            "micro_batches_in_flight": in_flight(layout, stage),
            "rank_parameters": {"tp_split": round(rank.tp_split), "replicated": round(rank.replicated),
                                "experts": round(rank.experts), "vocabulary": round(rank.vocabulary),
                                "total": round(rank.total)},
            "comm_buffers": buffers.to_dict()}
