"""What a training dtype means for memory: one record per `--dtype`, read wherever bytes depend on it.

bf16/fp16: mixed precision with 16-bit weights and gradients and fp32 master weights (ZeRO/DeepSpeed,
FSDP MixedPrecision), the forward under autocast; bf16-pure: bf16 weights, gradients and optimizer
states, no master copy (torchtune, LitGPT "bf16-true", a bf16-loaded model trained without a master
copy); fp32: everything in fp32; amp-bf16/amp-fp16: torch autocast over an fp32-loaded model (HF
Trainer --bf16/--fp16 on fp32 weights): fp32 weights, gradients and states, 16-bit copies of the
matmul weights kept for backward, an fp32 residual stream. The low-precision recipes (fp8-te, fp8-te-current,
fp8-torchao, fp8-torchao-rowwise, mxfp8, nvfp4) hold bf16 mixed precision's weights, gradients and states and add
what hfmem.memory.lowprecision says for a full fine-tune.
"""

from __future__ import annotations

from dataclasses import dataclass

from hfmem.memory.lowprecision import RECIPES, Recipe


@dataclass(frozen=True)
class Precision:
    """One training precision: the bytes of each kind of element it keeps, and the machinery around them."""

    name: str
    weight_bytes: int
    """A stored weight: trained in a full fine-tune, or frozen in the compute dtype (LoRA's base)."""
    gradient_bytes: int
    """A gradient of such a weight (PyTorch keeps param.grad in the parameter's dtype)."""
    compute_bytes: int
    """An activation element: the dtype the matmuls run in and save their tensors in."""
    residual_bytes: int
    """An element of the residual stream between layers (fp32 under autocast over fp32 weights)."""
    master_copy: bool
    """16-bit trained weights keep an fp32 master copy for the optimizer (ZeRO, FSDP MixedPrecision)."""
    autocast: bool
    """The forward runs under torch.autocast: each op casts its inputs (fp32 LoRA adapters get 16-bit inputs)."""
    label: str
    """The precision in words, for one-line summaries."""
    recipe: Recipe | None = None
    """The low-precision recipe its decoder linears run (FP8, MXFP8, NVFP4); None: the matmuls run in compute_bytes."""

    @property
    def weight_copies(self) -> bool:
        """Autocast over weights wider than the compute dtype keeps a 16-bit copy of each matmul weight for backward."""
        return self.autocast and self.weight_bytes > self.compute_bytes


PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    Precision("bf16", 2, 2, 2, 2, master_copy=True, autocast=True, label="bf16 mixed precision"),
    Precision("fp16", 2, 2, 2, 2, master_copy=True, autocast=True, label="fp16 mixed precision"),
    Precision("bf16-pure", 2, 2, 2, 2, master_copy=False, autocast=False, label="pure bf16"),
    Precision("fp32", 4, 4, 4, 4, master_copy=False, autocast=False, label="fp32"),
    Precision("amp-bf16", 4, 4, 2, 4, master_copy=False, autocast=True, label="bf16 autocast over fp32 weights"),
    Precision("amp-fp16", 4, 4, 2, 4, master_copy=False, autocast=True, label="fp16 autocast over fp32 weights"),
    *(Precision(r.name, 2, 2, 2, 2, master_copy=True, autocast=True, label=r.label, recipe=r)
      for r in RECIPES.values()),
)}

KBIT_UPCAST = Precision("kbit-upcast", 4, 4, 4, 4, master_copy=False, autocast=False,
                        label="fp32 outside the quantised matmuls (prepare_model_for_kbit_training)")
"""LoRA/QLoRA after PEFT's prepare_model_for_kbit_training (the kbit_upcast setting), whatever the dtype: the
unquantised weights, the residual stream and the activations are fp32."""


def precision(dtype: str) -> Precision:
    """The record of a validated dtype name (TrainingSettings.validated() normalises aliases first)."""
    return PRECISIONS[dtype]
