"""How the step's schedule changes what is held: a frozen layer 0, checkpointing, offloading, the previous step."""

from __future__ import annotations

from typing import NamedTuple

from hfmem.memory.activations.head import head_keeps_input
from hfmem.memory.activations.layer import attends_sliding, layer_at
from hfmem.memory.activations.linears import dequantized_weights
from hfmem.memory.activations.ops import FUSED_KERNELS, mask_bytes
from hfmem.memory.activations.recompute import coverage, op_row_parallel_per_token, op_saved_per_token
from hfmem.memory.activations.result import LayerActivation, body_bytes
from hfmem.memory.activations.spec import ActivationSettings, ActivationSpec
from hfmem.memory.activations.structure import LayerModules


class Checkpointing(NamedTuple):
    """What gradient checkpointing keeps and recomputes."""

    inputs: int
    """With full checkpointing: every checkpointed region's input; with per-op checkpointing: every layer's input
    and the op outputs it keeps."""
    recompute: int
    """The transient of one recomputed region (or attention core), plus the dequantised weight beside it."""
    kept_share: float
    """With full checkpointing: the share of decoder layers outside every checkpointed region (saved whole)."""
    closure: int
    """Under full checkpointing, the 4-D mask kept by the recompute closure: eager attention's additive mask in
    the compute dtype (and the positions), SDPA's boolean mask when there is one (padding, a sliding window)."""
    row_parallel: tuple[int, int] = (0, 0)
    """With per-op checkpointing: the saved row-parallel matmul outputs and the row-parallel projections' outputs
    (ActivationEstimate.op_row_saved, op_row_outputs)."""


def first_layer_adjustment(spec: ActivationSpec, settings: ActivationSettings, cache: dict, notes: list[str]) -> int:
    """Layer 0 saves less when its input needs no gradient (frozen embeddings, no checkpointing)."""
    trained, s = spec.trained, settings.seq_len
    if trained.input_requires_grad or settings.gradient_checkpointing != "off" or not spec.plan or trained.full:
        return 0
    tokens = settings.micro_batch_size * s
    kind, mlp_kind, _ = spec.plan[0]
    regular = layer_at(cache, spec, kind, mlp_kind, s)
    first = layer_at(cache, spec, kind, mlp_kind, s, input_grad=False)
    adjustment = round((first.total - regular.total) * tokens)
    if kind != "mamba":
        mods = spec.modules(mlp_kind)
        adjustment -= round(dequantized_weights(spec, mods) - dequantized_weights(spec, mods, input_grad=False))
    if spec.arch.embedding_dropout > 0:
        # no grad: no mask kept
        adjustment -= round(mask_bytes(spec.mask_bytes, spec.p) * spec.arch.hidden_size * tokens)
    notes.append("layer 0 saves less: its input needs no gradient (frozen embeddings, no checkpointing)")
    return adjustment


def checkpointing(spec: ActivationSpec, settings: ActivationSettings, layers: list[LayerActivation],
                  notes: list[str]) -> Checkpointing:
    """Full checkpointing keeps each checkpointed region's input and recomputes one region at a time (which layers:
    settings.checkpoint_method); selective recomputes only the attention core (Korthikanti et al.); per-op keeps
    each layer's input and the outputs torchtitan's policy saves, and recomputes the rest of one layer at a time."""
    b, s = settings.micro_batch_size, settings.seq_len
    mode = settings.gradient_checkpointing
    inputs, recompute, closure, kept, row_parallel = 0.0, 0, 0, 0.0, (0, 0)
    largest = max((layer.bytes for layer in layers), default=0)
    if mode in ("full", "op"):
        if spec.kernel == "eager":
            closure = spec.p * b * s * s + 8 * s  # the 4-D causal mask and positions stay in the recompute closure
        elif spec.kernel == "sdpa" and (spec.padding_mask or any(attends_sliding(spec.arch, kind, s)
                                                                 for kind, _, _ in spec.plan)):
            closure = b * s * s  # transformers' boolean (b, 1, s, s) mask
    if mode == "full":
        total = sum(layer.count for layer in layers)
        cover = coverage(settings.checkpoint_method, settings.checkpoint_layers, total)
        inputs = spec.r * spec.arch.hidden_size * b * s * cover.units
        kept = 1 - cover.covered / total if total else 0.0
        recompute = cover.group * largest
        if not cover.units:
            closure = 0
    elif mode == "op":
        inputs = b * s * sum(count * op_layer_saved(spec, kind, mlp_kind) for kind, mlp_kind, count in spec.plan)
        rows = [(count, op_row_parallel_per_token(spec.modules(mlp_kind), p=spec.p, hidden=spec.arch.hidden_size))
                for kind, mlp_kind, count in spec.plan if kind != "mamba"]
        row_parallel = (round(b * s * sum(c * saved for c, (saved, _) in rows)),
                        round(b * s * sum(c * outputs for c, (_, outputs) in rows)))
        recompute = largest
        if spec.kernel != "sdpa":
            notes.append("per-op checkpointing recomputes the attention kernel: only SDPA's kernels are on "
                         "torchtitan's save list")
    elif mode == "selective":
        recompute = max((layer.attention_core_bytes for layer in layers), default=0)
        if spec.kernel in FUSED_KERNELS:
            notes.append("selective checkpointing changes nothing with a fused attention kernel (no a·s² tensors)")
    return Checkpointing(round(inputs), recompute + settings.dequant_workspace, kept_share=kept, closure=closure,
                         row_parallel=row_parallel)


def op_layer_saved(spec: ActivationSpec, kind: str, mlp_kind: str) -> float:
    """Bytes per token one layer of a kind keeps under per-op checkpointing; a Mamba layer is counted at its input
    only (what the policy saves of its projections and scan kernel is not modelled)."""
    arch = spec.arch
    if kind == "mamba":
        return spec.r * arch.hidden_size
    heads = arch.num_attention_heads
    dv = arch.mla.v_head_dim if arch.mla is not None else arch.head_dim
    return op_saved_per_token(spec.modules(mlp_kind), p=spec.p, r=spec.r, hidden=arch.hidden_size,
                              attention_out=spec.p * heads * dv + 4 * heads, attention_saved=spec.kernel == "sdpa")


def offloaded_bytes(spec: ActivationSpec, settings: ActivationSettings, layers: list[LayerActivation], *,
                    embedding: float, final: float, adjustments: int, checkpoint_inputs: int, kept_share: float,
                    notes: list[str]) -> int:
    """With activation offloading, the decoder's saved bytes in CPU pinned memory: all but about two layers'
    worth (and the output projection's input, which torchtune keeps on the GPU)."""
    if not settings.activation_offloading:
        return 0
    mode, tokens = settings.gradient_checkpointing, settings.micro_batch_size * settings.seq_len
    body = body_bytes(layers, mode, checkpoint_inputs, kept_share)
    if mode == "full" and not kept_share:
        unit = spec.r * spec.arch.hidden_size * tokens
    elif mode == "op":
        unit = checkpoint_inputs // max(1, sum(layer.count for layer in layers))
    elif mode == "selective":
        unit = max((layer.bytes - layer.attention_core_bytes for layer in layers), default=0)
    else:
        unit = max((layer.bytes for layer in layers), default=0)
    lm_head_input = spec.p * spec.arch.hidden_size * tokens if head_keeps_input(spec) else 0
    decoder = embedding + body + final - lm_head_input + adjustments
    notes.append("activation offloading: the decoder's saved tensors in CPU pinned memory, about two layers' worth "
                 "on the GPU at a time; the output projection's input and the loss stay on the GPU")
    return max(0, round(decoder - min(body, 2 * unit)))


def retained_bytes(spec: ActivationSpec, settings: ActivationSettings, notes: list[str]) -> int:
    """The previous step's inputs of `settings.retained_inputs` still held at the end of this forward."""
    names = settings.retained_inputs
    if not names or settings.gradient_checkpointing in ("full", "op"):
        return 0
    tokens = settings.micro_batch_size * settings.seq_len
    per_token = sum(count * _held_inputs(spec, spec.modules(mlp_kind), names)
                    for kind, mlp_kind, count in spec.plan if kind != "mamba")
    head = spec.p * spec.arch.hidden_size if spec.head_linears & names else 0
    notes.append("the training loop keeps the previous step's graph until the next forward ends, so that step's "
                 "quantized layer inputs (ctx attributes of bitsandbytes' LLM.int8 and of its 4-bit matmul before "
                 "0.43.2) are still on the GPU")
    return round(tokens * per_token + head)


def _held_inputs(spec: ActivationSpec, mods: LayerModules, names: frozenset[str]) -> float:
    """Bytes per token of the distinct inputs of one layer's linears named in `names` (linears fed the
    same tensor, such as q/k/v, share one; a parallel block's attention and MLP share the normed input)."""
    p = spec.p
    shared_input = mods.attn_in + mods.mlp_in + mods.shared_in if spec.arch.parallel_block else ()
    groups = [shared_input] if shared_input else [mods.attn_in, mods.mlp_in + mods.shared_in]
    groups += [mods.attn_out, mods.q_b, mods.kv_b, mods.mlp_out, mods.shared_out]
    total = sum(p * max(m.in_features for m in group) for group in groups if any(m.name in names for m in group))
    for group in (mods.experts_in, mods.experts_out):  # each token reaches top-k experts: k routed copies
        held = [m for m in group if m.name in names]
        if held:
            total += p * max(1, spec.arch.experts_per_token) * held[0].in_features
    return total
