"""Activation memory of one training step, from the real architecture: what autograd saves, layer by layer.

The model lists, for each decoder layer, the tensors that transformers' modeling code leaves saved
for backward (norm upcasts, projections' inputs, RoPE'd q/k, the attention kernel's saved state,
the MLP's activation internals, MoE routing and routed-token copies, dropout masks) with their
sizes for micro-batch b and sequence s. Storages shared by several ops (one normed input feeding
q/k/v) count once. A tensor kept only for a *weight* gradient (a linear's input, a norm's
normalised input) is dropped when that weight is frozen (LoRA/QLoRA), and LoRA adapters add their
own input copies. This is what `tests/test_activations.py` checks against real forward passes.

Conventions (all documented in the estimate's assumptions):
- compute dtype p bytes (2 for bf16/fp16, 4 for fp32); norms upcast to fp32 as the HF code does;
- dropout masks: 1 byte/element (CUDA's bool mask); `dropout_mask_bytes=None` models the CPU path,
  which keeps the mask in the dtype of the tensor it masks;
- the loss: transformers upcasts logits to fp32 and keeps log_softmax's fp32 output (4·b·s·V);
  its backward briefly needs two more fp32 (b·s, V) buffers: the "loss peak";
- gradient checkpointing "full" keeps each layer's input plus one layer recomputed at a time;
  "selective" (Korthikanti et al.) recomputes only the attention core (the a·s² terms);
- compiled layers (torch.compile of each decoder layer, inductor's min-cut partitioner): backward
  recomputes cheap elementwise work from what the matmuls and kernels need, so an RMSNorm keeps only
  its input and rstd (no fp32 copy, no normalised copy), an activation function keeps its input but
  not its output or temporaries, and eager attention keeps its raw scores and two fp32 row
  statistics instead of the fp32 softmax. Everything else (matmul inputs, RoPE'd q/k, the fused
  attention's output and logsumexp, MoE routing and routed copies) is saved as in eager mode.
  Validated term by term against real compiled forwards (tests/test_compiled_layers.py).
No torch import: pure arithmetic over the Architecture and the Inventory's linear layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hfmem.memory.settings import ATTENTION
from hfmem.model.architecture import Architecture
from hfmem.model.inventory import Inventory

# Tensors each transformers activation (ACT2FN) saves for its backward, besides the next linear's
# input: "in" = its input, "out" = its output (shared with what the next op saves), "t" = an
# internal temporary. Measured with saved_tensors_hooks on torch 2.13 (tests/test_activations.py).
_ACT_SAVES: dict[str, tuple[str, ...]] = {
    "silu": ("in",), "swish": ("in",), "gelu": ("in",), "gelu_pytorch_tanh": ("in",), "gelu_10": ("in", "t"),
    "gelu_new": ("in", "t", "t", "t"), "gelu_python": ("in", "t", "t"), "gelu_python_tanh": ("in", "t", "t", "t"),
    "gelu_accurate": ("in", "t", "t", "t"), "gelu_fast": ("in",) + ("t",) * 6, "quick_gelu": ("in", "t"),
    "relu": ("out",), "tanh": ("out",), "sigmoid": ("out",), "relu2": ("t",), "relu6": ("in",),
    "leaky_relu": ("in",), "mish": ("in",), "hardswish": ("in",), "laplace": ("in",), "linear": (),
    "xielu": ("in", "t"),
}
_ACT_DEFAULT = ("in",)

# Families whose eager attention takes softmax in the compute dtype (others upcast to fp32 first).
_SOFTMAX_IN_COMPUTE_DTYPE = {"falcon", "gpt2", "gpt_bigcode", "bloom", "gptj", "gpt_neo", "opt", "bert", "roberta"}
# Gemma-style RMSNorm: the whole norm runs in fp32, (1 + weight) included.
_FP32_NORM_FAMILIES = {"gemma", "gemma2", "gemma3", "gemma3_text", "recurrent_gemma"}
# Sandwich norms: four RMSNorms per layer (input, post-attention, pre- and post-feed-forward).
_SANDWICH_NORM_FAMILIES = {"gemma2", "gemma3", "gemma3_text", "olmo2"}
# Attention logit soft-capping (eager only): one more a·s² tensor.
_SOFTCAP_FAMILIES = {"gemma2"}
# DeepSeek's router runs its linear in fp32 on an fp32 copy of the hidden states.
_FP32_ROUTER_FAMILIES = {"deepseek_v2", "deepseek_v3", "glm4_moe", "kimi_k2"}
# A LayerNorm right after the embeddings (BERT-style embeddings, BLOOM's word_embeddings_layernorm).
_EMBEDDING_NORM_FAMILIES = {"bert", "roberta", "xlm-roberta", "electra", "bloom", "deberta", "deberta-v2", "albert"}
# A masked-LM head transform before the decoder: dense -> activation -> LayerNorm.
_MLM_HEAD_FAMILIES = {"bert", "roberta", "xlm-roberta", "electra", "deberta", "deberta-v2", "albert"}
# Falcon (multi_query, not new_decoder_architecture) calls SDPA with one broadcast K/V head and no
# enable_gqa, which no fused kernel accepts: SDPA falls back to its math path.
_SDPA_BROADCAST_MQA = {"falcon"}

_OUT_NAMES = {"o_proj", "dense", "c_proj", "out_proj", "wo", "o", "self_attn_output", "attn_out"}


@dataclass(frozen=True)
class Module:
    """One linear layer inside a decoder layer: its leaf name (what LoRA targets), dims and count per layer."""

    name: str
    in_features: int
    out_features: int
    per_layer: float
    kind: str = "linear"


@dataclass(frozen=True)
class Trainability:
    """Which weights get gradients, and how LoRA adapters see their inputs.

    `trainable`: leaf names of trainable weight matrices, or {"*"} for full fine-tuning (norms,
    embeddings and routers included). `lora`: leaf names carrying a LoRA adapter.
    `adapter_input_bytes`: bytes per element of the copy of the input that each adapter saves
    (0: it shares the base layer's input, as torchtune/LitGPT or QLoRA under autocast do).
    """

    trainable: frozenset[str] = frozenset({"*"})
    lora: frozenset[str] = frozenset()
    lora_rank: int = 0
    adapter_input_bytes: float = 0.0
    adapter_output_bytes: float = 4.0
    lora_dropout: float = 0.0
    kept_inputs: frozenset[str] = frozenset()
    """Frozen layers that keep their input anyway: bitsandbytes < 0.43.2's 4-bit matmul stored its input for
    a weight gradient it never computes (ctx.tensors = (A, B) in MatMul4Bit; bitsandbytes PR #1270 dropped A)."""
    input_requires_grad: bool = True
    """Whether the embedding output requires grad (full FT, or LoRA with checkpointing, where HF calls
    enable_input_require_grads). When False, layer 0 saves nothing before its first adapter."""

    @property
    def full(self) -> bool:
        return "*" in self.trainable

    def weight(self, name: str) -> bool:
        """Whether the weight named `name` (leaf name, or a role like "norm"/"router") gets a gradient."""
        return self.full or name in self.trainable or name in self.lora

    def needs_input(self, name: str) -> bool:
        """Whether the layer `name` keeps its input for backward (its weight or a sharing adapter needs it)."""
        if self.full or name in self.trainable or name in self.kept_inputs:
            return True
        return name in self.lora and self.adapter_input_bytes == 0 and self.lora_dropout == 0


FULL = Trainability()


@dataclass
class _Saved:
    """Accumulates named terms (bytes) of one layer, counting each storage once."""

    terms: dict[str, float] = field(default_factory=dict)
    s2_terms: set[str] = field(default_factory=set)

    def add(self, name: str, nbytes: float, *, s2: bool = False) -> None:
        if nbytes <= 0:
            return
        self.terms[name] = self.terms.get(name, 0.0) + nbytes
        if s2:
            self.s2_terms.add(name)

    @property
    def total(self) -> float:
        return sum(self.terms.values())

    @property
    def s2_total(self) -> float:
        return sum(v for k, v in self.terms.items() if k in self.s2_terms)


@dataclass(frozen=True)
class LayerActivation:
    """Saved bytes of one layer of a kind, with the named terms that make it up."""

    kind: str
    count: int
    bytes: int
    terms: dict[str, int]
    attention_core_bytes: int
    """The a·s² part (attention matrix, its dropout mask): what selective checkpointing recomputes."""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "count": self.count, "bytes": self.bytes, "terms": self.terms,
                "attention_core_bytes": self.attention_core_bytes}


@dataclass(frozen=True)
class ActivationEstimate:
    """Activation memory for one micro-batch: per-layer figures, the model-level terms and the peak."""

    micro_batch_size: int
    seq_len: int
    attention: str
    """The kernel the estimate assumes actually runs (sdpa may resolve to sdpa_math)."""
    gradient_checkpointing: str
    layers: tuple[LayerActivation, ...]
    embedding: int
    """Saved at the embedding: token ids (if trained), embedding dropout mask, RoPE cos/sin tables."""
    checkpoint_inputs: int
    """With full checkpointing: every checkpointed layer's input (the embedding output for layer 0)."""
    final: int
    """Final norm and the LM head's input."""
    loss: int
    """Saved by the loss: log_softmax's fp32 output over the vocabulary, the shifted labels."""
    loss_peak: int
    """Transient at the start of backward: two more fp32 (b·s, V) buffers (nll and log_softmax grads)."""
    recompute: int
    """Transient with checkpointing: one layer's activations recomputed during backward."""
    adjustments: int
    """Corrections to the per-layer sum (layer 0 saves less when its input needs no grad)."""
    notes: tuple[str, ...] = ()
    offloaded: int = 0
    """With activation offloading: saved bytes held in CPU pinned memory instead of on the GPU."""
    retained: int = 0
    """The previous step's layer inputs still held as ctx attributes at the end of this forward (see
    estimate_activations' `retained_inputs`): on the GPU on top of `stored` until the loop drops that step."""
    dequant_workspace: int = 0
    """QLoRA: the largest weight dequantised to the compute dtype, alive while its layer computes."""

    @property
    def layers_total(self) -> int:
        return sum(layer.bytes * layer.count for layer in self.layers)

    @property
    def saved(self) -> int:
        """Bytes saved for backward at the end of the forward pass (what saved_tensors_hooks see),
        wherever they live (with activation offloading most of them are in CPU memory)."""
        if self.gradient_checkpointing == "full":
            body = self.checkpoint_inputs
        elif self.gradient_checkpointing == "selective":
            body = sum((layer.bytes - layer.attention_core_bytes) * layer.count for layer in self.layers)
        else:
            body = self.layers_total
        return max(0, self.embedding + body + self.final + self.loss + self.adjustments)

    @property
    def stored(self) -> int:
        """Saved bytes that stay on the GPU through the backward pass (`saved` less what is offloaded)."""
        return max(0, self.saved - self.offloaded)

    @property
    def transient(self) -> int:
        """The largest transient on top of `stored` during the step: the loss backward, a recompute, or the
        previous step's retained inputs at the end of the forward, while the last 4-bit weight is dequantised."""
        end_of_forward = self.retained + self.dequant_workspace if self.retained else 0
        return max(self.loss_peak, self.recompute, end_of_forward)

    @property
    def peak(self) -> int:
        return self.stored + self.transient

    def per_layer(self) -> dict[str, int]:
        return {layer.kind: layer.bytes for layer in self.layers}

    def to_dict(self) -> dict[str, Any]:
        return {
            "micro_batch_size": self.micro_batch_size,
            "seq_len": self.seq_len,
            "attention": self.attention,
            "gradient_checkpointing": self.gradient_checkpointing,
            "per_layer": [layer.to_dict() for layer in self.layers],
            "embedding": self.embedding,
            "checkpoint_inputs": self.checkpoint_inputs,
            "final": self.final,
            "loss": self.loss,
            "loss_peak": self.loss_peak,
            "recompute": self.recompute,
            "adjustments": self.adjustments,
            "saved": self.saved,
            "offloaded": self.offloaded,
            "retained": self.retained,
            "dequant_workspace": self.dequant_workspace,
            "stored": self.stored,
            "transient": self.transient,
            "peak": self.peak,
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------------------------
# Which linear layers a decoder layer holds (from the Inventory), by role


@dataclass(frozen=True)
class LayerModules:
    """Linear layers of one decoder layer by role (each a list of Modules)."""

    attn_in: tuple[Module, ...] = ()
    attn_out: tuple[Module, ...] = ()
    q_b: tuple[Module, ...] = ()
    kv_b: tuple[Module, ...] = ()
    mlp_in: tuple[Module, ...] = ()
    mlp_out: tuple[Module, ...] = ()
    shared_in: tuple[Module, ...] = ()
    shared_out: tuple[Module, ...] = ()
    experts_in: tuple[Module, ...] = ()
    experts_out: tuple[Module, ...] = ()
    router: tuple[Module, ...] = ()


def layer_modules(arch: Architecture, inventory: Inventory) -> tuple[LayerModules, LayerModules]:
    """Split the inventory's linear layers into (dense-layer, MoE-layer) modules by role."""
    attn_layers = max(1, _attention_layer_count(arch))
    dense_layers = arch.num_dense_layers if arch.is_moe else arch.num_layers
    moe_layers = arch.num_layers - dense_layers if arch.is_moe else 0
    attn_in, attn_out, q_b, kv_b = [], [], [], []
    dense_in, dense_out, shared_in, shared_out, router = [], [], [], [], []
    experts_in, experts_out = [], []
    mla = arch.mla
    for g in inventory.linears:
        if g.component == "head" or g.component in {"vision", "projector", "embeddings"}:
            continue
        if g.kind == "experts":
            per = g.count / max(1, moe_layers * max(1, arch.num_experts))
            mod = Module(g.name, g.in_features, g.out_features, per, g.kind)
            (experts_out if g.out_features == arch.hidden_size and g.in_features != arch.hidden_size else experts_in).append(mod)
            continue
        if g.component == "attention":
            mod = Module(g.name, g.in_features, g.out_features, g.count / attn_layers, g.kind)
            if mla is not None and mla.q_lora_rank and g.in_features == mla.q_lora_rank and g.name != "kv_b_proj":
                q_b.append(mod)
            elif mla is not None and g.in_features == mla.kv_lora_rank and g.name.startswith("kv_b"):
                kv_b.append(mod)
            elif g.out_features == arch.hidden_size and (g.name in _OUT_NAMES or g.in_features != arch.hidden_size):
                attn_out.append(mod)
            else:
                attn_in.append(mod)
        elif g.component == "router":
            router.append(Module(g.name, g.in_features, g.out_features, g.count / max(1, moe_layers), g.kind))
        elif g.component in {"mlp", "experts", "other"} and g.in_features == g.out_features == arch.hidden_size and any(
                o.component == "mlp" and o.out_features != arch.hidden_size for o in inventory.linears):
            # a square hidden->hidden projection beside the MLP is the attention output (BERT's
            # BertSelfOutput.dense, which the inventory files under "mlp" by its class name) or a head transform
            if g.count == arch.num_layers + arch.encoder_layers or g.count == attn_layers:
                attn_out.append(Module(g.name, g.in_features, g.out_features, g.count / attn_layers, g.kind))
        elif g.component in {"mlp", "experts", "other"}:
            is_out = g.out_features == arch.hidden_size and g.in_features != arch.hidden_size
            shared = arch.is_moe and moe_layers and not (dense_layers and g.count % dense_layers == 0 and g.count // dense_layers <= 1 and (g.in_features == arch.intermediate_size or g.out_features == arch.intermediate_size))
            if arch.is_moe and not dense_layers:
                shared = True
            if shared:
                mod = Module(g.name, g.in_features, g.out_features, g.count / max(1, moe_layers), g.kind)
                (shared_out if is_out else shared_in).append(mod)
            else:
                mod = Module(g.name, g.in_features, g.out_features, g.count / max(1, dense_layers), g.kind)
                (dense_out if is_out else dense_in).append(mod)
    common = dict(attn_in=tuple(attn_in), attn_out=tuple(attn_out), q_b=tuple(q_b), kv_b=tuple(kv_b))
    dense = LayerModules(**common, mlp_in=tuple(dense_in), mlp_out=tuple(dense_out))
    moe = LayerModules(**common, shared_in=tuple(shared_in), shared_out=tuple(shared_out), router=tuple(router),
                       experts_in=tuple(experts_in), experts_out=tuple(experts_out))
    return dense, moe


def _attention_layer_count(arch: Architecture) -> int:
    n = sum(c for k, c in arch.layer_types.items() if "attention" in k)
    return n or arch.num_layers


# --------------------------------------------------------------------------------------------
# Pieces of a layer


def resolve_attention(arch: Architecture, attention: str, seq_len: int) -> str:
    """The kernel that actually runs: SDPA falls back to math where no fused kernel takes the shapes."""
    if attention not in ATTENTION:
        raise ValueError(f"unknown attention kernel {attention!r}")
    if attention == "sdpa" and arch.model_type in _SDPA_BROADCAST_MQA and arch.num_key_value_heads == 1 < arch.num_attention_heads:
        return "sdpa_math"
    if attention == "flash_attention_2" and arch.model_type in _SOFTCAP_FAMILIES:
        return attention  # flash-attn supports softcapping natively
    return attention


def _norm(saved: _Saved, name: str, arch: Architecture, width: float, p: int, trained: Trainability,
          weight_trainable: bool, *, input_needed: bool = True, r: int | None = None, compiled: bool = False) -> None:
    """A norm over `width` features per token, as the HF code computes it (bytes per token).

    r: bytes of the norm's input when it differs from the compute dtype (AMP's fp32 residual stream).
    compiled: under torch.compile an RMSNorm keeps its input and rstd; backward recomputes the rest.
    """
    if not input_needed:
        return
    p = r or p
    if arch.norm == "layernorm":
        saved.add(f"{name}.input", p * width)  # F.layer_norm keeps its input, mean and rstd for any grad
        saved.add(f"{name}.stats", 8)
        return
    if compiled:
        saved.add(f"{name}.input", p * width)  # the layer's input, or the post-attention residual's addend
        saved.add(f"{name}.rsqrt", 4)
        return
    saved.add(f"{name}.fp32_input", 4 * width)  # x.to(float32) (x itself when p == 4) for pow and mul
    saved.add(f"{name}.rsqrt", 4)
    if weight_trainable:
        if arch.model_type in _FP32_NORM_FAMILIES:
            saved.add(f"{name}.normalized", 4 * width)  # Gemma multiplies by (1 + w) in fp32
        else:
            saved.add(f"{name}.normalized", p * width)  # weight * x.to(input_dtype) keeps x for dw


def _linear_inputs(saved: _Saved, name: str, width: float, p: int, modules: tuple[Module, ...],
                   trained: Trainability, *, extra_need: bool = False, r: int | None = None) -> None:
    """The input shared by `modules` is kept if any of them needs it for a weight grad.

    Under autocast over an fp32 residual (r > p) each linear casts its fp32 input to 16 bits itself,
    so every linear that needs its input keeps its own copy.
    """
    needing = sum(m.per_layer for m in modules if trained.needs_input(m.name))
    if r is not None and r > p:
        saved.add(name, p * width * (needing + (1 if extra_need else 0)))
    elif extra_need or needing:
        saved.add(name, p * width)


def _mask(mask_bytes: float | None, element_bytes: float) -> float:
    """Bytes per element of a dropout mask: CUDA's bool mask, or (None) the masked tensor's dtype as on CPU."""
    return element_bytes if mask_bytes is None else mask_bytes


def _lora_adapters(saved: _Saved, role: str, modules: tuple[Module, ...], trained: Trainability, p: int,
                   mask_bytes: float | None) -> None:
    """Per LoRA adapter: its own copy of the input (PEFT casts to the adapter dtype) and the rank-r middle."""
    for m in modules:
        if m.name not in trained.lora:
            continue
        n = m.per_layer
        copy = trained.adapter_input_bytes if trained.adapter_input_bytes else 0.0
        if trained.lora_dropout > 0:
            saved.add(f"{role}.lora_dropout", n * m.in_features * (_mask(mask_bytes, copy or p) + (copy or p)))
        elif copy:
            saved.add(f"{role}.lora_input_copy", n * m.in_features * copy)
        saved.add(f"{role}.lora_rank_out", n * trained.lora_rank * trained.adapter_output_bytes)


def _attention(saved: _Saved, arch: Architecture, kernel: str, s: int, p: int, mods: LayerModules,
               trained: Trainability, mask_bytes: float | None, sliding: bool, input_grad: bool = True,
               autocast: bool = False, compiled: bool = False, repeat_kv: bool = False) -> None:
    """What the attention block saves per token, after the (shared) normed input.

    repeat_kv: the model code repeats grouped K/V to every query head before a fused kernel (LitGPT).

    autocast: torch autocast runs softmax in fp32 whatever the model code asks for.
    compiled: torch.compile's partitioner keeps eager attention's raw scores and fp32 row max/sum
    and recomputes the fp32 softmax in backward; its norms keep input and rstd.
    """
    a, kv = arch.num_attention_heads, arch.num_key_value_heads
    mla = arch.mla
    if mla is not None:
        dq = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        dv = mla.v_head_dim
        kv = a
        grad = input_grad or any(m.name in trained.lora for m in mods.attn_in)  # q_a/kv_a outputs need grad?
        if mla.q_lora_rank:
            _norm(saved, "q_a_norm", arch, mla.q_lora_rank, p, trained, trained.weight("norm"), input_needed=grad, compiled=compiled)
            _linear_inputs(saved, "q_b.input", mla.q_lora_rank, p, mods.q_b, trained)
        _norm(saved, "kv_a_norm", arch, mla.kv_lora_rank, p, trained, trained.weight("norm"), input_needed=grad,
              compiled=compiled)
        _linear_inputs(saved, "kv_b.input", mla.kv_lora_rank, p, mods.kv_b, trained)
    else:
        dq = dv = arch.head_dim
    if arch.qk_norm:
        for head, n in (("q", a), ("k", kv)):
            _norm(saved, f"{head}_norm", arch, n * dq, p, trained, trained.weight("norm"), compiled=compiled)
    rep = a // kv if kv else 1
    head_major_q = mla is not None or arch.partial_rotary_factor < 1 or arch.model_type in _SDPA_BROADCAST_MQA
    o_needed = any(trained.needs_input(m.name) for m in mods.attn_out)
    drop = arch.attention_dropout > 0
    if kernel == "eager":
        softmax_fp32 = arch.model_type not in _SOFTMAX_IN_COMPUTE_DTYPE or autocast
        k_heads = a if rep > 1 else kv
        saved.add("attn.q", p * a * dq)
        saved.add("attn.k", p * k_heads * dq)
        saved.add("attn.v", p * k_heads * dv)
        if arch.model_type in _SOFTCAP_FAMILIES:
            saved.add("attn.softcap_tanh", p * a * s, s2=True)
        if softmax_fp32 and p < 4 and compiled and not drop and arch.model_type not in _SOFTCAP_FAMILIES:
            saved.add("attn.scores", p * a * s, s2=True)  # QK^T before the fp32 softmax, recomputed from it
            saved.add("attn.row_stats", 8 * a)  # the softmax's fp32 row max and sum
            saved.add("attn.probs", p * a * s, s2=True)
        elif softmax_fp32 and p < 4:
            saved.add("attn.softmax_fp32", 4 * a * s, s2=True)
            if not drop:
                saved.add("attn.probs", p * a * s, s2=True)
        else:
            saved.add("attn.softmax", p * a * s, s2=True)
        if drop:
            saved.add("attn.dropout_mask", _mask(mask_bytes, p) * a * s, s2=True)
            saved.add("attn.probs_dropped", p * a * s, s2=True)
        if o_needed:
            saved.add("attn.out", p * a * dv)  # transpose(1, 2).contiguous() before o_proj
    elif kernel == "sdpa_math":
        # torch >= 2.5 runs SDPA's math path in fp32 for half inputs; q and k are scaled copies,
        # K/V broadcast or repeated to all query heads.
        acc = 4
        saved.add("attn.q", acc * a * dq)
        saved.add("attn.k", acc * a * dq)
        saved.add("attn.v", acc * a * dv)
        saved.add("attn.softmax_fp32", acc * a * s, s2=True)
        if drop:
            saved.add("attn.dropout_mask", _mask(mask_bytes, acc) * a * s, s2=True)
            saved.add("attn.probs_dropped", acc * a * s, s2=True)
        if o_needed:
            saved.add("attn.out", p * a * dv)
    else:  # fused: flash_attention_2, or sdpa's flash / memory-efficient kernels
        if kernel == "flash_attention_2":
            k_heads = kv
            if mla is not None and dv != dq:
                saved.add("attn.q", p * a * dq)
                saved.add("attn.k", p * a * dq)
                saved.add("attn.v_padded", p * a * dq)  # transformers pads V to the QK head dim
                saved.add("attn.out", p * a * dq)
                saved.add("attn.lse", 4 * a)
                if o_needed:
                    saved.add("attn.out_sliced", p * a * dv)
                return
        else:
            gqa_native = not sliding and dq == dv and dq <= 256
            k_heads = kv if (rep == 1 or gqa_native) else a
        if repeat_kv and kv > 1:
            k_heads = a  # expanded and reshaped into a copy per query head (MQA's single head stays broadcast)
        saved.add("attn.q", p * a * dq)
        saved.add("attn.k", p * k_heads * dq)
        saved.add("attn.v", p * k_heads * dv)
        saved.add("attn.out", p * a * dv)
        saved.add("attn.lse", 4 * a)
        if head_major_q and o_needed:
            saved.add("attn.out_copy", p * a * dv)  # head-major output needs a copy before o_proj


def _mlp(saved: _Saved, prefix: str, arch: Architecture, width: float, p: int, ins: tuple[Module, ...],
         outs: tuple[Module, ...], trained: Trainability, tokens_per_token: float = 1.0, compiled: bool = False) -> None:
    """A (gated) MLP of `width` on the normed input; its input is accounted by the caller.

    compiled: torch.compile recomputes the activation in backward from its input (the gate or fc1
    output): no temporaries, no activation output; the down projection's input is still kept.
    """
    saves = _ACT_SAVES.get(arch.hidden_act, _ACT_DEFAULT)
    fused = any(m.out_features == 2 * width for m in ins) or any("gate_up" in m.name for m in ins)
    gated = arch.gated_mlp
    out_needed = any(trained.needs_input(m.name) for m in outs)
    unit = p * width * tokens_per_token
    internal = sum(1 for x in saves if x == "t")
    if compiled:
        if gated and fused:
            saved.add(f"{prefix}.gate_up", 2 * unit)
        elif gated:
            saved.add(f"{prefix}.gate", unit)
            saved.add(f"{prefix}.up", unit)
        elif saves != ("out",) and saves:
            saved.add(f"{prefix}.fc_out", unit)  # the activation's input, for recomputing it
        if out_needed or (not gated and saves == ("out",)):
            saved.add(f"{prefix}.down_input", unit)
        return
    if gated:
        if fused:
            saved.add(f"{prefix}.gate_up", 2 * unit)
        else:
            if "in" in saves:
                saved.add(f"{prefix}.gate", unit)
            saved.add(f"{prefix}.up", unit)
        saved.add(f"{prefix}.act_internal", internal * unit)
        saved.add(f"{prefix}.act_out", unit)  # the product act(g) * u keeps both factors
        if out_needed:
            saved.add(f"{prefix}.down_input", unit)
    else:
        if "in" in saves:
            saved.add(f"{prefix}.fc_out", unit)
        saved.add(f"{prefix}.act_internal", internal * unit)
        if "out" in saves or out_needed:
            saved.add(f"{prefix}.act_out", unit)


def _sliding(arch: Architecture, kind: str, s: int) -> bool:
    """Whether a layer of this kind attends through a sliding-window mask at length s (Mistral: every layer)."""
    if arch.sliding_window is None or s <= arch.sliding_window:
        return False
    return "sliding" in kind or not any("sliding" in k for k in arch.layer_types)


def _layer_at(cache: dict, arch: Architecture, kind: str, mlp_kind: str, kernel: str, s: int, p: int,
              mods: LayerModules, trained: Trainability, mask_bytes: float | None, *, input_grad: bool = True,
              r: int | None = None, compiled: bool = False, repeat_kv: bool = False) -> _Saved:
    """`_layer` at length s, from a cached affine form: per-token terms are a + b·s (the a·s² terms)."""
    sliding = _sliding(arch, kind, s)
    key = (kind, mlp_kind, kernel, p, mods, trained, mask_bytes, input_grad, sliding, r, compiled, repeat_kv)
    forms = cache.get(key)
    if forms is None:
        forms = cache[key] = tuple(
            _layer(arch, kind, mlp_kind, kernel, length, p, mods, trained, mask_bytes, input_grad=input_grad,
                   sliding=sliding, r=r, compiled=compiled, repeat_kv=repeat_kv) for length in (0, 1))
    zero, one = forms
    out = _Saved()
    for name in one.terms.keys() | zero.terms.keys():
        a0 = zero.terms.get(name, 0.0)
        out.terms[name] = a0 + (one.terms.get(name, 0.0) - a0) * s
    out.s2_terms = set(one.s2_terms)
    return out


def _layer(arch: Architecture, kind: str, mlp_kind: str, kernel: str, s: int, p: int,
           mods: LayerModules, trained: Trainability, mask_bytes: float | None, *, input_grad: bool = True,
           sliding: bool = False, r: int | None = None, compiled: bool = False, repeat_kv: bool = False) -> _Saved:
    """Saved bytes per token of one layer (attention kind x MLP kind); the caller multiplies by b·s.

    compiled: the layer runs under torch.compile (see the module docstring for what changes).

    input_grad=False: the layer's input needs no gradient (layer 0 of a LoRA model without
    checkpointing): autograd records nothing until the first adapter, so the input norm (and, in a
    parallel block, an adapter-free MLP branch) saves nothing.
    """
    saved = _Saved()
    h = arch.hidden_size
    norm_w = trained.weight("norm")
    has_attention = "attention" in kind
    has_mlp = mlp_kind != "none"
    if kind == "mamba":
        _mamba(saved, arch, p, trained, r)
        return saved
    attn_input_users = mods.attn_in if has_attention else ()
    mlp_input_users = (mods.mlp_in if mlp_kind == "dense" else mods.shared_in + mods.router) if has_mlp else ()
    mlp_adapted = any(m.name in trained.lora for m in mods.mlp_in + mods.mlp_out + mods.shared_in + mods.shared_out)
    skip_parallel_mlp = not input_grad and arch.parallel_block and not mlp_adapted and not trained.full
    if has_attention:
        _norm(saved, "attn_norm", arch, h, p, trained, norm_w, input_needed=input_grad, r=r, compiled=compiled)
        if arch.parallel_block:
            _linear_inputs(saved, "attn_norm.out", h, p, attn_input_users + mlp_input_users, trained, r=r)
        else:
            _linear_inputs(saved, "attn_norm.out", h, p, attn_input_users, trained, r=r)
        _lora_adapters(saved, "attn_in", mods.attn_in + mods.q_b + mods.kv_b, trained, p, mask_bytes)
        _attention(saved, arch, kernel, s, p, mods, trained, mask_bytes, sliding, input_grad, autocast=bool(r and r > p),
                   compiled=compiled, repeat_kv=repeat_kv)
        _lora_adapters(saved, "attn_out", mods.attn_out, trained, p, mask_bytes)
        if arch.model_type in _SANDWICH_NORM_FAMILIES:
            _norm(saved, "post_attn_norm", arch, h, p, trained, norm_w, r=r, compiled=compiled)
        if arch.hidden_dropout > 0:
            saved.add("attn.resid_dropout_mask", _mask(mask_bytes, p) * h)
    if has_mlp and not (skip_parallel_mlp and has_attention):
        if not (arch.parallel_block and has_attention):
            _norm(saved, "mlp_norm", arch, h, p, trained, norm_w, r=r, compiled=compiled)
            router_fp32 = mlp_kind == "moe" and arch.model_type in _FP32_ROUTER_FAMILIES and p < 4
            router_needs = mlp_kind == "moe" and not router_fp32 and trained.weight("router")
            _linear_inputs(saved, "mlp_norm.out", h, p, mlp_input_users, trained, extra_need=router_needs, r=r)
        if mlp_kind == "dense":
            _mlp(saved, "mlp", arch, _width(mods.mlp_in, arch.intermediate_size), p, mods.mlp_in, mods.mlp_out, trained,
                 compiled=compiled)
            _lora_adapters(saved, "mlp_in", mods.mlp_in, trained, p, mask_bytes)
            _lora_adapters(saved, "mlp_out", mods.mlp_out, trained, p, mask_bytes)
        else:
            _moe(saved, arch, p, mods, trained, mask_bytes, compiled)
        if arch.model_type in _SANDWICH_NORM_FAMILIES:
            _norm(saved, "post_mlp_norm", arch, h, p, trained, norm_w, r=r, compiled=compiled)
        if arch.hidden_dropout > 0 and not (arch.parallel_block and arch.model_type == "falcon"):
            saved.add("mlp.resid_dropout_mask", _mask(mask_bytes, p) * h)
    return saved


def _held_inputs(arch: Architecture, mods: LayerModules, names: frozenset[str], p: int) -> float:
    """Bytes per token of the distinct inputs of one layer's linears named in `names` (linears fed the
    same tensor, such as q/k/v, share one; a parallel block's attention and MLP share the normed input)."""
    shared_input = mods.attn_in + mods.mlp_in + mods.shared_in if arch.parallel_block else ()
    groups = [shared_input] if shared_input else [mods.attn_in, mods.mlp_in + mods.shared_in]
    groups += [mods.attn_out, mods.q_b, mods.kv_b, mods.mlp_out, mods.shared_out]
    total = sum(p * max(m.in_features for m in group) for group in groups if any(m.name in names for m in group))
    for group in (mods.experts_in, mods.experts_out):  # each token reaches top-k experts: k routed copies
        held = [m for m in group if m.name in names]
        if held:
            total += p * max(1, arch.experts_per_token) * held[0].in_features
    return total


def _width(mods: tuple[Module, ...], default: int) -> int:
    """The MLP's intermediate width from its input projections (a fused gate_up counts half)."""
    widths = [m.out_features // 2 if "gate_up" in m.name else m.out_features for m in mods]
    return max(widths) if widths else default


def _moe(saved: _Saved, arch: Architecture, p: int, mods: LayerModules, trained: Trainability, mask_bytes: float | None,
         compiled: bool = False) -> None:
    """Router, routed experts over b·s·k token copies (dropless, as HF) and shared experts."""
    h, e, k = arch.hidden_size, arch.num_experts, max(1, arch.experts_per_token)
    if arch.model_type in _FP32_ROUTER_FAMILIES and trained.weight("router") and p < 4:
        saved.add("router.fp32_input", 4 * h)  # F.linear(x.float(), w.float()) keeps the fp32 copy
    saved.add("router.probs", 4 * e + 12 * k + 4 + (e if arch.model_type in _FP32_ROUTER_FAMILIES else 0))
    width = arch.moe_intermediate_size or arch.intermediate_size
    experts_in = any(trained.needs_input(m.name) for m in mods.experts_in) or (trained.full and mods.experts_in)
    if experts_in:
        saved.add("experts.gathered_input", k * p * h)
    _mlp(saved, "experts", arch, width, p, mods.experts_in or (Module("gate_up_proj", h, 2 * width, 1, "experts"),),
         mods.experts_out or (Module("down_proj", width, h, 1, "experts"),), trained if mods.experts_out else FULL,
         tokens_per_token=k, compiled=compiled)
    saved.add("experts.weighted_output", k * p * h)  # kept for the routing weights' gradient
    saved.add("experts.routing", k * (4 + 24))  # routing weight per copy, sort/scatter indices
    if mods.shared_in:
        shared_width = _width(mods.shared_in, width * max(1, arch.num_shared_experts))
        _mlp(saved, "shared_expert", arch, shared_width, p, mods.shared_in, mods.shared_out, trained, compiled=compiled)
        _lora_adapters(saved, "shared_in", mods.shared_in, trained, p, mask_bytes)
        _lora_adapters(saved, "shared_out", mods.shared_out, trained, p, mask_bytes)


def _mamba(saved: _Saved, arch: Architecture, p: int, trained: Trainability, r: int | None = None) -> None:
    """A Mamba-2 mixer layer, approximately: norm, in_proj output, conv, gated output, out_proj input."""
    h = arch.hidden_size
    inner = 2 * h
    _norm(saved, "mixer_norm", arch, h, p, trained, trained.weight("norm"), r=r)
    saved.add("mixer.norm_out", p * h)
    saved.add("mixer.in_proj_out", p * (2 * inner + 2 * 128 + arch.num_attention_heads))
    saved.add("mixer.conv_out", p * (inner + 2 * 128))
    saved.add("mixer.scan_out", p * inner)
    saved.add("mixer.gated_norm", 4 * inner + p * inner)
    saved.add("mixer.out_proj_input", p * inner)


def _layer_plan(arch: Architecture) -> list[tuple[str, str, int]]:
    """(attention kind, MLP kind, count) groups of decoder layers."""
    kinds = dict(arch.layer_types) or {"full_attention": arch.num_layers}
    hybrid = any(k in kinds for k in ("mamba", "mlp", "moe"))
    plan: list[tuple[str, str, int]] = []
    if hybrid:  # Nemotron-H style: each layer is one block
        for kind, count in kinds.items():
            if "attention" in kind:
                plan.append((kind, "none", count))
            elif kind == "mamba":
                plan.append(("mamba", "none", count))
            else:
                plan.append(("mlp_only", "moe" if kind == "moe" and arch.is_moe else "dense", count))
        return [p for p in plan if p[2]]
    total = sum(kinds.values())
    dense = arch.num_dense_layers if arch.is_moe else total
    for kind, count in kinds.items():
        d = round(count * dense / total) if total else 0
        if d:
            plan.append((kind, "dense", d))
        if count - d:
            plan.append((kind, "moe", count - d))
    return plan


# --------------------------------------------------------------------------------------------
# The whole model


def estimate_activations(
    arch: Architecture,
    inventory: Inventory,
    *,
    micro_batch_size: int,
    seq_len: int,
    compute_bytes: int = 2,
    residual_bytes: int | None = None,
    attention: str = "flash_attention_2",
    gradient_checkpointing: str = "off",
    trained: Trainability = FULL,
    dropout_mask_bytes: float | None = 1.0,
    dequant_workspace: int = 0,
    modules: tuple[LayerModules, LayerModules] | None = None,
    cache: dict | None = None,
    loss_chunks: int = 1,
    compiled_loss: bool = False,
    activation_offloading: bool = False,
    compiled_layers: bool = False,
    retained_inputs: frozenset[str] = frozenset(),
    loss_upcast: bool = True,
    repeat_kv: bool = False,
) -> ActivationEstimate:
    """Activation bytes for a micro-batch: per-layer figures, model-level terms, transients.

    `loss_chunks`: chunked cross-entropy (torchtune CEWithChunkedOutputLoss, 8 chunks): the output
    projection and the fp32 upcast run per chunk of the sequence, so the loss backward's fp32
    buffers exist for one chunk at a time (the saved log_softmax outputs still add up to 4·b·s·V).
    `compiled_loss`: the loss under torch.compile (inductor): it saves the compute-dtype logits and
    two fp32 row statistics (max, logsumexp) instead of log_softmax's fp32 output, and its fused backward
    allocates only the logits' gradient.
    `activation_offloading`: torchtune's OffloadActivations around the model's forward: every saved
    tensor of the decoder (embeddings, layers, final norm; with checkpointing, the layer inputs)
    goes to CPU pinned memory; the GPU keeps about two layers' worth (the layer being computed in
    backward and the one being prefetched), the output projection's input (excluded by torchtune)
    and the loss (computed outside the context).
    `compiled_layers`: each decoder layer under torch.compile (torchtune compile=True): what the
    min-cut partitioner saves (see the module docstring); embeddings, final norm and head stay eager.

    `loss_upcast`: the cross-entropy runs on fp32 logits (transformers' loss). False: on the compute-dtype
    logits, which the training loop holds (nn.CrossEntropyLoss on model(...).logits, LitGPT): log_softmax
    keeps its output in that dtype and its backward needs two more such buffers.
    `repeat_kv`: the model code repeats grouped K/V heads to every query head before a fused attention
    kernel (LitGPT's expand + reshape), so the kernel saves K and V at the query heads' count.
    `retained_inputs`: linears whose inputs the previous step still holds at the end of this forward (ctx
    attributes of a graph the training loop has not dropped yet); without full checkpointing every layer's
    forward recorded them, so their distinct inputs count once more, over all layers.

    `modules`: the result of layer_modules(arch, inventory), when the caller has it already;
    `cache`: a dict the caller keeps per model, so repeated calls reuse the per-layer forms.
    """
    cache = {} if cache is None else cache
    r = compute_bytes if residual_bytes is None else residual_bytes
    b, s, p = micro_batch_size, seq_len, compute_bytes
    tokens = b * s
    kernel = resolve_attention(arch, attention, s)
    notes: list[str] = []
    if kernel != attention:
        notes.append(f"attention: {arch.model_type} cannot use a fused SDPA kernel (broadcast multi-query K/V); "
                     "SDPA falls back to its math path, which stores the attention matrix in fp32")
    dense_mods, moe_mods = modules or layer_modules(arch, inventory)
    layers: list[LayerActivation] = []
    for kind, mlp_kind, count in _layer_plan(arch):
        mods = moe_mods if mlp_kind == "moe" else dense_mods
        saved = _layer_at(cache, arch, kind, mlp_kind, kernel, s, p, mods, trained, dropout_mask_bytes, r=r,
                          compiled=compiled_layers, repeat_kv=repeat_kv)
        label = kind if mlp_kind in {"dense", "none"} else f"{kind}+moe"
        layers.append(LayerActivation(
            kind=label, count=count, bytes=round(saved.total * tokens),
            terms={k: round(v * tokens) for k, v in saved.terms.items()},
            attention_core_bytes=round(saved.s2_total * tokens),
        ))
        if arch.is_encoder_decoder:
            notes.append("encoder-decoder: encoder layers approximated as decoder layers at the same length, "
                         "cross-attention as a second attention block")
    if arch.is_encoder_decoder and arch.encoder_layers:
        base = layers[0]
        cross = _Saved()
        _attention(cross, arch, kernel, s, p, dense_mods, trained, dropout_mask_bytes, False)  # per token, exact s
        _norm(cross, "cross_norm", arch, arch.hidden_size, p, trained, trained.weight("norm"))
        layers[0] = LayerActivation(base.kind, base.count, base.bytes + round(cross.total * tokens),
                                    base.terms | {"cross_attention": round(cross.total * tokens)},
                                    base.attention_core_bytes + round(cross.s2_total * tokens))
        layers.append(LayerActivation("encoder", arch.encoder_layers, base.bytes, base.terms, base.attention_core_bytes))
    if any(layer.kind == "mamba" for layer in layers):
        notes.append("mamba layers: approximate (projections, conv and gated output; the scan's own state is not modelled)")

    h, v = arch.hidden_size, arch.vocab_size
    embedding = 0.0
    if trained.full or trained.weight("embed_tokens"):
        embedding += 8 * tokens  # token ids for the embedding gradient
    if arch.position_embedding == "learned" and trained.full:
        embedding += 8 * s
    if arch.embedding_dropout > 0:
        embedding += _mask(dropout_mask_bytes, p) * h * tokens
    if arch.position_embedding == "rope":
        rope = arch.mla.qk_rope_head_dim if arch.mla else int(arch.head_dim * arch.partial_rotary_factor)
        embedding += 2 * s * rope * r  # cos and sin for (1, s) positions (in the residual's dtype), shared by all layers

    if arch.model_type in _EMBEDDING_NORM_FAMILIES:
        emb = _Saved()
        _norm(emb, "embedding_norm", arch, h, p, trained, trained.weight("norm"), r=r)
        embedding += emb.total * tokens

    head_trained = trained.needs_input("lm_head")
    final = _Saved()
    if arch.model_type in _MLM_HEAD_FAMILIES:
        final.add("head_transform.input", p * h if trained.full else 0)
        final.add("head_transform.act", p * h)  # the activation's input; its output feeds the LayerNorm
    _norm(final, "final_norm", arch, h, p, trained, trained.weight("norm"), r=r)  # BERT: the head's LayerNorm
    if head_trained:
        final.add("lm_head.input", p * h)  # one cast copy under autocast too
    _lora_adapters(final, "lm_head", (Module("lm_head", h, v, 1),), trained, p, dropout_mask_bytes)
    if compiled_loss:
        loss = p * tokens * v + 8 * tokens + 8 * tokens + 4  # logits (compute dtype), 2 fp32 row stats, labels
    elif loss_upcast:
        loss = 4 * tokens * v + 8 * tokens + 4  # log_softmax's fp32 output, labels, the scalar
    else:
        loss = 2 * p * tokens * v + 8 * tokens + 4  # the held logits and log_softmax's output, labels, the scalar
    if arch.model_type in _SOFTCAP_FAMILIES:
        loss += p * tokens * v  # final logit soft-capping keeps tanh's output
    chunks = max(1, min(int(loss_chunks), s))
    # The loss backward, a chunk at a time: eager cross-entropy needs two buffers of the logits' size (log_softmax's
    # incoming gradient and its result), fp32 with the upcast; compiled, inductor fuses it into one kernel that
    # writes the logits' gradient in the compute dtype.
    loss_peak = (p if compiled_loss else 8 if loss_upcast else 2 * p) * tokens * v / chunks
    if not loss_upcast and not compiled_loss:
        notes.append("cross-entropy on the compute-dtype logits (no fp32 upcast): the loop holds the logits, "
                     "log_softmax keeps its output and its backward two more buffers in that dtype")
    if chunks > 1:
        notes.append(f"chunked cross-entropy ({chunks} chunks): the loss backward's fp32 buffers exist one chunk at a time")
    if compiled_loss:
        notes.append("compiled loss: saves the compute-dtype logits and fp32 row statistics, not log_softmax's fp32 output; "
                     "its fused backward allocates only the logits' gradient"
                     + ("" if compiled_layers else "; the decoder layers are counted as eager (set compile_layers if they are compiled)"))
    if compiled_layers:
        notes.append("compiled decoder layers: norms keep input and rstd, activation functions and eager attention's fp32 "
                     "softmax are recomputed in backward (inductor's min-cut partitioner)")
        if any(layer.kind == "mamba" for layer in layers) or arch.model_type in _SANDWICH_NORM_FAMILIES:
            notes.append("compiled layers: sandwich norms and mamba mixers are counted with the generic rule (not validated)")

    adjustments = 0
    plan = _layer_plan(arch)
    if not trained.input_requires_grad and gradient_checkpointing == "off" and plan and not trained.full:
        kind, mlp_kind, _ = plan[0]
        mods = moe_mods if mlp_kind == "moe" else dense_mods
        regular = _layer_at(cache, arch, kind, mlp_kind, kernel, s, p, mods, trained, dropout_mask_bytes, r=r,
                            compiled=compiled_layers, repeat_kv=repeat_kv)
        first = _layer_at(cache, arch, kind, mlp_kind, kernel, s, p, mods, trained, dropout_mask_bytes, input_grad=False, r=r,
                          compiled=compiled_layers, repeat_kv=repeat_kv)
        adjustments = round((first.total - regular.total) * tokens)
        if arch.embedding_dropout > 0:
            adjustments -= round(_mask(dropout_mask_bytes, p) * h * tokens)  # no grad: no mask kept
        notes.append("layer 0 saves less: its input needs no gradient (frozen embeddings, no checkpointing)")

    checkpoint_inputs = 0
    recompute = 0
    body_layers = sum(layer.count for layer in layers)
    if gradient_checkpointing == "full":
        checkpoint_inputs = r * h * tokens * body_layers
        if kernel == "eager":
            embedding += p * b * s * s + 8 * s  # the 4-D causal mask and positions stay in the recompute closure
        recompute = max((layer.bytes for layer in layers), default=0)
    elif gradient_checkpointing == "selective":
        recompute = max((layer.attention_core_bytes for layer in layers), default=0)
        if kernel in {"flash_attention_2", "sdpa"}:
            notes.append("selective checkpointing changes nothing with a fused attention kernel (no a·s² tensors)")
    recompute += dequant_workspace
    offloaded = 0
    if activation_offloading:
        if gradient_checkpointing == "full":
            body = checkpoint_inputs
            unit = r * arch.hidden_size * tokens
        elif gradient_checkpointing == "selective":
            body = sum((layer.bytes - layer.attention_core_bytes) * layer.count for layer in layers)
            unit = max((layer.bytes - layer.attention_core_bytes for layer in layers), default=0)
        else:
            body = sum(layer.bytes * layer.count for layer in layers)
            unit = max((layer.bytes for layer in layers), default=0)
        lm_head_input = p * h * tokens if head_trained else 0
        decoder = embedding + body + final.total * tokens - lm_head_input + adjustments
        offloaded = max(0, round(decoder - min(body, 2 * unit)))
        notes.append("activation offloading: the decoder's saved tensors in CPU pinned memory, about two layers' worth "
                     "on the GPU at a time; the output projection's input and the loss stay on the GPU")
    retained = 0
    if retained_inputs and gradient_checkpointing != "full":
        retained = round(tokens * sum(
            count * _held_inputs(arch, moe_mods if mlp_kind == "moe" else dense_mods, retained_inputs, p)
            for kind, mlp_kind, count in plan if kind != "mamba")
            + (p * h if any(g.component == "head" and g.name in retained_inputs for g in inventory.linears) else 0))
        notes.append("the training loop keeps the previous step's graph until the next forward ends, so that step's "
                     "4-bit layer inputs (ctx attributes of bitsandbytes < 0.43.2) are still on the GPU")
    return ActivationEstimate(
        micro_batch_size=b,
        seq_len=s,
        attention=kernel,
        gradient_checkpointing=gradient_checkpointing,
        layers=tuple(layers),
        embedding=round(embedding),
        checkpoint_inputs=round(checkpoint_inputs),
        final=round(final.total * tokens),
        loss=round(loss),
        loss_peak=round(max(loss_peak, dequant_workspace)),
        recompute=round(recompute),
        adjustments=adjustments,
        notes=tuple(dict.fromkeys(notes)),
        offloaded=offloaded,
        retained=retained,
        dequant_workspace=dequant_workspace,
    )

