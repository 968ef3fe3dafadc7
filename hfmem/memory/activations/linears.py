"""What linear layers keep of their input for a weight gradient, and what LoRA adapters add beside them."""

from __future__ import annotations

from dataclasses import fields

from hfmem.memory.activations.ops import mask_bytes
from hfmem.memory.activations.saved import Saved
from hfmem.memory.activations.spec import ActivationSpec
from hfmem.memory.activations.structure import LayerModules, Module
from hfmem.memory.peft_methods import boft_rotation_bytes, oft_rotation_bytes


def linear_inputs(saved: Saved, name: str, spec: ActivationSpec, width: float, modules: tuple[Module, ...], *,
                  extra_need: bool = False, residual: bool = False, input_grad: bool = True) -> None:
    """The input shared by `modules` is kept if any of them needs it for a weight grad.

    residual: the input is the residual stream's normed copy. Under autocast over an fp32 residual each
    linear casts its fp32 input to 16 bits itself, so every linear that needs its input keeps its own copy.
    extra_need: another op (a router) needs the input too. input_grad: whether that input needs a gradient.
    """
    needing = sum(m.per_layer for m in modules if spec.trained.needs_input(m.name, input_grad))
    if residual and spec.autocast:
        saved.add(name, spec.p * width * (needing + (1 if extra_need else 0)))
    elif needing and spec.q is not None and not extra_need:
        saved.add(name, spec.q * width)  # the low-precision recipe's quantized copy replaces the 16-bit input
    elif extra_need or needing:
        saved.add(name, spec.p * width)


def lora_adapters(saved: Saved, role: str, spec: ActivationSpec, modules: tuple[Module, ...], *,
                  input_grad: bool = True) -> None:
    """Per LoRA adapter: its own copy of the input (PEFT casts to the adapter dtype) and the rank-r middle.

    input_grad=False: the adapters' input needs no gradient (the first layer's normed input when the
    embeddings are frozen): dropout's backward is never needed, so its mask is not kept, only the dropped
    input that lora_A's weight gradient reads.
    """
    trained = spec.trained
    if trained.adapter not in {"lora", "dora"}:
        _frozen_projection_adapters(saved, role, spec, modules, input_grad=input_grad)
        return
    for m in modules:
        if m.name not in trained.lora:
            continue
        n = m.per_layer
        if trained.adapter == "dora":  # dora.py: (mag_norm_scale - 1) * base_result, mag_norm_scale * lora_result
            saved.add(f"{role}.dora_outputs", n * m.out_features * (spec.p + trained.adapter_output_bytes))
        copy = trained.adapter_input_bytes if trained.adapter_input_bytes else 0.0
        if trained.lora_dropout > 0:
            element = copy or spec.p
            mask = mask_bytes(spec.mask_bytes, element) if input_grad else 0.0
            saved.add(f"{role}.lora_dropout", n * m.in_features * (mask + element))
        elif copy:
            saved.add(f"{role}.lora_input_copy", n * m.in_features * copy)
        saved.add(f"{role}.lora_rank_out", n * trained.lora_rank * trained.adapter_output_bytes)


def _frozen_projection_adapters(saved: Saved, role: str, spec: ActivationSpec, modules: tuple[Module, ...], *,
                                input_grad: bool) -> None:
    """LoRA-FA, VeRA, IA3, OFT and BOFT, whose trained tensors never multiply the layer's input for a weight gradient
    through the frozen layer. BOFT keeps its base output for the scale's gradient (its input, kept for the rotation's,
    is counted by linear_inputs; boft_dropout drops rotation blocks, not tokens). OFT keeps its input cast to the
    adapter dtype for the rotation's gradient;
    LoRA-FA keeps lora_A's rank-r output for B's gradient; VeRA its rank-r middle (for lambda_d's) and the
    out-wide product (for lambda_b's) in the adapter dtype (peft/tuners/vera/layer.py Linear.forward); IA3 the base
    output it scales, or a feedforward layer's input cast to the adapter dtype (peft/tuners/ia3/layer.py)."""
    trained = spec.trained
    adapter_bytes = trained.adapter_output_bytes
    for m in modules:
        if m.name not in trained.lora:
            continue
        n = m.per_layer
        if trained.adapter == "boft":  # result * boft_scale keeps the base output for the scale's gradient
            saved.add(f"{role}.boft_output", n * m.out_features * spec.p)
            continue
        if trained.lora_dropout > 0 and input_grad and trained.adapter != "ia3":
            saved.add(f"{role}.lora_dropout", n * m.in_features * mask_bytes(spec.mask_bytes, adapter_bytes))
        if trained.adapter == "oft":  # the einsum keeps the input cast to the rotation's dtype
            saved.add(f"{role}.oft_input", n * m.in_features * adapter_bytes)
        elif trained.adapter == "lora-fa":
            saved.add(f"{role}.lora_rank_out", n * trained.lora_rank * adapter_bytes)
        elif trained.adapter == "vera":
            saved.add(f"{role}.vera_outputs", n * (trained.lora_rank + m.out_features) * adapter_bytes)
        elif m.name in trained.ia3_feedforward and not role.startswith("attn"):
            saved.add(f"{role}.ia3_input", n * m.in_features * (trained.adapter_input_bytes or spec.p))
        else:
            saved.add(f"{role}.ia3_output", n * m.out_features * spec.p)


def oft_rotations(spec: ActivationSpec, mods: LayerModules) -> float:
    """Bytes one layer's OFT rotations keep whatever the token count (hfmem.memory.peft_methods.oft_rotation_bytes)."""
    trained = spec.trained
    if trained.adapter != "oft":
        return 0.0
    return sum(m.per_layer * oft_rotation_bytes(m.in_features, trained.oft_block_size, trained.adapter_output_bytes)
               for role in fields(mods) for m in getattr(mods, role.name) if m.name in trained.lora)


def boft_rotations(spec: ActivationSpec, mods: LayerModules) -> float:
    """Bytes one layer's BOFT rotations keep whatever the token count (peft_methods.boft_rotation_bytes)."""
    trained = spec.trained
    if trained.adapter != "boft":
        return 0.0
    return sum(m.per_layer * boft_rotation_bytes(m.in_features, m.out_features, trained.boft_block_size,
                                                 trained.boft_butterfly, spec.p, trained.adapter_output_bytes)
               for role in fields(mods) for m in getattr(mods, role.name) if m.name in trained.lora)


def dequantized_weights(spec: ActivationSpec, mods: LayerModules, *, input_grad: bool = True) -> float:
    """Bytes of one layer's dequantised weights that autograd saves (trained.dequantized: torch.matmul on a weight
    that needs no gradient saves the weight for the input's). A layer whose input needs no gradient saves none for
    the linears reading that input (q/k/v, and a parallel block's MLP input)."""
    names = spec.trained.dequantized
    if not names:
        return 0.0
    skipped = () if input_grad else mods.attn_in + (mods.mlp_in if spec.arch.parallel_block else ())
    return spec.p * sum(m.in_features * m.out_features * m.per_layer for role in fields(mods)
                        for m in getattr(mods, role.name) if m.name in names and m not in skipped)


def merged_weights(spec: ActivationSpec, mods: LayerModules) -> tuple[float, float]:
    """Bytes of one layer's LoRA-merged expert tensors (trained.merged: W + B·A, in the weight's dtype), which autograd
    saves, and of the largest one, whose full-size gradient a backward step builds."""
    experts = max(1, spec.arch.num_experts)  # an experts Module counts one expert's matrix per routed copy
    sizes = [spec.w * m.in_features * m.out_features * m.per_layer * experts for role in fields(mods)
             for m in getattr(mods, role.name) if m.name in spec.trained.merged]
    return sum(sizes), max(sizes, default=0.0)
