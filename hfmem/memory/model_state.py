"""Model state per GPU: weights, gradients, optimizer states and master weights, sharded and offloaded.

Byte counts per parameter follow the ZeRO paper's accounting (Rajbhandari et al. 2019): mixed
precision keeps 16-bit weights (2) and gradients (2) plus an fp32 master copy (4) and AdamW's two
fp32 moments (8): K = 12 bytes of optimizer state, 16 in all. Pure bf16 keeps the moments in bf16
and no master copy (8 in all); fp32 keeps everything in fp32 (16). ZeRO stage 1 shards the K
bytes over N GPUs, stage 2 also the gradients, stage 3 also the weights (FSDP full shard = stage 3,
shard-grad-op = stage 2). Sharding adds its own buffers: DDP's gradient buckets (a full copy of the
gradients unless gradient_as_bucket_view), ZeRO's reduce bucket and fp32 gradient partition, the
gathered parameters of the layers being computed (and FSDP's root unit: embeddings and head).
Pure functions; no torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from hfmem.errors import InvalidInputError
from hfmem.memory.lowprecision import Recipe, scaling_state, weight_copies
from hfmem.memory.optimizers import OptimizerState, optimizer_state as memory_optimizer_state
from hfmem.memory.peft_methods import PROMPT_METHODS, adapters, prompt_adapters
from hfmem.memory.quantization import BaseFormat
from hfmem.memory.settings import MEMORY_OPTIMIZERS, TrainingSettings
from hfmem.model.architecture import Architecture
from hfmem.model.inventory import Inventory, LinearGroup

BNB_8BIT_BLOCK = 256
"""bitsandbytes' blockwise 8-bit optimizers keep one fp32 absmax per 256 values of each state."""

DEEPSPEED_REDUCE_BUCKET_ELEMENTS = None
"""None: Hugging Face's "auto" value, hidden_size² elements (DeepSpeed's own default is 5e8)."""


@dataclass(frozen=True)
class ParameterSplit:
    """How a model's parameters are held for a training method."""

    total: int
    trainable: int
    frozen_16bit: int
    """Frozen parameters kept in the compute dtype (LoRA base; QLoRA's embeddings, norms, head)."""
    frozen_quantized: int
    """Frozen parameters stored quantized (QLoRA's linear weights, a GPTQ/AWQ/int8 base's)."""
    trainable_matrices: tuple[tuple[int, int, int], ...]
    """(rows, cols, count) of trainable matrices, for Adafactor's factored states."""
    trainable_vectors: int
    """Trainable parameters outside matrices (norms, biases), for Adafactor."""
    largest_trainable: int
    """Size of the largest single trainable tensor (optimizer-in-backward keeps one gradient)."""
    matmul_parameters: int = 0
    """Weights of the model's matmuls (linear layers, experts, head): what autocast copies to 16 bits."""
    trainable_copies: int = 0
    """Trainable parameters of whole-module copies (PEFT modules_to_save), kept in the model's dtype; part of
    `trainable`, the rest of which are adapters."""
    quantized_bytes: float = 0.0
    """Bytes of the `frozen_quantized` weights in their format, every tensor of it included."""
    last_trainable: int = 0
    """Trainable parameters whose gradients appear last in backward, during or after the first decoder layer's
    backward: that layer's own and an untied input embedding's."""
    frozen_adapters: int = 0
    """Frozen adapter parameters held in the adapter dtype (LoRA-FA's A, VeRA's shared projections); in `total`."""
    hidden_matrices: tuple[tuple[int, int, int], ...] = ()
    """(rows, cols, count) of the trained 2-D matrices inside the decoder (not embeddings or head): what GaLore
    and APOLLO project and Muon orthogonalises (hfmem.memory.optimizers)."""
    decoder_linear_weights: int = 0
    """Weights of the decoder's linear layers and experts (the head excluded): what a low-precision recipe
    quantizes (hfmem.memory.lowprecision)."""
    decoder_gemms: int = 0
    """The decoder's GEMMs of the whole model (one per linear layer and expert), each with its recipe's quantizers."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for internal in ("trainable_matrices", "trainable_copies", "quantized_bytes", "frozen_adapters",
                         "hidden_matrices", "decoder_linear_weights", "decoder_gemms"):
            data.pop(internal)
        return data


def lora_targets(inventory: Inventory, targets: tuple[str, ...]) -> tuple[LinearGroup, ...]:
    """The linear groups a LoRA config adapts: names match the leaf module name (PEFT's suffix rule).

    "all-linear" is every nn.Linear / Conv1D except the output head, as PEFT does; fused MoE expert
    tensors are adapted per expert, like transformers 4's per-expert Linears (and PEFT's
    target_parameters on transformers 5).
    """
    every = "all-linear" in targets
    names = {t.rsplit(".", 1)[-1] for t in targets if t != "all-linear"}
    chosen = []
    for g in inventory.linears:
        leaf = g.name.rsplit(".", 1)[-1]
        if g.component == "head":
            if "lm_head" in names or g.name in names:
                chosen.append(g)
            continue
        if every or leaf in names or g.name in names or (g.kind == "experts" and _expert_alias(leaf) & names):
            chosen.append(g)
    if not chosen:  # PEFT refuses this too ("Target modules ... not found in the base model")
        leaves = sorted({g.name.rsplit(".", 1)[-1] for g in inventory.linears})
        raise InvalidInputError(f"lora_targets {','.join(targets)} match no linear layer of this model; "
                                f"its layers: {','.join(leaves)} (or all-linear).")
    return tuple(chosen)


def _expert_alias(leaf: str) -> set[str]:
    """A fused gate_up_proj tensor answers to the names of the Linears it replaced."""
    if leaf == "gate_up_proj":
        return {"gate_up_proj", "gate_proj", "up_proj", "w1", "w3"}
    if leaf == "down_proj":
        return {"down_proj", "w2"}
    return {leaf}


def lora_parameters(groups: tuple[LinearGroup, ...], rank: int) -> int:
    """Trainable LoRA parameters: r·(in + out) per adapted matrix (A is r×in, B is out×r)."""
    return sum(g.count * rank * (g.in_features + g.out_features) for g in groups)


def quantized_linears(inventory: Inventory, head: bool = False) -> tuple[LinearGroup, ...]:
    """The linears a quantized base replaces: every nn.Linear / Conv1D, the output head only when `head`
    (transformers skips it; LitGPT's Fabric plugin does not); fused expert tensors counted as quantized
    (assumption: as transformers 4's per-expert Linears)."""
    return tuple(g for g in inventory.linears if head or g.component != "head")


def largest_quantized_matrix(inventory: Inventory, head: bool = False) -> int:
    """Elements of the largest quantized weight: its kernel dequantizes one at a time into the compute dtype."""
    return max((g.in_features * g.out_features for g in quantized_linears(inventory, head)), default=0)


def quantizes_head(base: BaseFormat | None, settings: TrainingSettings) -> bool:
    """Whether the output head is quantized too: only NF4 with quantize_head (LitGPT); transformers' GPTQ, AWQ
    and bitsandbytes integrations leave lm_head in the compute dtype."""
    return base is not None and base.name == "nf4" and settings.quantize_head


def quantized_bytes(base: BaseFormat, groups: tuple[LinearGroup, ...]) -> float:
    """Bytes of the quantized weights of `groups` in the base's format."""
    if base.name == "nf4":  # bitsandbytes quantises the flattened weight: bytes per weight, whatever the shape
        return sum(g.count * g.in_features * g.out_features for g in groups) * base.matrix_bytes(1, 1)
    return sum(g.count * base.matrix_bytes(g.in_features, g.out_features) for g in groups)


INPUT_EMBEDDINGS = frozenset({"embed_tokens", "wte", "word_embeddings", "embed_in", "tok_embeddings", "shared"})
"""Leaf names of the input token embedding across families (Llama, GPT-2, BLOOM/Falcon, GPT-NeoX, torchtune, T5)."""


@dataclass(frozen=True)
class ModuleCopies:
    """The trainable copies PEFT's ModulesToSaveWrapper makes of modules_to_save (the originals stay frozen)."""

    names: frozenset[str]
    """The trained modules as the activation model names them (the input embedding as embed_tokens)."""
    parameters: int = 0
    """Parameters of the copies (weights and biases)."""
    matrices: tuple[tuple[int, int, int], ...] = ()
    """(rows, cols, count) of the copies' weights, for Adafactor's factored states."""
    vectors: int = 0
    """The copies' biases."""
    largest: int = 0
    """Elements of the largest copied weight."""
    matmul: int = 0
    """Weights of the copied linear layers (what autocast copies to 16 bits; an embedding is no matmul)."""


def module_copies(arch: Architecture, inventory: Inventory, names: tuple[str, ...],
                  quantized: frozenset[str] = frozenset()) -> ModuleCopies:
    """The copies of `names`: the input embedding (vocab x hidden) or every linear layer of that leaf name;
    InvalidInputError for a name that matches neither, or a layer stored quantized (it has no trainable copy)."""
    trained, params, matrices, vectors, largest, matmul = set(), 0, [], 0, 0, 0
    for name in names:
        if name in INPUT_EMBEDDINGS:
            trained.add("embed_tokens")
            params += arch.vocab_size * arch.hidden_size
            matrices.append((arch.vocab_size, arch.hidden_size, 1))
            largest = max(largest, arch.vocab_size * arch.hidden_size)
            continue
        groups = [g for g in inventory.linears if name in {g.name, g.name.rsplit(".", 1)[-1]}]
        if not groups:
            raise InvalidInputError(f"modules_to_save: {name!r} matches no module of this model; give its input "
                                    "embedding (embed_tokens) or linear layers by leaf name (lm_head).")
        if any(g.name in quantized for g in groups):
            raise InvalidInputError(f"modules_to_save: {name!r} is stored quantized in this base; a quantized "
                                    "layer has no trainable copy.")
        trained.add(name)
        for g in groups:
            params += g.parameters
            matrices.append((g.out_features, g.in_features, g.count))
            vectors += g.count * g.out_features if g.has_bias else 0
            largest = max(largest, g.in_features * g.out_features)
            matmul += g.count * g.in_features * g.out_features
    return ModuleCopies(frozenset(trained), params, tuple(matrices), vectors, largest, matmul)


def parameter_split(arch: Architecture, inventory: Inventory, settings: TrainingSettings) -> ParameterSplit:
    """Trainable vs frozen (16-bit or quantized) parameter counts for the settings' method."""
    total = inventory.total
    matmul = sum(g.count * g.in_features * g.out_features for g in inventory.linears)
    if settings.method == "full":
        head_tied = inventory.by_component.get("head", 0) == 0
        matrices = tuple((g.out_features, g.in_features, g.count) for g in inventory.linears
                         if not (g.component == "head" and head_tied))
        embed = inventory.by_component.get("embeddings", 0)
        embed_rows = (arch.vocab_size, arch.hidden_size,
                      max(1, round(embed / max(1, arch.vocab_size * arch.hidden_size))))
        in_matrices = sum(r * c * n for r, c, n in matrices)
        vectors = max(0, total - in_matrices - embed)
        largest = max([r * c for r, c, _ in matrices] + [arch.vocab_size * arch.hidden_size])
        outside = sum(inventory.by_component.get(k, 0) for k in ("embeddings", "head", "vision", "projector"))
        # a first MoE layer's fused expert tensors get their whole gradients as its MoE block's backward starts,
        # before the block's working-set peak (transformers' experts: one 3-D parameter per projection)
        experts = inventory.by_component.get("experts", 0) if arch.is_moe and not arch.num_dense_layers else 0
        last = round((total - outside - experts) / _layer_count(arch)) + (0 if head_tied else embed)
        hidden = tuple((g.out_features, g.in_features, g.count) for g in inventory.linears if g.component != "head")
        return ParameterSplit(total, total, 0, 0, (*matrices, embed_rows), vectors, largest, matmul,
                              last_trainable=last, hidden_matrices=hidden,
                              decoder_linear_weights=sum(r * c * n for r, c, n in hidden),
                              decoder_gemms=sum(n for _, _, n in hidden))
    r = settings.lora_rank
    if settings.method in PROMPT_METHODS:
        added = prompt_adapters(settings.method, arch, settings.num_virtual_tokens)
        last = 0
    else:
        groups = lora_targets(inventory, settings.lora_targets)
        block = settings.boft_block_size if settings.method == "boft" else settings.oft_block_size
        added = adapters(settings.method, groups, r, block, settings.boft_n_butterfly_factor)
        decoder = adapters(settings.method, tuple(g for g in groups if g.component != "head"), r, block,
                           settings.boft_n_butterfly_factor)
        last = round(decoder.trainable / _layer_count(arch))
    base = settings.base_format(arch.quantization)
    quantized = quantized_linears(inventory, quantizes_head(base, settings)) if base else ()
    copies = module_copies(arch, inventory, settings.modules_to_save, frozenset(g.name for g in quantized))
    trainable = added.trainable + copies.parameters
    matrices = added.matrices + copies.matrices
    vectors = added.vectors + copies.vectors
    largest = max(added.largest, copies.largest)
    whole = total + trainable + added.frozen
    hidden = () if settings.method in PROMPT_METHODS else added.matrices
    if base is None:
        return ParameterSplit(whole, trainable, total, 0, matrices, vectors, largest,
                              matmul + added.matmul + copies.matmul, copies.parameters, last_trainable=last,
                              frozen_adapters=added.frozen, hidden_matrices=hidden)
    n_quantized = sum(g.count * g.in_features * g.out_features for g in quantized)
    return ParameterSplit(whole, trainable, total - n_quantized, n_quantized, matrices, vectors,
                          largest, added.matmul + copies.matmul, copies.parameters, quantized_bytes(base, quantized),
                          last_trainable=last, frozen_adapters=added.frozen, hidden_matrices=hidden)


def _layer_count(arch: Architecture) -> int:
    """Decoder and encoder layers: what per-layer shares divide by."""
    return max(1, arch.num_layers + arch.encoder_layers)


@dataclass(frozen=True)
class ModelState:
    """Bytes per GPU (and per host, for offload) of the model's state."""

    weights: int
    gradients: int
    master_weights: int
    optimizer_states: int
    sharding_buffers: int
    cpu_bytes: int
    gradients_persist: bool
    """True when gradients stay allocated through the forward pass (ZeRO's partitions, accumulation)."""
    step_transient: int
    """Allocated only inside optimizer.step(), when activations are gone (DeepSpeed's fp32 gradient
    partition, foreach AdamW's sqrt(v) buffer)."""
    forward_transient: int
    """Alive from the forward through the backward, on top of activations: autocast's 16-bit weight copies."""
    paged_optimizer: int
    """Optimizer states in CUDA managed memory (bitsandbytes paged optimizers): on the device, outside
    PyTorch's allocator statistics; part of `optimizer_states`."""
    load_peak: int
    """Allocated on the GPU while loading, before sharding (per-rank-gpu loading of a sharded model: the whole
    model plus one unit being flattened); 0 where loading stays below the training step."""
    host_load_bytes: int
    """Host RAM of a loading rank: the whole model (every rank with per-rank-cpu, rank 0 alone with rank0)."""
    save_gathered: int
    """Gathered on each GPU while a sharded run saves a full checkpoint (FSDP: the root unit and one layer's unit
    unsharded in their sharded dtype; ZeRO-3: the largest module's 16-bit weights); 0 when it saves shards."""
    generation_gathered: int
    """Gathered on each GPU while it generates: under ZeRO-3 with generation_gathers_weights, the weights it does
    not hold (the whole model less its shard); 0 otherwise."""
    host_save_bytes: int
    """Host RAM rank 0 holds while saving a full checkpoint of a sharded run (the larger of the whole model's
    state dict and, under FSDP, the whole optimizer state); 0 when each rank saves its shard."""
    bytes_per_param: dict[str, float]
    notes: tuple[str, ...] = ()
    backward_buffers: int = 0
    """The part of `sharding_buffers` alive only while the layers run backward, not at the end of the forward where
    the activations peak (FSDP: a unit's unsharded gradients and its reduce-scatter input)."""
    quantized_weight_copies: int = 0
    """A low-precision recipe's quantized copies of the decoder's linear weights (TransformerEngine: FP8 data and
    transpose, MXFP8/NVFP4 both directions with their block scales), alive from the forward through the backward."""
    scaling_state: int = 0
    """TE delayed scaling's amax histories and scales, resident for the whole run."""
    nvme_bytes: int = 0
    """NVMe space per rank for offload_device nvme: the swapped optimizer states, fp32 master weights and gradient
    partitions, and the parameters beyond param_max_in_cpu (`nvme_param_bytes` of it)."""
    nvme_param_bytes: int = 0
    """The part of `nvme_bytes` that is parameters, read in every forward and backward."""

    @property
    def optimizer(self) -> int:
        """ZeRO's K·Ψ: optimizer states plus the fp32 master copy."""
        return self.master_weights + self.optimizer_states

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["optimizer"] = self.optimizer
        data["notes"] = list(self.notes)
        return data


def optimizer_state_bytes(optimizer: str, split: ParameterSplit, groups: tuple[tuple[int, int], ...]) -> float:
    """Optimizer state bytes for the trainable parameters, in `groups` of (parameters, bytes per state value:
    4 fp32 or 2 bf16), adapters in their dtype and whole-module copies in the model's."""
    if optimizer == "adafactor":
        # HF Adafactor (beta1=None): factored second moment, row + column vectors per matrix, in fp32.
        factored = sum((rows + cols) * count for rows, cols, count in split.trainable_matrices)
        return 4 * (factored + split.trainable_vectors)
    return sum(_states(optimizer, n, state_bytes) for n, state_bytes in groups)


BLOCK_OPTIMIZERS = {"badam": 1, "lisa": 2}
"""Block-wise optimizers and their active decoder layers by default: BAdam's block of one layer (LLaMA-Factory
badam_mode layer), LISA's lisa_activated_layers (2 in LMFlow's finetuner arguments)."""


def optimizer_state(optimizer: str, split: ParameterSplit, groups: tuple[tuple[int, int], ...],
                    settings: TrainingSettings) -> OptimizerState:
    """A memory-saving optimizer's state (hfmem.memory.optimizers) at the groups' mean bytes per state value;
    BAdam and LISA keep AdamW's two moments for the parameters they train at a time (`_active_block`)."""
    n = sum(count for count, _ in groups)
    e = sum(count * bytes_ for count, bytes_ in groups) / n if n else 4.0
    if optimizer in BLOCK_OPTIMIZERS:
        return OptimizerState(2 * e * n)
    return memory_optimizer_state(optimizer, split.trainable, split.hidden_matrices, e, settings.galore_rank,
                                  matrices=split.trainable_matrices, largest=split.largest_trainable)


def _active_block(t: _Terms, settings: TrainingSettings, split: ParameterSplit, b: _ElementBytes,
                  layer_parameters: int, root_parameters: int) -> None:
    """BAdam/LISA: gradients, master weights and optimizer states only for the active layers (and, for LISA, the
    embeddings and head it always trains); the other weights stay frozen in the compute dtype."""
    optimizer = settings.resolved_optimizer
    layers = settings.active_layers or BLOCK_OPTIMIZERS[optimizer]
    active = min(split.trainable, layers * layer_parameters + (root_parameters if optimizer == "lisa" else 0))
    share = active / split.trainable if split.trainable else 0.0
    t.grads *= share
    t.masters *= share
    t.states *= share
    t.optimized = active
    if optimizer == "badam" and not b.master and b.train_w < 4:
        # BAdam's BlockOptimizer keeps an fp32 copy of the active block and steps it (badam/block_optim.py
        # param_idx2hp), whatever the model's 16-bit dtype: fp32 master weights and AdamW states for `active`
        t.masters = 4.0 * active
        t.states = 8.0 * active
    t.notes.append(f"{'BAdam' if optimizer == 'badam' else 'LISA'}: {layers} decoder layer(s) trained at a time"
                   + (" with the embeddings and head" if optimizer == "lisa" else "")
                   + f" ({active / 1e6:,.0f}M parameters): only they hold gradients, fp32 master weights and AdamW "
                   "states; activations are counted as a full fine-tune's (an upper bound)")


def _states(optimizer: str, n: int, state_bytes: int) -> float:
    """One group's state bytes for an elementwise optimizer."""
    if optimizer == "paged_adamw":
        return 2 * 4 * n  # bitsandbytes' 32-bit optimizers keep fp32 states whatever the parameter dtype
    if optimizer in {"adamw", "adamw_foreach"}:
        return 2 * state_bytes * n  # torch keeps the moments in the parameter's dtype
    if optimizer in {"adamw_8bit", "paged_adamw_8bit"}:
        return n * (2 + 2 * 4 / BNB_8BIT_BLOCK)
    if optimizer in {"sgd_momentum", "lion"}:
        return state_bytes * n
    if optimizer == "sgd":
        return 0.0
    raise ValueError(f"unknown optimizer {optimizer!r}")


@dataclass
class _Terms:
    """The state's terms while sharding and offload rework them: bytes as floats, rounded once at the end."""

    weights: float
    grads: float
    masters: float
    states: float
    buffers: float = 0.0
    backward: float = 0.0
    cpu: float = 0.0
    nvme: float = 0.0
    nvme_params: float = 0.0
    step: float = 0.0
    persist: bool = False
    optimized: float | None = None
    """Parameters the optimizer holds at a time, when fewer than the trainable ones (BAdam's, LISA's active layers)."""
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _ElementBytes:
    """Bytes per element for the settings: trained weight and gradient, stored (frozen) weight, master, state."""

    train_w: int
    train_g: int
    stored: int
    master: int
    state: int


def _element_bytes(settings: TrainingSettings, whole: bool = False) -> _ElementBytes:
    """Bytes per element of the method's trained weights; `whole`: of weights trained as the model holds them
    (a full fine-tune, or LoRA's modules_to_save copies, which keep the model's dtype)."""
    p = settings.precision
    stored = p.weight_bytes  # a weight as the model holds it (frozen, or trained in a full fine-tune)
    if settings.method == "full" or whole:
        train_w, train_g = p.weight_bytes, p.gradient_bytes
    else:
        train_w = train_g = 4 if settings.adapter_dtype == "fp32" or stored == 4 else stored
    master = 4 if (p.master_copy and train_w < 4) else 0  # AMP keeps fp32 weights instead of a master copy
    if settings.grad_dtype == "fp32":
        train_g = 4  # Megatron's main_grad: gradients accumulate in an fp32 buffer whatever the weights' dtype
    if master and settings.optimizer_dtype == "bf16":  # bf16 moments; a bf16 copy only of weights held in FP8
        return _ElementBytes(train_w, train_g, stored, 2 if settings.fp8_params else 0, 2)
    if master and settings.master_remainders and p.name != "fp16":
        master = 2  # the low 16 bits of each fp32 master weight, beside the bf16 weight
    return _ElementBytes(train_w, train_g, stored, master, 4 if (master or train_w == 4) else 2)


@dataclass(frozen=True)
class _Units:
    """What sharding gathers and buckets: two decoder layers, the root unit, DeepSpeed's reduce bucket."""

    layer_parameters: int
    root_parameters: int
    largest_root_unit: int
    gathered: float
    """Bytes of two gathered decoder layers, in their stored (for QLoRA, 4-bit) form."""
    reduce_bucket: float
    gathered_peak: int
    """Elements DeepSpeed ZeRO-3 holds gathered around the loss (hfmem.memory.zero3_gather)."""


def model_state_bytes(
    split: ParameterSplit,
    settings: TrainingSettings,
    *,
    hidden_size: int,
    layer_parameters: int,
    root_parameters: int,
    largest_root_unit: int,
    gathered_peak: int,
) -> ModelState:
    """Per-GPU model state for the split and settings (sharding, offload, optimizer, dtype).

    layer_parameters: parameters of one decoder layer (ZeRO-3/FSDP gather two at a time);
    root_parameters: those outside the decoder layers (FSDP's root unit: embeddings, head, final norm);
    largest_root_unit: the largest of them (embeddings or head) when each is an FSDP unit of its own;
    gathered_peak: the elements ZeRO-3 holds gathered around the loss, where activations peak (memory.zero3_gather).
    """
    b, c = _element_bytes(settings), _element_bytes(settings, whole=True)
    optimizer = settings.resolved_optimizer
    copies = split.trainable_copies
    adapters = split.trainable - copies
    groups = ((adapters, b.state), (copies, c.state))
    memory_saving = optimizer_state(optimizer, split, groups, settings) if optimizer in MEMORY_OPTIMIZERS else None
    t = _Terms(weights=((adapters + split.frozen_adapters) * b.train_w + copies * c.train_w
                        + split.frozen_16bit * b.stored + split.quantized_bytes),
               grads=adapters * b.train_g + copies * c.train_g, masters=adapters * b.master + copies * c.master,
               states=memory_saving.states if memory_saving else optimizer_state_bytes(optimizer, split, groups))
    if memory_saving is not None:
        t.step += memory_saving.step
        t.notes += [memory_saving.note] if memory_saving.note else []
        if memory_saving.one_gradient:
            t.grads = split.largest_trainable * b.train_g
            t.notes.append("layer-wise optimizer: each parameter steps in its post-accumulate-grad hook and frees "
                           "its gradient (one tensor's gradient alive); transformers' Trainer allows it on one GPU "
                           "without gradient accumulation only")
    if optimizer in BLOCK_OPTIMIZERS and settings.method == "full":
        _active_block(t, settings, split, b, layer_parameters, root_parameters)
    per_param = {
        "weights": _per_param(split, b.train_w, c.train_w), "gradients": _per_param(split, b.train_g, c.train_g),
        "master_weights": _per_param(split, b.master, c.master),
        "optimizer_states": t.states / split.trainable if split.trainable else 0.0,
    }
    autocast_copies = 0.0
    if settings.precision.weight_copies:
        autocast_copies = split.matmul_parameters * 2
        t.notes.append("AMP: autocast keeps a 16-bit copy of every matmul weight for backward")
    recipe = settings.precision.recipe if settings.method == "full" else None
    quantized_copies = weight_copies(recipe, split.decoder_linear_weights) if recipe else 0.0
    scaling = scaling_state(recipe, split.decoder_gemms, settings.fp8_amax_history_len) if recipe else 0.0
    if recipe:
        t.notes.append(recipe_note(recipe, settings.fp8_amax_history_len))
    if recipe and settings.fp8_params:
        t.weights -= split.decoder_linear_weights * c.train_w
        t.notes.append("fp8_params: the decoder linears' weights are their quantized copies only (no 16-bit weight)")
    if settings.optimizer_in_backward:
        t.grads = split.largest_trainable * b.train_g
        t.notes.append("optimizer in backward: each gradient is applied and freed at once "
                       "(one tensor's gradient alive)")
    units = _units(split, b, t.weights, hidden_size, layer_parameters, root_parameters, largest_root_unit,
                   gathered_peak)
    if settings.fp8_all_gather and settings.resolved_sharding == "fsdp_full_shard":
        units = replace(units, gathered=units.gathered - _float8_gathered_saving(split, b, layer_parameters,
                                                                                 root_parameters))
        t.notes.append("torchao float8 all-gather: FSDP2 gathers the decoder linears' weights in float8 (1 byte)")
    whole_model, whole_states = t.weights, t.states
    sharding = settings.resolved_sharding
    if sharding == "ddp" and not settings.grad_bucket_view:
        t.buffers += t.grads  # DDP's reducer keeps the gradients again in its flat buckets
        t.notes.append("DDP: gradient buckets hold a second copy of the gradients (gradient_as_bucket_view=False)")
    elif sharding in {"zero1", "zero2", "zero3"}:
        _zero(t, settings, split, b, units)
    elif sharding in {"fsdp_full_shard", "fsdp_shard_grad_op"}:
        _fsdp(t, settings, split, b, units)
    if sharding in {"ddp", "zero1", "zero2"} and settings.grad_bucket_view:
        t.persist = True  # the buckets are allocated once: the gradients they hold exist through the forward too
        t.notes.append("gradients are views of the data-parallel buckets, allocated once and alive through the forward "
                       "(Megatron's gradient buffer, gradient_as_bucket_view=True)")
    if optimizer == "adamw_foreach":
        t.step += t.states / 2  # torch._foreach_sqrt(exp_avg_sq): one more buffer the size of a moment
    _offload(t, settings, b, units, split)
    stage = settings.zero_stage or 0
    load_peak, host_load = _loading(settings, whole_model, units, b)
    save_gathered, host_save = _saving(settings, split, b, whole_states, units)
    gathers_to_generate = _gathers_to_generate(settings)
    if gathers_to_generate:
        t.notes.append("generation under ZeRO-3: every GPU gathers the whole model's weights to generate (TRL's "
                       "ds3_gather_for_generation)")
    if host_save:
        t.notes.append("full checkpoint save: rank 0's host gathers the whole model's state dict"
                       + (" and then the whole optimizer state" if sharding.startswith("fsdp") else "")
                       + "; each GPU unshards one unit at a time")
    if load_peak:
        t.notes.append("per-rank-gpu loading: each GPU holds the whole model (and one unit being flattened) before "
                       "sharding; the fit uses that phase where it is the larger")
    return ModelState(
        weights=round(t.weights),
        gradients=round(t.grads),
        master_weights=round(t.masters),
        optimizer_states=round(t.states),
        sharding_buffers=round(t.buffers),
        backward_buffers=round(t.backward),
        cpu_bytes=round(t.cpu),
        nvme_bytes=round(t.nvme),
        nvme_param_bytes=round(t.nvme_params),
        gradients_persist=t.persist or settings.gradient_accumulation_steps > 1,
        step_transient=round(t.step) if not settings.offload_optimizer else 0,
        forward_transient=round(autocast_copies / (settings.num_gpus if stage >= 3 else 1)),
        paged_optimizer=round(t.states) if optimizer.startswith("paged") else 0,
        load_peak=round(load_peak),
        host_load_bytes=round(host_load),
        save_gathered=round(save_gathered),
        generation_gathered=round(whole_model - t.weights) if gathers_to_generate else 0,
        host_save_bytes=round(host_save),
        bytes_per_param=per_param,
        notes=tuple(t.notes),
        quantized_weight_copies=round(quantized_copies * (min(1.0, 2 * layer_parameters / max(1, split.total))
                                                          if sharding == "fsdp_full_shard" else 1.0)),
        scaling_state=round(scaling),
    )


def recipe_note(r: Recipe, amax_history_len: int) -> str:
    """What a low-precision recipe adds to bf16 mixed precision, in one line."""
    copies = (f"keeps {r.weight_copy_bytes:.4g} bytes per decoder-linear weight of quantized copies (both GEMM "
              "directions) from the forward through the backward" if r.weight_copy_bytes else
              "casts each weight on the fly and keeps no quantized copy")
    inputs = (f"saves each decoder linear's input at {r.input_bytes:.4g} bytes per element" if r.input_bytes else
              "saves the bf16 inputs (its activations are bf16 mixed precision's)")
    history = (f"; amax history of {amax_history_len} per quantizer, 5 quantizers per GEMM" if r.delayed_scaling
               else "")
    return (f"{r.label}: bf16 weights and gradients, fp32 master weights and states as bf16 mixed precision; "
            f"{copies}; {inputs}{history}; the output head stays bf16 ({r.source}). Its step time runs the "
            "decoder linears' GEMMs the recipe's measured speedup over bf16 faster (TransformerEngine's GEMM "
            "benchmark: delayed scaling 1.69x on Hopper) and the attention core and head at bf16's rate")


def _loading(settings: TrainingSettings, whole_model: float, units: _Units, b: _ElementBytes) -> tuple[float, float]:
    """(GPU bytes while loading where that exceeds the sharded weights, host bytes per rank while loading)."""
    sharded = (settings.zero_stage or 0) >= 3 and settings.num_gpus > 1
    gpu = (whole_model + units.layer_parameters * b.stored
           if sharded and settings.model_loading == "per-rank-gpu" else 0.0)
    host = 0.0 if settings.model_loading == "per-rank-gpu" else whole_model
    return gpu, host


def _gathers_to_generate(settings: TrainingSettings) -> bool:
    """Whether generating gathers the whole model on every GPU (TRL under ZeRO-3, ds3_gather_for_generation)."""
    return (settings.generation_batch_size is not None and settings.generation_gathers_weights
            and settings.resolved_sharding == "zero3" and settings.num_gpus > 1)


def saves_full(settings: TrainingSettings) -> bool:
    """Whether a sharded run gathers a full checkpoint on rank 0 to save it (FSDP, or ZeRO-3 gathering its 16-bit
    weights, with state_dict_type full on several GPUs); other setups save without gathering."""
    sharding = settings.resolved_sharding
    return (settings.state_dict_type == "full" and settings.num_gpus > 1
            and (sharding.startswith("fsdp") or sharding == "zero3"))


def _saving(settings: TrainingSettings, split: ParameterSplit, b: _ElementBytes, whole_states: float,
            units: _Units) -> tuple[float, float]:
    """(GPU bytes gathered while saving a full checkpoint, rank 0's host bytes) of a sharded run. FSDP's full state
    dict holds each parameter as its sharded copy keeps it (the fp32 master under mixed precision), its full
    optimizer state every state, one after the other; ZeRO-3 gathers the 16-bit weights alone, module by module
    (its optimizer states stay in per-rank files)."""
    if not saves_full(settings):
        return 0.0, 0.0
    frozen = split.frozen_16bit * b.stored + split.quantized_bytes
    if settings.resolved_sharding == "zero3":
        return units.largest_root_unit * b.stored, frozen + split.trainable * b.train_w
    kept = b.master or b.train_w
    root = units.largest_root_unit if settings.fsdp_wrap_embeddings else units.root_parameters
    return (root + units.layer_parameters) * kept, max(frozen + split.trainable * kept, whole_states)


def _per_param(split: ParameterSplit, adapter: int, copy: int) -> float:
    """Bytes per trainable parameter of one term: the adapters', or their mean with the module copies'."""
    if not split.trainable_copies:
        return float(adapter)
    return ((split.trainable - split.trainable_copies) * adapter + split.trainable_copies * copy) / split.trainable


def _float8_gathered_saving(split: ParameterSplit, b: _ElementBytes, layer_parameters: int,
                            root_parameters: int) -> float:
    """Bytes two gathered decoder layers save when FSDP2 gathers their linear weights in float8 (1 byte) instead of
    their stored dtype: the linear weights' share of the decoder's parameters, times two layers."""
    decoder = max(1, split.total - root_parameters)
    linear = min(1.0, split.decoder_linear_weights / decoder)
    return min(2 * layer_parameters, split.total) * linear * max(0, b.stored - 1)


def _units(split: ParameterSplit, b: _ElementBytes, weights: float, hidden_size: int, layer_parameters: int,
           root_parameters: int, largest_root_unit: int, gathered_peak: int) -> _Units:
    elements = DEEPSPEED_REDUCE_BUCKET_ELEMENTS or hidden_size * hidden_size
    reduce_bucket = min(elements, split.trainable) * b.train_g
    gathered: float = min(2 * layer_parameters, split.total) * b.stored
    if split.frozen_quantized and split.total:
        gathered = gathered * (weights / max(1, split.total * b.stored))  # gathered in their stored (4-bit) form
    return _Units(layer_parameters, root_parameters, largest_root_unit, gathered, reduce_bucket, gathered_peak)


def _zero(t: _Terms, settings: TrainingSettings, split: ParameterSplit, b: _ElementBytes, units: _Units) -> None:
    """DeepSpeed ZeRO-1/2/3: states (and gradients, and weights) partitioned, plus its buckets and live parameters."""
    n, stage = settings.num_gpus, settings.zero_stage or 0
    t.persist = True
    t.masters /= n
    t.states /= n
    # the fp32 gradient partition of the parameters in the optimizer: under BAdam only the active block's, as its
    # BlockOptimizer rebuilds DeepSpeed's fp16 groups and fp32 partitions from the active block at each switch
    # (https://github.com/Ledzy/BAdam/blob/bf989dcb8c1a7bbcf7360034b323e1b5616bf3e4/src/badam/block_optim.py#L290-L311)
    optimized = split.trainable if t.optimized is None else t.optimized
    partition = (b.master or b.state == 4) and b.train_g < 4
    t.step += optimized * 4 / n if partition else 0
    bucket = stage >= 3 or not settings.grad_bucket_view  # Megatron reduces in place, in its gradient buffer
    t.buffers += units.reduce_bucket if bucket else 0
    if stage >= 2:
        t.grads /= n
    if stage >= 3:
        t.weights /= n
        t.buffers += units.gathered * units.gathered_peak / max(1, min(2 * units.layer_parameters, split.total))
    t.notes.append(f"ZeRO-{stage}: " + ("reduce bucket (hidden² elements, HF 'auto')" if bucket else
                                        "gradients reduced in place in their buffer")
                   + (f", {units.gathered_peak:,} parameters gathered around the loss (DeepSpeed's fetch, prefetch "
                      "and reuse rules replayed over the model's modules)" if stage >= 3 else "")
                   + ("; the fp32 gradient partition exists only during the optimizer step" if partition else
                      f"; gradients kept in {b.train_g}-byte elements"))


def _fsdp(t: _Terms, settings: TrainingSettings, split: ParameterSplit, b: _ElementBytes, units: _Units) -> None:
    """FSDP full shard (weights sharded, units gathered as used) or shard-grad-op (weights kept whole)."""
    n = settings.num_gpus
    t.masters /= n
    t.states /= n
    unit_grads = min(units.layer_parameters, split.trainable) * b.train_g
    if settings.fsdp_mixed_units and settings.method != "full":
        frozen = split.frozen_16bit + split.frozen_quantized
        t.grads += frozen * b.train_g  # one flat parameter per unit: its gradient spans the frozen weights too
        unit_grads = units.layer_parameters * b.train_g
        t.notes.append("FSDP1 with LoRA adapters in their frozen base's unit (use_orig_params=True): each unit's "
                       "flat gradient covers the frozen weights too, so gradient shards are full-size")
    if _accumulates_unsharded(settings):
        t.notes.append("FSDP gradient accumulation under no_sync: every rank keeps its units' whole unsharded "
                       "gradients between micro-batches (sync_each_batch reduces them each time)")
    else:
        t.grads /= n
    # a unit's unsharded gradients exist from its layer's backward until they are copied into the reduce-scatter
    # input, which stays until the next unit's post-backward and is dropped at the end of the backward (torch 2.13,
    # torch/distributed/fsdp/_fully_shard/: _fsdp_collectives.py:595-603, _fsdp_param_group.py:639-658 with
    # reduce_scatter_max_input_buffers = 1, _fsdp_state.py:490-493): never beside the whole forward's activations
    t.buffers += unit_grads
    t.backward += unit_grads
    if settings.resolved_sharding != "fsdp_full_shard":
        t.notes.append("FSDP shard-grad-op: parameters stay unsharded between forward and backward")
        return
    t.weights /= n
    if settings.fsdp_wrap_embeddings:
        t.buffers += units.gathered + units.largest_root_unit * b.stored
        t.notes.append("FSDP full shard: two decoder layers gathered, one layer's unsharded gradients (during "
                       "the backward only), and the embeddings or the head (each its own unit) gathered while in use")
    else:
        t.buffers += units.gathered + units.root_parameters * b.stored
        t.notes.append("FSDP full shard: two decoder layers gathered, one layer's unsharded gradients (during "
                       "the backward only), the root unit (embeddings, head, final norm) gathered for the whole step")


def _accumulates_unsharded(settings: TrainingSettings) -> bool:
    """FSDP accumulating gradients under no_sync: each rank holds the whole unsharded gradients between steps."""
    return (settings.resolved_sharding.startswith("fsdp") and settings.num_gpus > 1
            and settings.gradient_accumulation_steps > 1 and not settings.sync_each_batch)


def _offload(t: _Terms, settings: TrainingSettings, b: _ElementBytes, units: _Units, split: ParameterSplit) -> None:
    """CPU offload: optimizer states and master weights (and gradient partitions), then sharded weights; with
    offload_device nvme they go to NVMe instead and host RAM keeps DeepSpeed's pinned swap buffers
    (optimizer_swap_buffers, param_swap_buffers) and the parameters up to param_max_in_cpu."""
    sharding = settings.resolved_sharding
    nvme = settings.offload_device == "nvme"
    if settings.offload_optimizer:
        before = t.cpu
        t.cpu += t.masters + t.states
        t.masters = 0.0
        t.states = 0.0
        to_fp32 = 4 / b.train_g if b.train_g < 4 else 1  # offloaded gradient partitions are kept in fp32
        if _accumulates_unsharded(settings):  # no_sync keeps them on the GPU; their shards move after the sync
            t.cpu += t.grads / settings.num_gpus * to_fp32
        elif (settings.zero_stage or 0) >= 2 or sharding.startswith("fsdp"):
            t.cpu += t.grads * to_fp32
            t.grads = units.reduce_bucket if sharding.startswith("zero") else 0.0
        t.notes.append("optimizer offload: optimizer states and fp32 master weights (and gradient partitions) "
                       f"on the {'NVMe' if nvme else 'CPU'}")
        if nvme:
            t.nvme += t.cpu - before
            t.cpu = before + optimizer_swap_buffers(settings, split)
    if settings.offload_params:
        if nvme:
            in_cpu = t.weights * min(1.0, settings.param_max_in_cpu / max(1.0, split.total / settings.shard_ranks))
            t.nvme += t.weights - in_cpu
            t.nvme_params += t.weights - in_cpu
            t.cpu += in_cpu + param_swap_buffers(settings)
        else:
            t.cpu += t.weights
        t.weights = 0.0
        t.notes.append("parameter offload: sharded weights on the " + (
            "NVMe beyond param_max_in_cpu elements per rank" if nvme else "CPU") + ", only the gathered layers on the "
            "GPU")


def optimizer_swap_buffers(settings: TrainingSettings, split: ParameterSplit) -> float:
    """Pinned host bytes per rank of DeepSpeed's optimizer swapper: optimizer_swap_buffers fp32 buffers, each the
    largest sub-group's elements (stage3.py passes max(fp16_partitioned_groups_flat_numel) to the swapper,
    https://github.com/microsoft/DeepSpeed/blob/38327e07f6cd39b63418f60cedd1651b0be3e7c3/deepspeed/runtime/zero/stage3.py#L637).
    A sub-group closes at the first parameter that reaches sub_group_size, so the largest is at most sub_group_size
    plus the largest parameter's partition, and at most the rank's trained shard: that bound is counted."""
    ranks = settings.shard_ranks
    largest = min(split.trainable / ranks, settings.sub_group_size + split.largest_trainable / ranks)
    return settings.optimizer_swap_buffers * largest * 4


def param_swap_buffers(settings: TrainingSettings) -> float:
    """Pinned host bytes per rank of DeepSpeed's parameter swapper: param_swap_buffers buffers of
    param_swap_buffer_size elements in the weights' dtype."""
    return settings.param_swap_buffers * settings.param_swap_buffer_size * settings.precision.weight_bytes
