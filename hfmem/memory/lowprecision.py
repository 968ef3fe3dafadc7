"""The low-precision training recipes (FP8, MXFP8, NVFP4): what each keeps in memory beyond bf16 mixed precision.

Every recipe keeps the bf16 weights and gradients and the fp32 master weights and optimizer states of bf16 mixed
precision; on top of them, per decoder linear layer (the output head stays bf16: Megatron's output_layer is no TE
module, torchtitan's float8 converter skips `output`):

- quantized weight copies, alive from the forward through the backward: TransformerEngine quantizes each weight
  with rowwise and, when grad is enabled, columnwise usage (transformer_engine/pytorch/module/linear.py at
  d0067d0, lines 466-490: `columnwise_usage = is_grad_enabled and inp.requires_grad`), and caches it in
  `_fp8_workspaces` across micro-batches when `is_first_microbatch` is given (line 1958). On Hopper the columnwise
  copy of an FP8 tensor is its transpose (csrc/quantizer.cpp lines 361-375: `with_transpose = columnwise_usage &&
  !is_non_tn_fp8_gemm_supported`); MXFP8 and NVFP4 quantize both directions from the bf16 weight with their own
  block scales (common/recipe/__init__.py, MXFP8BlockScaling and NVFP4BlockScaling docstrings). Each layer saves
  its copy for the backward, except under FSDP2 (module/base.py `is_fsdp2`, detected from the module), which saves
  none and quantizes again from the all-gathered weight in backward (linear.py lines 640-645): there two layers'
  copies are alive at a time, as FSDP's two gathered layers. FSDP1 scatters the saved copy only when TE is given
  the FSDP group (distributed.py `_fsdp_scatter_tensors`), and DeepSpeed ZeRO-3 has no TE handling: whole copies.
  torchao's Float8Linear casts on the fly and saves the bf16 weight (torchao/float8/float8_linear.py at 36027d8,
  line 45: `ctx.save_for_backward(input_hp, weight_hp_t)`), so it keeps no copy;
- each linear's input saved for the weight gradient, quantized: TE quantizes the input with columnwise usage and
  keeps only that (linear.py lines 416-436 and 603-617: "Discard row-wise data since it is not needed in backward
  pass"), the routed experts' inputs too; an input a bf16 op also reads (the MoE router's, the attention kernel's
  output before o_proj) stays bf16 beside the quantized copy; torchao saves the bf16 input (float8_linear.py
  line 45), so its activations are bf16 mixed precision's;
- delayed scaling's amax history and scales: per GEMM 3 forward quantizers (input, weight, output) and 2 backward
  (grad output, grad input) (module/base.py lines 1137-1139), each with `amax_history_len` fp32 amaxes and one
  fp32 scale (quantization.py lines 1436-1442); DelayedScaling's `amax_history_len` defaults to 1024
  (common/recipe/__init__.py line 255).

Which chips run them: FP8 needs compute capability 8.9 or later, MXFP8 and NVFP4 10.0 or later (TE's
quantization.py lines 149-176). Pure data and arithmetic; no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TE = "https://github.com/NVIDIA/TransformerEngine/blob/d0067d0da6cb01811b8072a7d304f0e00344ce2b/"
TORCHAO = "https://github.com/pytorch/ao/blob/36027d82d1ad9949597ea16002ff4940374b1b94/"
TE_QUANTIZERS_PER_GEMM = 5
"""Forward input, weight and output, backward grad output and grad input (TE module/base.py lines 1137-1139)."""
Hardware = Literal["fp8", "mxfp8", "fp4"]


@dataclass(frozen=True)
class Recipe:
    """One low-precision recipe: the tensor-core dtype of its matmuls and the bytes it keeps per element."""

    name: str
    label: str
    matmul: Literal["fp8", "fp4"]
    """The dense peak its GEMMs run at (hardware/specs.py `fp8_tflops`, `fp4_tflops`)."""
    needs: Hardware
    """What the chip must run: fp8 (Ada, Hopper, Blackwell, CDNA3), mxfp8 or fp4 (Blackwell)."""
    weight_copy_bytes: float
    """Bytes per weight element of the quantized copies kept from the forward through the backward."""
    input_bytes: float | None
    """Bytes per element of a linear input saved for backward; None: the compute dtype (saved unquantized)."""
    delayed_scaling: bool
    """Keeps an amax history per quantizer (TE DelayedScaling)."""
    source: str


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("fp8-te", "FP8 (TransformerEngine delayed scaling)", "fp8", "fp8", 2.0, 1.0, True,
           TE + "transformer_engine/common/recipe/__init__.py#L173-L255"),
    Recipe("fp8-te-current", "FP8 (TransformerEngine current scaling)", "fp8", "fp8", 2.0, 1.0, False,
           TE + "transformer_engine/common/recipe/__init__.py#L286-L303"),
    Recipe("fp8-torchao", "FP8 (torchao float8, tensorwise)", "fp8", "fp8", 0.0, None, False,
           TORCHAO + "torchao/float8/config.py#L141-L176"),
    Recipe("fp8-torchao-rowwise", "FP8 (torchao float8, rowwise)", "fp8", "fp8", 0.0, None, False,
           TORCHAO + "torchao/float8/config.py#L141-L176"),
    # E4M3 data and one E8M0 scale per 32 elements, in both directions (MXFP8BlockScaling)
    Recipe("mxfp8", "MXFP8 (TransformerEngine, Blackwell)", "fp8", "mxfp8", 2 * (1 + 1 / 32), 1 + 1 / 32, False,
           TE + "transformer_engine/common/recipe/__init__.py#L337-L369"),
    # E2M1 data; weights one E4M3 scale per 16x16 block, inputs one per 16 elements (NVFP4BlockScaling)
    Recipe("nvfp4", "NVFP4 (TransformerEngine, Blackwell)", "fp4", "fp4", 2 * (0.5 + 1 / 256), 0.5 + 1 / 16, False,
           TE + "transformer_engine/common/recipe/__init__.py#L489-L569"),
)}
"""The recipes by dtype name (the `--dtype` values beyond bf16/fp16/fp32)."""


def recipe(dtype: str) -> Recipe | None:
    """The low-precision recipe a dtype name stands for; None for bf16/fp16/fp32 and their autocast forms."""
    return RECIPES.get(dtype)


def weight_copies(r: Recipe, linear_parameters: int) -> float:
    """Bytes of the quantized weight copies of `linear_parameters` decoder-linear weights."""
    return r.weight_copy_bytes * linear_parameters


def scaling_state(r: Recipe, gemms: int, amax_history_len: int) -> float:
    """Bytes of delayed scaling's amax histories and scales for `gemms` GEMMs (0 for the other recipes, whose scales
    travel with each quantized tensor and are in its bytes per element)."""
    if not r.delayed_scaling:
        return 0.0
    return TE_QUANTIZERS_PER_GEMM * gemms * (amax_history_len + 1) * 4
