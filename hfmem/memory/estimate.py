"""Training memory estimate per GPU: model state + activations + overhead, with its assumptions as data.

Public API (pure functions, no torch):

    estimate(arch: Architecture, inventory: Inventory, settings: TrainingSettings) -> Estimate
    Estimate.to_dict() -> {
        "method", "num_gpus", "settings": {...}, "parameters": {...},
        "per_gpu_bytes": {...MemoryBreakdown's terms...},
        "cpu_bytes", "activations": {...per-layer figures...},
        "rule_of_thumb": {...}, "assumptions": {...}, "notes": [...]}

The per-GPU terms and how they add up to the total are hfmem.memory.breakdown's (`combine`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any

from hfmem.constants import DEFAULT_SEQ_LEN
from hfmem.memory.activations import (
    ActivationEstimate,
    ActivationSettings,
    LayerModules,
    Trainability,
    estimate_activations,
    layer_modules,
)
from hfmem.memory.breakdown import MemoryBreakdown, combine, fits_on
from hfmem.memory.evaluation import eval_forward_bytes
from hfmem.memory.generation import generation_bytes
from hfmem.memory.model_state import (
    ModelState,
    ParameterSplit,
    largest_quantized_matrix,
    lora_targets,
    model_state_bytes,
    module_copies,
    parameter_split,
    quantized_linears,
    quantizes_head,
)
from hfmem.memory.parallel import (
    Layout,
    RankParameters,
    check_layout,
    comm_buffers,
    dense_and_experts,
    gradients_at_peak,
    layout_record,
    rank_activations,
    rank_parameters,
    rank_split,
    summed_states,
)
from hfmem.memory.peft_methods import ADAPTER_KINDS, METHOD_NOTES, PROMPT_METHODS, dora_workspace, is_feedforward
from hfmem.memory.quantization import BaseFormat
from hfmem.memory.settings import NO_MODEL_PARALLELISM, TrainingSettings
from hfmem.memory.zero3_gather import Block, Gathered, GatherLimits, gathered
from hfmem.model.architecture import Architecture
from hfmem.model.inventory import Inventory, retied
from hfmem.units import GIB

_ROOT_COMPONENTS = ("embeddings", "head", "vision", "projector")


@dataclass(frozen=True)
class Estimate:
    """One estimate: settings, parameter split, per-GPU bytes by term, activations, assumptions."""

    settings: TrainingSettings
    seq_len: int
    split: ParameterSplit
    state: ModelState
    activations: ActivationEstimate
    per_gpu_bytes: MemoryBreakdown
    assumptions: dict[str, Any]
    notes: tuple[str, ...] = ()
    model: dict[str, Any] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.per_gpu_bytes.total

    def fits(self, usable_bytes: int) -> bool:
        """Whether it trains on a GPU of `usable_bytes`: paged optimizer states may page out to the CPU."""
        return fits_on(self.per_gpu_bytes, usable_bytes, self.settings)

    def to_dict(self) -> dict[str, Any]:
        settings = self.settings.to_dict() | {"seq_len": self.seq_len}
        return {
            "model": self.model,
            "method": self.settings.method,
            "num_gpus": self.settings.num_gpus,
            "settings": settings,
            "parameters": self.split.to_dict(),
            "per_gpu_bytes": self.per_gpu_bytes.to_dict(),
            "cpu_bytes": self.state.cpu_bytes,
            "phases": phases(self.per_gpu_bytes),
            "bytes_per_param": self.state.bytes_per_param,
            "activations": self.activations.to_dict(),
            "rule_of_thumb": rule_of_thumb(self),
            "assumptions": self.assumptions,
            "notes": list(self.notes),
        }


def phases(per_gpu: MemoryBreakdown) -> dict[str, Any]:
    """The device total of each modelled phase and which is the largest (the one `total` reports)."""
    paged = per_gpu.paged_optimizer
    totals = {"train_step": per_gpu.allocated_peak + per_gpu.overhead + paged,
              "load": per_gpu.load,
              "evaluation": per_gpu.evaluation + paged if per_gpu.evaluation else 0,
              "generation": per_gpu.generation + paged if per_gpu.generation else 0,
              "save": per_gpu.save + paged if per_gpu.save else 0}
    largest = max(totals.items(), key=lambda phase: phase[1])[0]
    return {k: v or None for k, v in totals.items()} | {"train_step": totals["train_step"], "largest": largest}


class Context:
    """What every estimate of one model shares (parameter splits, layer modules), computed once."""

    def __init__(self, arch: Architecture, inventory: Inventory) -> None:
        self.arch = arch
        self.inventory = inventory
        self._splits: dict[tuple, ParameterSplit] = {}
        self.layer_cache: dict = {}
        self._trainability: dict[tuple, Trainability] = {}
        self._views: dict[bool, Context] = {}
        self._gathered: dict[tuple[GatherLimits, bool], Gathered] = {}

    def view(self, settings: TrainingSettings) -> Context:
        """The model as the settings train it: this context, or one whose output head is tied or untied where
        tie_word_embeddings overrides the model's own (each view built once)."""
        tie = settings.tie_word_embeddings
        if tie is None:
            return self
        if tie not in self._views:
            inventory = retied(self.inventory, tie)
            same = inventory is self.inventory
            self._views[tie] = self if same else Context(replace(self.arch, tie_word_embeddings=tie), inventory)
        return self._views[tie]

    def base(self, settings: TrainingSettings) -> BaseFormat | None:
        """The frozen base's quantized format for the settings (None: compute dtype, or a full fine-tune)."""
        return settings.base_format(self.arch.quantization)

    @cached_property
    def modules(self) -> tuple[LayerModules, LayerModules]:
        return layer_modules(self.arch, self.inventory)

    def split(self, settings: TrainingSettings) -> ParameterSplit:
        """The parameter split for the settings (memoised in the settings' view of the model)."""
        ctx = self.view(settings)
        key = settings.memo_key("split")
        if key not in ctx._splits:
            ctx._splits[key] = parameter_split(ctx.arch, ctx.inventory, settings)
        return ctx._splits[key]

    @cached_property
    def layer_parameters(self) -> int:
        """Parameters of the largest decoder layer (what ZeRO-3 / FSDP gather at a time)."""
        arch, by = self.arch, self.inventory.by_component
        layers = max(1, arch.num_layers + arch.encoder_layers)
        common = sum(by.get(k, 0) for k in ("attention", "norms", "ssm", "other")) / layers
        dense = by.get("mlp", 0) / layers
        moe_layers = arch.num_layers - arch.num_dense_layers if arch.is_moe else 0
        experts = (by.get("experts", 0) + by.get("router", 0)) / moe_layers if moe_layers else 0
        return round(common + dense + experts)

    @cached_property
    def root_parameters(self) -> int:
        by = self.inventory.by_component
        return sum(by.get(k, 0) for k in _ROOT_COMPONENTS)

    @cached_property
    def largest_root_unit(self) -> int:
        by = self.inventory.by_component
        return max(by.get(k, 0) for k in _ROOT_COMPONENTS)

    def zero3_gathered(self, settings: TrainingSettings) -> Gathered:
        """The most elements DeepSpeed ZeRO-3 holds gathered in a step of this model, and around its loss, under the
        settings' sizes (persistence threshold Hugging Face's "auto", 10 x hidden): hfmem.memory.zero3_gather."""
        h = self.arch.hidden_size
        bucket = settings.prefetch_bucket_size
        limits = GatherLimits(settings.max_live_parameters, settings.max_reuse_distance,
                              0.9 * h * h if bucket is None else bucket, 10 * h)
        key = (limits, settings.gradient_checkpointing == "full")
        if key not in self._gathered:
            self._gathered[key] = gathered(*self._fetch_units, tied=not self._fetch_units[3], recompute=key[1],
                                           limits=limits)
        return self._gathered[key]

    @cached_property
    def _fetch_units(self) -> tuple[int, tuple[Block, ...], int, int]:
        """(embedding, one layer's blocks, layers, head) as ZeRO-3's hooks fetch the model: per layer, one block per
        component of its linears (attention, MLP, experts, in the inventory's order), each after a norm, an MLP's
        activation after its first linear; the head 0 when tied."""
        by = self.inventory.by_component
        layers = max(1, self.arch.num_layers + self.arch.encoder_layers)
        components: dict[str, list[int]] = {}
        for g in self.inventory.linears:
            if g.component not in _ROOT_COMPONENTS:
                components.setdefault(g.component, []).extend(
                    [g.in_features * g.out_features + (g.out_features if g.has_bias else 0)]
                    * max(1, round(g.count / layers)))
        norm = by.get("norms", 0) // (layers * max(1, len(components)) + 1)
        blocks = tuple(Block(norm, tuple(linears), act=component != "attention")
                       for component, linears in components.items())
        return by.get("embeddings", 0), blocks, layers, by.get("head", 0)

    def dequant_elements(self, head: bool) -> int:
        return largest_quantized_matrix(self.inventory, head)


def trainability(ctx: Context, settings: TrainingSettings) -> Trainability:
    """What gets gradients and how LoRA adapters hold their inputs, for the settings."""
    ctx = ctx.view(settings)
    key = settings.memo_key("trainability")
    if key not in ctx._trainability:
        ctx._trainability[key] = _trainability(ctx, settings)
    return ctx._trainability[key]


def _trainability(ctx: Context, settings: TrainingSettings) -> Trainability:
    if settings.method == "full":
        return Trainability()
    if settings.method in PROMPT_METHODS:
        copies = module_copies(ctx.arch, ctx.inventory, settings.modules_to_save)
        prefix = settings.method == "prefix-tuning"
        # prompt tuning: the trained prompt joins the input embeddings, so every layer's input needs a gradient
        return Trainability(trainable=copies.names, prefix_tokens=settings.num_virtual_tokens if prefix else 0,
                            input_requires_grad=not prefix or settings.gradient_checkpointing != "off")
    groups = lora_targets(ctx.inventory, settings.lora_targets)
    p = settings.precision.compute_bytes
    autocast = settings.precision.autocast
    fp32_adapters = settings.adapter_dtype == "fp32" and p < 4
    base = ctx.base(settings)
    out: float
    if not fp32_adapters:
        copy, out = 0.0, p
    elif base is not None and not base.casts_adapter_input_under_autocast:
        copy, out = (0.0 if autocast else 4.0), (p if autocast else 4.0)  # PEFT's bnb/AWQ LoRA skip the cast
    else:
        copy, out = (float(p) if autocast else 4.0), (p if autocast else 4.0)
    quantized = frozenset(g.name for g in quantized_linears(ctx.inventory, quantizes_head(base, settings))) if base \
        else frozenset()
    legacy = base is not None and base.name == "nf4" and settings.qlora_kernel == "bitsandbytes-legacy"
    copies = module_copies(ctx.arch, ctx.inventory, settings.modules_to_save, quantized)
    # a quantised base's experts are counted as per-expert quantised Linears (method_notes), whose adapters are too
    merged_experts = settings.expert_lora == "merged" and base is None
    return Trainability(
        trainable=copies.names,
        lora=frozenset(g.name for g in groups if g.kind != "experts" or not merged_experts),
        merged=frozenset(g.name for g in groups if g.kind == "experts" and merged_experts),
        kept_inputs=quantized if base is not None and (base.keeps_input or legacy) else frozenset(),
        dequantized=quantized if base is not None and base.saves_dequantized_weight else frozenset(),
        lora_rank=settings.lora_rank,
        adapter_input_bytes=copy,
        adapter_output_bytes=out,
        lora_dropout=settings.lora_dropout,
        input_requires_grad=settings.gradient_checkpointing != "off" or "embed_tokens" in copies.names,
        adapter=ADAPTER_KINDS[settings.method],
        oft_block_size=settings.oft_block_size if settings.method == "oft" else 0,
        boft_block_size=settings.boft_block_size if settings.method == "boft" else 0,
        boft_butterfly=settings.boft_n_butterfly_factor if settings.method == "boft" else 0,
        ia3_feedforward=frozenset(g.name for g in groups if is_feedforward(g) and settings.method == "ia3"),
    )


def activations_for(ctx: Context, settings: TrainingSettings, seq_len: int) -> ActivationEstimate:
    """The activation estimate for validated settings at `seq_len`."""
    ctx = ctx.view(settings)
    step = activation_settings(ctx, settings, seq_len)
    return estimate_activations(ctx.arch, ctx.inventory, step, modules=ctx.modules, cache=ctx.layer_cache)


def activation_settings(ctx: Context, settings: TrainingSettings, seq_len: int) -> ActivationSettings:
    """The step as the activation model sees it, for validated settings at `seq_len`."""
    ctx = ctx.view(settings)
    p = settings.precision.compute_bytes
    base = ctx.base(settings)
    # the weight being dequantised for a matmul (nf4: forward and backward; int8: backward, CB cast to the input's
    # dtype); GPTQ/AWQ's dequantised weights are saved tensors of their layers instead
    dequantizes = base is not None and not base.saves_dequantized_weight
    workspace = ctx.dequant_elements(quantizes_head(base, settings)) * p if dequantizes else 0
    trained = trainability(ctx, settings)
    recipe = settings.precision.recipe if settings.method == "full" else None
    if settings.method == "dora":
        adapter_bytes = round(trained.adapter_input_bytes or trained.adapter_output_bytes)
        workspace += round(dora_workspace(lora_targets(ctx.inventory, settings.lora_targets), settings.lora_rank,
                                          adapter_bytes, settings.precision.weight_bytes))
    if settings.method == "prompt-tuning":  # the virtual tokens are prepended to every sequence
        seq_len += settings.num_virtual_tokens
    return ActivationSettings(
        micro_batch_size=settings.micro_batch_size, seq_len=seq_len, compute_bytes=p,
        residual_bytes=settings.precision.residual_bytes,
        attention=settings.attention, gradient_checkpointing=settings.gradient_checkpointing,
        checkpoint_method=settings.checkpoint_method, checkpoint_layers=settings.checkpoint_layers,
        trained=trained, dequant_workspace=workspace, loss_chunks=settings.loss_chunks,
        fused_loss=settings.fused_loss, weight_bytes=settings.precision.weight_bytes,
        compiled_loss=settings.compile_loss, activation_offloading=settings.activation_offloading,
        compiled_layers=settings.compile_layers, fused_softmax=settings.fused_softmax,
        retained_inputs=trained.kept_inputs if settings.previous_step_alive else frozenset(),
        loss_upcast=settings.loss_upcast, loss_in_place=settings.loss_in_place, repeat_kv=settings.repeat_kv,
        activation=settings.activation_fn,
        padding_mask=settings.padding_mask or trained.prefix_tokens > 0,  # a prefix makes the causal mask explicit
        quantized_input_bytes=recipe.input_bytes if recipe is not None else None,
        moe_probs_in_activation=settings.moe_probs_in_activation,
    )


def state_for(ctx: Context, settings: TrainingSettings) -> ModelState:
    """The per-GPU model state for validated settings."""
    ctx = ctx.view(settings)
    return model_state_bytes(
        ctx.split(settings), settings, hidden_size=ctx.arch.hidden_size,
        layer_parameters=ctx.layer_parameters, root_parameters=ctx.root_parameters,
        largest_root_unit=ctx.largest_root_unit, gathered_peak=_gathered_peak(ctx, settings),
    )


def _gathered_peak(ctx: Context, settings: TrainingSettings, share: float = 1.0) -> int:
    """Elements ZeRO-3 holds gathered around the loss, where the activations peak (0 under any other sharding);
    `share`: the fraction of each layer a model-parallel rank holds."""
    if settings.resolved_sharding != "zero3":
        return 0
    return round(ctx.zero3_gathered(settings).around_loss * share)


def estimate(arch: Architecture, inventory: Inventory, settings: TrainingSettings) -> Estimate:
    """Estimate training memory per GPU for the model and settings (InvalidInputError on bad settings)."""
    return estimate_in(Context(arch, inventory), settings)


def estimate_in(ctx: Context, settings: TrainingSettings) -> Estimate:
    """`estimate` with a shared Context (the fit search reuses one for many settings)."""
    s = settings.validated()
    ctx = ctx.view(s)
    seq = s.resolved_seq_len(ctx.arch.max_position_embeddings)
    check_layout(ctx.arch, s, seq)
    state, act, per_gpu, parallel = per_gpu_parts(ctx, s, seq)
    notes = state.notes + act.notes + method_notes(ctx, s) + layout_notes(parallel)
    return Estimate(
        settings=s, seq_len=seq, split=ctx.split(s), state=state, activations=act, per_gpu_bytes=per_gpu,
        assumptions=assumptions(ctx, s, seq, act) | ({"parallel": parallel} if parallel else {}),
        notes=tuple(dict.fromkeys(notes)),
        model={"model_type": ctx.arch.model_type, "architecture": ctx.arch.architecture,
               "parameters": ctx.inventory.total, "num_layers": ctx.arch.num_layers},
    )


def per_gpu_parts(ctx: Context, s: TrainingSettings, seq: int) -> tuple[
        ModelState, ActivationEstimate, MemoryBreakdown, dict[str, Any] | None]:
    """The model state, activations and per-GPU breakdown of validated settings at `seq`: one GPU's (data
    parallelism aside), or a model-parallel layout's most-loaded rank's with the layout's figures (None without).
    The layout's fit to the model (check_layout) is the caller's: a search over lengths may try any `seq`."""
    layout = Layout.of(s)
    if layout.trivial:
        state = state_for(ctx, s)
        act = activations_for(ctx, s, seq)
        per_gpu = combine(s, ctx.split(s), state, act, eval_forward_bytes(ctx.arch, s, seq),
                          generation_bytes(ctx.arch, s, seq))
        return state, act, per_gpu, None
    _, state, act, per_gpu, parallel = most_loaded_rank(ctx, s, seq, layout)
    return state, act, per_gpu, parallel


def data_parallel_view(s: TrainingSettings) -> TrainingSettings:
    """The settings as the sharding code sees one rank of a model-parallel layout: its DP x CP peers hold the same
    weights and shard their gradients and states over them (ZeRO, FSDP, DDP)."""
    return replace(s, num_gpus=s.shard_ranks, **NO_MODEL_PARALLELISM)


RankEstimate = tuple[ParameterSplit, ModelState, ActivationEstimate, MemoryBreakdown, dict[str, Any]]
"""One rank's split, state, activations, breakdown and layout figures (hfmem.memory.parallel.layout_record)."""


def most_loaded_rank(ctx: Context, s: TrainingSettings, seq: int, layout: Layout) -> RankEstimate:
    """The estimate of the layout's most-loaded rank: the first pipeline stage or the last, whichever needs more
    (or the stage the settings name, pp_stage)."""
    if s.pp_stage is not None:
        return rank_estimate(ctx, s, seq, layout, s.pp_stage)
    return max((rank_estimate(ctx, s, seq, layout, stage) for stage in layout.stages), key=lambda r: r[3].total)


def rank_estimate(ctx: Context, s: TrainingSettings, seq: int, layout: Layout, stage: int) -> RankEstimate:
    """The split, state, activations and breakdown of a rank of pipeline stage `stage` (any rank of it: the TP,
    CP and EP ranks of a stage hold the same amounts), with the layout's figures for the assumptions."""
    whole_split, act = ctx.split(s), activations_for(ctx, s, seq)
    rank = rank_parameters(ctx.arch, ctx.inventory, layout, stage)
    split = rank_split(whole_split, ctx.inventory.total, rank)
    # micro-batches a pipeline runs before its first backward keep no gradients alive, as one micro-batch would
    staged = s if gradients_at_peak(layout, stage) else replace(s, gradient_accumulation_steps=1)
    if rank.experts and layout.ep > 1:
        dense, experts = dense_and_experts(rank)
        expert_ranks = replace(staged, num_gpus=s.num_gpus * s.tp // (s.ep * s.resolved_expert_tp))
        state = summed_states(_rank_state(ctx, whole_split, staged, dense, rank),
                              _rank_state(ctx, whole_split, expert_ranks, experts, rank))
    else:
        state = _rank_state(ctx, whole_split, staged, rank, rank)
    ract = rank_activations(act, ctx.arch, layout, stage)
    buffers = comm_buffers(ctx.arch, layout, stage, s.micro_batch_size, seq, s.precision.compute_bytes)
    per_gpu = combine(s, split, state, ract, eval_forward_bytes(ctx.arch, s, seq),
                      generation_bytes(ctx.arch, s, seq), parallel_buffers=buffers.total)
    return split, state, ract, per_gpu, layout_record(layout, stage, rank, buffers)


def _rank_state(ctx: Context, whole_split: ParameterSplit, s: TrainingSettings, part: RankParameters,
                rank: RankParameters) -> ModelState:
    """The model state of `part` of a rank's parameters, sharded over the settings' DP x CP ranks; `rank`: the whole
    rank's, whose layer and vocabulary units ZeRO-3/FSDP gather."""
    return model_state_bytes(rank_split(whole_split, ctx.inventory.total, part), data_parallel_view(s),
                             hidden_size=ctx.arch.hidden_size, layer_parameters=round(rank.layer),
                             root_parameters=round(rank.vocabulary), largest_root_unit=round(rank.vocabulary),
                             gathered_peak=_gathered_peak(ctx, s, rank.layer / max(1, ctx.layer_parameters)))


def layout_notes(parallel: dict[str, Any] | None) -> tuple[str, ...]:
    """The layout's assumptions worth a line."""
    if parallel is None:
        return ()
    stage = parallel["most_loaded_stage"]
    note = (f"{parallel['layout']}: the most-loaded rank is pipeline stage {stage} "
            f"({parallel['micro_batches_in_flight']:g} micro-batches in flight); weights split by TP within the "
            "stage's layers, experts by EP x TP, gradients and optimizer states sharded over DP x CP "
            "(Megatron-LM theoretical_memory_usage.py; Korthikanti et al. 2022 for activations under TP/SP)")
    return (note,)


def method_notes(ctx: Context, s: TrainingSettings) -> tuple[str, ...]:
    """Method-specific assumptions worth a line."""
    notes = []
    if s.method in {"lora", "qlora"}:
        notes.append("LoRA: 'all-linear' adapts every nn.Linear/Conv1D except the output head (PEFT's rule); "
                     "alpha does not change memory; the frozen path's activations are still kept for backward")
        if any(g.kind == "experts" for g in lora_targets(ctx.inventory, s.lora_targets)):
            how = ("PEFT's ParamWrapper, merged into the weights on each forward" if trainability(ctx, s).merged
                   else "on per-expert nn.Linear modules")
            notes.append(f"LoRA on MoE experts: each expert of the fused 3-D tensors gets its own r·(in+out) adapter "
                         f"({how})")
    if s.method in METHOD_NOTES:
        notes.append(METHOD_NOTES[s.method])
    base = ctx.base(s)
    if base is not None:
        notes.append(_base_note(ctx, s, base))
        if any(g.kind == "experts" for g in ctx.inventory.linears):
            notes.append("QLoRA on MoE: transformers 5's fused expert tensors are assumed quantised like "
                         "transformers 4's per-expert nn.Linear layers (bitsandbytes quantises nn.Linear only)"
                         if base.name == "nf4" else "a quantized base on MoE: fused expert tensors are assumed "
                         "quantised like per-expert nn.Linear layers")
    stored = ctx.arch.quantization
    if stored is not None and (s.method == "full" or s.base_quantization is None):
        notes.append(f"the checkpoint is stored {stored.format}-quantized (config.json quantization_config): "
                     + ("a full fine-tune is estimated on its weights dequantised to the compute dtype"
                        if s.method == "full" else "the frozen base keeps that format"))
    if s.method != "full" and s.precision.recipe is not None:
        notes.append(f"{s.precision.recipe.label} is modelled for a full fine-tune or pretraining: this "
                     f"{s.method} estimate is bf16 mixed precision's")
    if s.method == "full" and s.precision.master_copy:
        notes.append("mixed precision: 16-bit weights and gradients, fp32 master weights and optimizer states "
                     "(ZeRO/DeepSpeed, FSDP mixed precision); use dtype bf16-pure for a bf16-only optimizer state")
    return tuple(notes)


def _base_note(ctx: Context, s: TrainingSettings, base: BaseFormat) -> str:
    """What the quantized base stores and what its matmul keeps for backward, in one line."""
    split = ctx.split(s)
    per_param = split.quantized_bytes / split.frozen_quantized if split.frozen_quantized else 0.0
    if base.name == "nf4":
        kept = "embeddings, norms and biases stay" if s.quantize_head else "embeddings, norms, biases and lm_head stay"
        head = ", the output head included" if s.quantize_head else ""
        return (f"QLoRA: {base.describe()} = {base.matrix_bytes(1, 1):.4f} bytes/param for "
                f"nn.Linear weights{head}; {kept} in the compute dtype; "
                "one weight at a time is dequantised to the compute dtype (workspace)"
                + ("; bitsandbytes < 0.43.2 keeps each 4-bit layer's input for backward"
                   if s.qlora_kernel == "bitsandbytes-legacy" else ""))
    kernel = ("bitsandbytes' MatMul8bitLt keeps each layer's input for backward (an autograd ctx attribute) and "
              "dequantises the weight to the compute dtype in backward (workspace)" if base.name == "int8" else
              "its trainable torch kernel dequantises each weight and matmuls it, so every layer's dequantised "
              "weights are saved for backward")
    return (f"LoRA on a {base.describe()} base: {per_param:.4f} bytes/param for nn.Linear weights; embeddings, "
            f"norms, biases and lm_head stay in the compute dtype; {kernel}")


# Settings shown inside the "lora" and "quantization" entries of the assumptions, not under their own names.
_GROUPED = frozenset({"lora_rank", "lora_targets", "lora_dropout", "adapter_dtype", "qlora_double_quant",
                      "qlora_kernel", "quantize_head", "previous_step_alive"})


def assumptions(ctx: Context, s: TrainingSettings, seq: int, act: ActivationEstimate) -> dict[str, Any]:
    """Every setting an estimate rests on, as data for the renderers: each field under its name, unless resolved,
    grouped or explained below."""
    max_positions = ctx.arch.max_position_embeddings
    derived = {
        "compute_bytes": s.precision.compute_bytes,
        "optimizer": s.resolved_optimizer,
        "seq_len": seq,
        "seq_len_source": "setting" if s.seq_len is not None else (
            "model maximum" if max_positions and max_positions < DEFAULT_SEQ_LEN else f"default {DEFAULT_SEQ_LEN}"),
        "attention_kernel_used": act.attention,
        "sharding": s.resolved_sharding,
        "zero_stage": s.zero_stage,
        "activations_offloaded_bytes": act.offloaded,
        "lora": None if s.method == "full" else {
            "rank": s.lora_rank, "targets": list(s.lora_targets), "dropout": s.lora_dropout,
            "adapter_dtype": s.adapter_dtype, "alpha": "irrelevant to memory",
            "adapted_layers": sorted({g.name for g in lora_targets(ctx.inventory, s.lora_targets)}),
        },
        "quantization": _quantization(ctx, s),
        "overhead": {"cuda_context_gib": s.overhead.cuda_context_gib, "fragmentation": s.overhead.fragmentation},
        "serving": s.serving.to_dict(),  # the serving column's deployment (--method serve); no training term reads it
        "dropout_masks": "1 byte per element (CUDA bool masks)",
        "padding": ("padded to the longest sample, with an attention mask (seq_len is the padded length)"
                    if s.padding_mask else "none (full-length or packed sequences; no padding mask)"),
        "kv_cache": "off in training (use_cache=False; with the config default and no checkpointing, transformers "
                    "would also keep every layer's K and V)",
    }
    plain = {f.name: getattr(s, f.name) for f in fields(s) if f.name not in derived and f.name not in _GROUPED}
    plain = {name: list(value) if isinstance(value, tuple) else value for name, value in plain.items()}  # as JSON
    return plain | derived


def _quantization(ctx: Context, s: TrainingSettings) -> dict[str, Any] | None:
    """The quantized base's format as the estimate assumes it (None: a 16-bit base or a full fine-tune)."""
    base = ctx.base(s)
    if base is None:
        return None
    if base.name == "nf4":
        return {"format": "nf4", "block_size": 64, "double_quant": s.qlora_double_quant,
                "bytes_per_param": base.matrix_bytes(1, 1), "kernel": s.qlora_kernel,
                "lm_head_quantized": s.quantize_head, "previous_step_alive": s.previous_step_alive}
    split = ctx.split(s)
    source = "setting" if s.base_quantization else "config.json quantization_config"
    grouped = {"bits": base.bits, "group_size": base.group_size or "whole input"} if base.name != "int8" else {}
    return {"format": base.name, **grouped, "bytes_per_param": split.quantized_bytes / max(1, split.frozen_quantized),
            "source": source, "lm_head_quantized": False, "previous_step_alive": s.previous_step_alive}


def rule_of_thumb(est: Estimate) -> dict[str, Any]:
    """The napkin rule "VRAM ≈ 6 × params(B) GB" (6 bytes per parameter, whatever the method) beside the model
    state this method really keeps (its bytes_per_param), both in GiB."""
    params = est.split.total
    bpp = est.state.bytes_per_param
    trained = bpp["weights"] + bpp["gradients"] + bpp["master_weights"] + bpp["optimizer_states"]
    stored = est.settings.precision.weight_bytes
    frozen = est.split.frozen_16bit * stored + est.split.quantized_bytes
    state = est.split.trainable * trained + frozen
    per_param = state / params if params else 0.0
    napkin = 6 * est.model["parameters"]  # the model's own count: the rule knows no adapters
    return {"napkin_gib": round(napkin / GIB, 2), "model_state_gib": round(state / GIB, 2),
            "model_state_bytes_per_param": round(per_param, 3)}
