"""The activation model's inputs: the step's settings in bytes and flags, and the spec every layer formula reads."""

from __future__ import annotations

from dataclasses import dataclass, field

from hfmem.memory.activations.families import FamilyTraits, family_traits
from hfmem.memory.activations.structure import LayerModules, layer_modules, layer_plan
from hfmem.memory.activations.trainability import FULL, Trainability
from hfmem.memory.settings import ATTENTION
from hfmem.model.architecture import Architecture
from hfmem.model.inventory import Inventory


@dataclass(frozen=True)
class ActivationSettings:
    """One training step as the activation model sees it: micro-batch, sequence, dtypes in bytes, kernel, switches."""

    micro_batch_size: int
    seq_len: int
    compute_bytes: int = 2
    """p: bytes per element of the compute dtype (2 for bf16/fp16, 4 for fp32)."""
    residual_bytes: int | None = None
    """Bytes of the residual stream when it differs from the compute dtype (AMP's fp32); None: compute_bytes."""
    attention: str = "flash_attention_2"
    gradient_checkpointing: str = "off"
    checkpoint_method: str = "uniform"
    """Which layers full checkpointing recomputes: uniform, block or every (hfmem.memory.activations.recompute)."""
    checkpoint_layers: int = 1
    """The count checkpoint_method reads."""
    trained: Trainability = FULL
    dropout_mask_bytes: float | None = 1.0
    """Bytes per dropout-mask element (CUDA's bool mask); None: the masked tensor's dtype, as on CPU."""
    dequant_workspace: int = 0
    """QLoRA: bytes of the largest weight dequantised to the compute dtype, alive while its layer computes."""
    loss_chunks: int = 1
    """Chunked cross-entropy (torchtune CEWithChunkedOutputLoss, 8 chunks): the output projection and the fp32
    upcast run per chunk of the sequence, so the loss backward's fp32 buffers exist for one chunk at a time
    (the saved log_softmax outputs still add up to 4·b·s·V)."""
    fused_loss: str = "none"
    """A fused output projection and cross-entropy (the fused_loss setting): cce or liger; none: lm_head, then the
    loss on the logits."""
    weight_bytes: int | None = None
    """Bytes per element of a stored weight (fp32 under AMP over fp32 weights); None: compute_bytes. Weight-sized
    tensors built in the step have this dtype (Liger's head gradient, LoRA-merged experts)."""
    compiled_loss: bool = False
    """The loss under torch.compile (inductor): it saves the compute-dtype logits and two fp32 row statistics
    (max, logsumexp) instead of log_softmax's fp32 output, and its fused backward allocates only the logits'
    gradient."""
    activation_offloading: bool = False
    """torchtune's OffloadActivations around the model's forward: every saved tensor of the decoder
    (embeddings, layers, final norm; with checkpointing, the layer inputs) goes to CPU pinned memory; the
    GPU keeps about two layers' worth (the layer being computed in backward and the one being prefetched),
    the output projection's input (excluded by torchtune) and the loss (computed outside the context)."""
    compiled_layers: bool = False
    """Each decoder layer under torch.compile (torchtune compile=True): what the min-cut partitioner saves
    (see the package docstring); embeddings, final norm and head stay eager."""
    retained_inputs: frozenset[str] = frozenset()
    """Linears whose inputs the previous step still holds at the end of this forward (ctx attributes of a
    graph the training loop has not dropped yet); without full checkpointing every layer's forward recorded
    them, so their distinct inputs count once more, over all layers."""
    fused_softmax: bool = False
    """Eager attention's softmax as one kernel keeping only its compute-dtype output (Megatron's
    FusedScaleMaskSoftmax)."""
    loss_in_place: bool = False
    """The cross-entropy works in the upcast logits' own fp32 buffer (Megatron-core's vocab_parallel_cross_entropy):
    it keeps the fp32 softmax and writes the gradient into it, so backward allocates only the compute-dtype
    logits' gradient."""
    loss_upcast: bool = True
    """The cross-entropy runs on fp32 logits (transformers' loss). False: on the compute-dtype logits, which
    the training loop holds (nn.CrossEntropyLoss on model(...).logits, LitGPT): log_softmax keeps its output
    in that dtype and its backward needs two more such buffers."""
    repeat_kv: bool = False
    """The model code repeats grouped K/V heads to every query head before a fused attention kernel
    (LitGPT's expand + reshape), so the kernel saves K and V at the query heads' count."""
    activation: str | None = None
    """The MLP activation the training code calls (hfmem.memory.activation_functions); None: the model's hidden_act."""
    padding_mask: bool = False
    """Padded batches with an attention mask: transformers passes SDPA a 4-D mask (see attention._fused)."""
    quantized_input_bytes: float | None = None
    """Bytes per element of a decoder linear's input saved for its weight gradient under a low-precision recipe
    that saves it quantized (TransformerEngine FP8: 1; MXFP8, NVFP4 with their block scales); None: compute_bytes."""
    moe_probs_in_activation: bool = False
    """The routing weights multiply the experts' activation inside a fused kernel (Megatron-core's TEGroupedMLP):
    no expert output is kept for their gradient."""


@dataclass(frozen=True)
class ActivationSpec:
    """What shapes every layer's saved tensors in one estimate: the architecture with its family traits, layer
    plan and linear layers, and the dtype, kernel, trainability and compilation settings. Equal specs (the
    architecture aside: a layer cache belongs to one model) give equal layers."""

    arch: Architecture = field(compare=False)
    plan: tuple[tuple[str, str, int], ...] = field(compare=False)
    """(attention kind, MLP kind, count) groups of decoder layers."""
    head_linears: frozenset[str] = field(compare=False)
    """Leaf names of the output head's linear layers."""
    traits: FamilyTraits
    dense: LayerModules
    moe: LayerModules
    kernel: str
    """The attention kernel that actually runs."""
    p: int
    """Bytes per element of the compute dtype."""
    w: int
    """Bytes per element of a stored weight (the frozen base's dtype under LoRA)."""
    r: int
    """Bytes per element of the residual stream (p, or 4 under AMP)."""
    trained: Trainability
    mask_bytes: float | None
    compiled: bool
    """Decoder layers under torch.compile."""
    fused_softmax: bool
    """Eager attention's softmax is one kernel keeping only its compute-dtype output."""
    repeat_kv: bool
    activation: str
    """The MLP activation function that runs (an ACTIVATION_SAVES name, or the model's unknown hidden_act)."""
    padding_mask: bool
    fused_loss: str
    """cce or liger: the head is not an nn.Linear that saves its input (see head.loss); none: it is."""
    q: float | None = None
    """Bytes per element of a decoder linear's saved input under a low-precision recipe; None: p."""
    probs_in_activation: bool = False
    """The routing weights multiply the experts' activation in a fused kernel: no expert output kept for them."""

    @property
    def autocast(self) -> bool:
        """Autocast over an fp32 residual stream: each linear casts its input, softmax runs in fp32."""
        return self.r > self.p

    @property
    def softmax_fp32(self) -> bool:
        """Eager attention's softmax keeps an fp32 result: the model upcasts (or autocast does), and no fused
        kernel keeps the compute-dtype output instead."""
        return self.p < 4 and (not self.traits.softmax_in_compute_dtype or self.autocast) and not self.fused_softmax

    def modules(self, mlp_kind: str) -> LayerModules:
        """The linear layers of a layer whose MLP is `mlp_kind` ("moe", "dense" or "none")."""
        return self.moe if mlp_kind == "moe" else self.dense


def activation_spec(arch: Architecture, inventory: Inventory, settings: ActivationSettings,
                    modules: tuple[LayerModules, LayerModules] | None = None) -> ActivationSpec:
    """The spec of one estimate; `modules`: layer_modules(arch, inventory), when the caller has it already."""
    if settings.attention not in ATTENTION:
        raise ValueError(f"unknown attention kernel {settings.attention!r}")
    traits = family_traits(arch.model_type)
    dense, moe = modules or layer_modules(arch, inventory)
    p = settings.compute_bytes
    return ActivationSpec(
        arch=arch, plan=layer_plan(arch),
        head_linears=frozenset(g.name for g in inventory.linears if g.component == "head"),
        traits=traits, dense=dense, moe=moe, kernel=settings.attention,
        p=p, r=p if settings.residual_bytes is None else settings.residual_bytes, trained=settings.trained,
        w=settings.weight_bytes or p,
        mask_bytes=settings.dropout_mask_bytes, compiled=settings.compiled_layers,
        fused_softmax=settings.fused_softmax, repeat_kv=settings.repeat_kv,
        activation=settings.activation or arch.hidden_act,
        padding_mask=settings.padding_mask, fused_loss=settings.fused_loss, q=settings.quantized_input_bytes,
        probs_in_activation=settings.moe_probs_in_activation,
    )
