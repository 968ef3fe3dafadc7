"""What one decoder layer's backward holds at once besides the saved tensors: the gradients of its intermediates.

Bytes per token of the largest moment over the layer's saved tensors, measured with the whole-step tracker
(tests/live_peak.py). The MLP's backward runs first, with all of the layer's saved tensors alive: in a gated
MLP the down projection's input gradient and the two gradients of act(gate)·up exist together (three b·s·I
tensors; without gating, the down projection's input gradient and the activation's, or the two of the first
product inside an activation composed of several ops, such as gelu_new). The attention's backward runs once
the MLP's saved tensors are freed: eager attention (and SDPA's math path) holds its fp32 softmax backward's
two a·s² buffers (the probabilities' gradient upcast to fp32 and the scores' gradient) and the gradients of
its output and of V at the query heads, after the 16-bit probabilities went with the P·V backward; a fused
kernel's q/k/v gradients are smaller than the MLP's. Two residual-stream gradients (the layer output's and
the sum it is accumulated into) are alive through both blocks.
"""

from __future__ import annotations

from hfmem.memory.activation_functions import activation_saves
from hfmem.memory.activations.saved import Saved
from hfmem.memory.activations.spec import ActivationSpec
from hfmem.memory.activations.structure import intermediate_width

_MLP_BLOCK = frozenset({"mlp", "mlp_norm", "mlp_in", "mlp_out", "post_mlp_norm", "experts", "router",
                        "shared_expert", "shared_in", "shared_out"})
"""Prefixes of the saved terms of a layer's MLP / MoE block (layer.py's names)."""


def backward_working(spec: ActivationSpec, kind: str, mlp_kind: str, s: int, saved: Saved) -> float:
    """Bytes per token a layer's backward holds on top of its saved tensors (`saved`, per token at length s)
    at its largest moment: the MLP's gradients, or the attention's once the MLP's saved tensors are gone."""
    arch = spec.arch
    if kind == "mamba":
        return 0.0  # not modelled (see the mamba note)
    mods = spec.modules(mlp_kind)
    moments = [0.0]
    if mlp_kind == "dense":
        moments.append(_mlp(spec, intermediate_width(mods.mlp_in, arch.intermediate_size), 1.0))
    elif mlp_kind == "moe":
        width = arch.moe_intermediate_size or arch.intermediate_size
        moments.append(_mlp(spec, width, max(1, arch.experts_per_token)))
    if "attention" in kind:
        # the MLP is computed after the attention (in a parallel block too), so its backward runs first
        mlp_saved = sum(v for k, v in saved.terms.items() if k.split(".", 1)[0] in _MLP_BLOCK)
        moments.append(_attention(spec, s) - mlp_saved - saved.terms.get("attn.probs", 0.0))
    return 2 * spec.r * arch.hidden_size + max(moments)


def _mlp(spec: ActivationSpec, width: int, copies: float) -> float:
    """The MLP's intermediate gradients: the down projection's input gradient and those of the activation."""
    composite = "t" in activation_saves(spec.activation)  # an activation made of several ops
    tensors = (3 if spec.arch.gated_mlp else 2) + (1 if composite else 0)
    return tensors * spec.p * width * copies


def _attention(spec: ActivationSpec, s: int) -> float:
    """An explicit softmax's backward (eager, SDPA math): its two a·s² gradients and those of the attention
    output and of V at the query heads; fused kernels: counted as below the MLP's."""
    a, d = spec.arch.num_attention_heads, spec.arch.head_dim
    if spec.kernel not in {"eager", "sdpa_math"}:
        return 0.0
    fp32 = spec.kernel == "sdpa_math" or spec.softmax_fp32
    return 2 * (4 if fp32 else spec.p) * a * s + 2 * spec.p * a * d
