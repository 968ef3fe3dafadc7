"""What a LayerNorm or RMSNorm saves for backward, as transformers' modeling code computes it."""

from __future__ import annotations

from hfmem.memory.activations.saved import Saved
from hfmem.memory.activations.spec import ActivationSpec


def norm(saved: Saved, name: str, spec: ActivationSpec, width: float, *, residual: bool = False,
         compiled: bool = False, input_needed: bool = True, input_counted: bool = False) -> None:
    """A norm over `width` features per token (bytes per token).

    residual: its input is the residual stream (r bytes, AMP's fp32), not a compute-dtype tensor.
    compiled: under torch.compile an RMSNorm keeps its input and rstd; backward recomputes the rest.
    input_counted: another LayerNorm already keeps the same input tensor (a parallel block's second norm).
    """
    if not input_needed:
        return
    p = spec.r if residual else spec.p
    if spec.arch.norm == "layernorm":
        if not input_counted:
            saved.add(f"{name}.input", p * width)  # F.layer_norm keeps its input, mean and rstd for any grad
        saved.add(f"{name}.stats", 8)
        return
    if compiled:
        saved.add(f"{name}.input", p * width)  # the layer's input, or the post-attention residual's addend
        saved.add(f"{name}.rsqrt", 4)
        return
    saved.add(f"{name}.fp32_input", 4 * width)  # x.to(float32) (x itself when p == 4) for pow and mul
    saved.add(f"{name}.rsqrt", 4)
    if spec.trained.weight("norm"):
        if spec.traits.fp32_norm:
            saved.add(f"{name}.normalized", 4 * width)  # Gemma multiplies by (1 + w) in fp32
        else:
            saved.add(f"{name}.normalized", p * width)  # weight * x.to(input_dtype) keeps x for dw
