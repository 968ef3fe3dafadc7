"""Matmul FLOPs per token of a forward pass and of a training step, from an Architecture and its Inventory.

Counted as torch.utils.flop_counter.FlopCounterMode counts them: 2·m·n·k per matrix product (bias adds,
norms, activations, softmax, the loss and the embedding lookup are not matmuls and are not counted).
Every linear of the inventory runs once per token, experts at their active share (top-k of E); attention
adds QKᵀ and the scores times V. By default the whole s×s square is counted, as eager attention, SDPA's
math, flash and efficient kernels are counted by FlopCounterMode (its sdpa formula has no causal
argument) and as the MFU definitions of PaLM (Chowdhery et al. 2022, App. B: 6N + 12·L·H·Q·T per token)
and Megatron-LM count them. `skip_masked=True` counts only the (query, key) pairs a causal or
sliding-window kernel computes (flash-attention skips masked blocks): about half the square.

Not counted: Mamba/SSM scans and their depthwise convolutions (the selective scan is elementwise work,
O(d_inner·d_state) per token, done by a fused kernel FlopCounterMode does not see on GPU; the SSM's
in/x/dt/out projections are linears and are counted), vision towers and projectors (image tokens are not
text tokens), RoPE tables. Pure arithmetic, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hfmem.errors import InvalidInputError
from hfmem.model.architecture import Architecture
from hfmem.model.inventory import Inventory, LinearGroup

OUTSIDE_LAYERS = frozenset({"head", "other"})
"""Components whose linears run outside the repeated layers: the vocabulary projection and what sits between the
last layer and it (BERT's MLM transform); full checkpointing does not recompute them."""
NOT_QUANTIZED = OUTSIDE_LAYERS | {"router"}
"""Linears a low-precision recipe leaves in bf16: the head (Megatron's output_layer is no TE module, torchtitan's
float8 converter skips `output`) and the MoE router (a plain linear in Megatron-core and transformers)."""
NOT_TEXT = frozenset({"vision", "projector"})
"""Components that process image or audio inputs, not text tokens: not in a text token's FLOPs."""
BIDIRECTIONAL = frozenset({"bert", "roberta", "xlm-roberta", "electra", "distilbert", "albert", "deberta",
                           "deberta-v2"})
"""Encoder-only model types: every token attends to every token, there is no causal mask to skip."""
CHECKPOINTING = ("off", "full", "selective", "op")
"""The recomputation schemes counted (the values of TrainingSettings.gradient_checkpointing)."""
METHODS = ("full", "lora", "qlora")
"""What is trained (the values of TrainingSettings.method): every weight, or adapters on a frozen base."""


@dataclass(frozen=True)
class ForwardFlops:
    """Matmul FLOPs of one forward pass, per token, by part."""

    seq_len: int
    linears: dict[str, float]
    """FLOPs per token of the linear layers, by inventory component (experts: the active ones only)."""
    attention: float
    """QKᵀ and scores·V per token, over the attention layers (encoder, decoder and cross attention)."""
    skip_masked: bool = False
    notes: tuple[str, ...] = field(default=())

    @property
    def linear(self) -> float:
        return sum(self.linears.values())

    @property
    def total(self) -> float:
        return self.linear + self.attention

    @property
    def in_layers(self) -> float:
        """The share that runs inside the repeated layers (what full checkpointing recomputes)."""
        return self.total - sum(v for k, v in self.linears.items() if k in OUTSIDE_LAYERS)

    def to_dict(self) -> dict[str, Any]:
        return {"seq_len": self.seq_len, "linears": dict(self.linears), "attention": self.attention,
                "total": self.total, "in_layers": self.in_layers, "skip_masked": self.skip_masked,
                "notes": list(self.notes)}


@dataclass(frozen=True)
class TrainingFlops:
    """Matmul FLOPs of one training step's work, per token: forward, backward and recomputation as terms."""

    forward: float
    """The forward pass, adapters included."""
    backward_input: float
    """Gradients with respect to activations: one forward's worth per linear (its input gradient), the adapters'
    input gradients, and twice the attention core (gradients of Q, K, V and of the scores)."""
    backward_weight: float
    """Gradients with respect to weights: one forward's worth per trainable linear (all of them in full training,
    only the adapters for LoRA/QLoRA, whose frozen base computes no weight gradient)."""
    recompute: float
    """Forward work done again in backward: every layer under full checkpointing, the attention core under
    selective checkpointing."""
    base_forward: float
    """The model's own forward (adapters excluded): the unit of `multiplier`."""
    quantized: float = 0.0
    """The executed FLOPs of the layers' linears (NOT_QUANTIZED excluded): the GEMMs an FP8/FP4 recipe runs in low
    precision; the attention core, the head and the router stay bf16."""

    @property
    def model(self) -> float:
        """Model FLOPs (PaLM's MFU numerator): forward and backward, recomputation excluded."""
        return self.forward + self.backward_input + self.backward_weight

    @property
    def hardware(self) -> float:
        """FLOPs the GPU executes: model FLOPs plus recomputation (PaLM's HFU numerator)."""
        return self.model + self.recompute

    @property
    def multiplier(self) -> float:
        """Executed FLOPs in forwards of the base model: 3 for full training, about 2 for LoRA, +1 with full
        checkpointing."""
        return self.hardware / self.base_forward if self.base_forward else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"forward": self.forward, "backward_input": self.backward_input,
                "backward_weight": self.backward_weight, "recompute": self.recompute,
                "model": self.model, "hardware": self.hardware, "multiplier": self.multiplier}


def moe_layers(arch: Architecture) -> int:
    """Layers whose MLP is routed over experts."""
    return arch.num_layers - arch.num_dense_layers if arch.is_moe else 0


def active_share(group: LinearGroup, arch: Architecture) -> float:
    """The share of a linear group a token passes through: top-k of E for routed experts, 1 otherwise.

    A group is routed experts when it holds one matrix per expert of every MoE layer (fused expert tensors
    or transformers 4's per-expert Linears); shared experts and dense MLPs are always active.
    """
    if (not arch.is_moe or group.component not in {"experts", "mlp"}
            or group.count != moe_layers(arch) * arch.num_experts):
        return 1.0
    return arch.experts_per_token / arch.num_experts


def linear_flops(group: LinearGroup, arch: Architecture) -> float:
    """Forward FLOPs per token of one linear group: 2·in·out per matrix a token passes through."""
    return 2.0 * group.in_features * group.out_features * group.count * active_share(group, arch)


def adapter_flops(group: LinearGroup, arch: Architecture, rank: int) -> float:
    """Forward FLOPs per token of LoRA on one linear group: x·A (r×in) then ·B (out×r), 2·r·(in + out) per matrix.

    Adapters on fused expert tensors are counted per active expert, as on transformers 4's per-expert Linears;
    PEFT's ParamWrapper on transformers 5 folds B·A into the expert weights on each read instead (a per-step
    cost that grows with the weights, not the tokens), which is not modelled.
    """
    return 2.0 * rank * (group.in_features + group.out_features) * group.count * active_share(group, arch)


def attention_pairs(seq_len: int, *, causal: bool, window: int | None, skip_masked: bool) -> float:
    """(query, key) pairs one attention layer multiplies for a sequence: s² unless masked blocks are skipped."""
    s = seq_len
    if not skip_masked or not causal:
        return float(s * s)
    w = min(window or s, s)
    return w * (w + 1) / 2 + (s - w) * w  # row i attends to min(i + 1, w) keys


def _attention_layers(arch: Architecture) -> list[tuple[int, bool, bool]]:
    """(count, causal, windowed) for every kind of attention layer the model runs."""
    if arch.is_encoder_decoder:  # encoder self, decoder cross (both see the whole source), decoder self
        return [(arch.encoder_layers, False, False), (arch.num_layers, False, False), (arch.num_layers, True, False)]
    causal = arch.model_type not in BIDIRECTIONAL
    windowed_kinds = {k for k in arch.layer_types if "sliding" in k}
    layers = []
    for kind, count in arch.layer_types.items():
        if "attention" not in kind or kind == "linear_attention":
            continue
        windowed = kind in windowed_kinds or (not windowed_kinds and arch.sliding_window is not None)
        layers.append((count, causal, windowed))
    return layers


def attention_flops(arch: Architecture, seq_len: int, *, skip_masked: bool = False) -> float:
    """QKᵀ and scores·V FLOPs per token, over every attention layer (all query heads; GQA shares K/V, not work)."""
    if arch.mla is not None:
        qk, v = arch.mla.qk_nope_head_dim + arch.mla.qk_rope_head_dim, arch.mla.v_head_dim
    else:
        qk = v = arch.head_dim
    per_pair = 2.0 * arch.num_attention_heads * (qk + v)
    total = sum(count * per_pair * attention_pairs(seq_len, causal=causal,
                                                   window=arch.sliding_window if windowed else None,
                                                   skip_masked=skip_masked)
                for count, causal, windowed in _attention_layers(arch))
    return total / seq_len


def forward_flops(arch: Architecture, inventory: Inventory, seq_len: int, *, skip_masked: bool = False) -> ForwardFlops:
    """Forward matmul FLOPs per token for sequences of `seq_len` tokens.

    Encoder-decoder models are counted for a source and a target of `seq_len` tokens each, per target token.
    """
    if not isinstance(seq_len, int) or seq_len < 1:
        raise InvalidInputError(f"sequence length must be a positive integer, got {seq_len!r}.")
    linears: dict[str, float] = {}
    for group in inventory.linears:
        if group.component not in NOT_TEXT:
            linears[group.component] = linears.get(group.component, 0.0) + linear_flops(group, arch)
    notes = []
    if arch.is_moe and not any(g.component == "router" for g in inventory.linears):
        # routers held as a bare weight (transformers 5's TopKRouter modules): h -> E logits per MoE layer
        linears["router"] = 2.0 * arch.hidden_size * arch.num_experts * moe_layers(arch)
    if arch.layer_types.get("mamba"):
        notes.append("Mamba layers: the projections are counted, the selective scan and its convolution are not.")
    if any(g.component in NOT_TEXT for g in inventory.linears):
        notes.append("vision tower and projector not counted (text tokens only).")
    return ForwardFlops(seq_len, linears, attention_flops(arch, seq_len, skip_masked=skip_masked), skip_masked,
                        tuple(notes))


def training_flops(arch: Architecture, forward: ForwardFlops, *, method: str = "full",
                   adapters: tuple[LinearGroup, ...] = (), rank: int = 0, checkpointing: str = "off",
                   recomputed: float = 1.0) -> TrainingFlops:
    """Matmul FLOPs per token of forward, backward and recomputation for a training method.

    full: every linear computes its input and its weight gradient (3 forwards in all). lora/qlora: the frozen
    base computes input gradients only (2 forwards), the `adapters` (the linear groups LoRA adapts, rank `rank`)
    both. QLoRA's matmuls are LoRA's: the NF4 weights are dequantised to the compute dtype first, which is memory
    traffic (hfmem.compute.roofline), not FLOPs. Input gradients are counted through the whole stack, as when the
    embeddings' output requires grad (full training; PEFT's enable_input_require_grads, which transformers' Trainer
    and prepare_model_for_kbit_training call with gradient checkpointing); without it the first layer's input
    projections skip theirs. Full checkpointing is counted as a whole-layer recompute (reentrant checkpointing);
    torch's non-reentrant checkpoint, transformers 5's default, stops recomputing once the last saved tensor is
    rebuilt and so skips a layer's final matmul when nothing saves its output (Llama's down_proj: 3.65 instead of
    3.87 forwards for the 2-layer tiny Llama under FlopCounterMode), which is not modelled. `recomputed`: the
    share of the layers' forward that full checkpointing recomputes (the layers inside checkpointed regions), or
    that per-op checkpointing does (what its policy does not save).
    """
    if method not in METHODS:
        raise InvalidInputError(f"unknown training method {method!r}; expected one of {', '.join(METHODS)}.")
    if checkpointing not in CHECKPOINTING:
        raise InvalidInputError(f"unknown checkpointing {checkpointing!r}; expected one of {', '.join(CHECKPOINTING)}.")
    if method != "full" and rank < 1 and adapters:
        raise InvalidInputError(f"LoRA rank must be a positive integer, got {rank!r}.")
    chosen = adapters if method != "full" else ()
    extra = [adapter_flops(g, arch, rank) for g in chosen]
    extra_in_layers = sum(f for g, f in zip(chosen, extra, strict=True) if g.component not in OUTSIDE_LAYERS)
    adapter = sum(extra)
    quantized = sum(v for k, v in forward.linears.items() if k not in NOT_QUANTIZED)
    recompute = {"off": 0.0, "full": recomputed * (forward.in_layers + extra_in_layers),
                 "selective": forward.attention, "op": recomputed * forward.in_layers}[checkpointing]
    return TrainingFlops(
        forward=forward.total + adapter,
        backward_input=forward.linear + adapter + 2 * forward.attention,
        backward_weight=forward.linear if method == "full" else adapter,
        recompute=recompute,
        base_forward=forward.total,
        quantized=quantized * (3 if method == "full" else 2)
        + (recomputed * quantized if checkpointing in {"full", "op"} else 0.0),
    )
