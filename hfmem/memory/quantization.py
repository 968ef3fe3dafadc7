"""A LoRA base's quantized weight formats: the bytes each stores per linear layer, from the tensors the format
defines, and what its training matmul keeps for backward.

Tensors per nn.Linear(in, out) weight, as the libraries allocate them:
- nf4: bitsandbytes' 4-bit blocks of 64 with an absmax each (QLoRA; NF4_BYTES_PER_PARAM below).
- int8: bitsandbytes LLM.int8 Int8Params keeps CB, int8 (out, in), and SCB, one fp32 scale per output row
  (bitsandbytes/nn/modules.py Int8Params._quantize; functional.int8_vectorwise_quant returns int8 data and
  float32 scales).
- gptq: qweight int32 (in // 32 * bits, out), qzeros int32 (groups, out // 32 * bits), scales fp16 (groups, out),
  g_idx int32 (in), groups = ceil(in / group_size) (AutoGPTQ nn_modules/qlinear/qlinear_cuda_old.py,
  QuantLinear.__init__'s register_buffer calls; GPTQModel's PackableQuantLinear allocates the same).
- awq: qweight int32 (in, out // (32 // bits)), qzeros int32 (in // group_size, out // (32 // bits)), scales fp16
  (in // group_size, out) (AutoAWQ awq/modules/linear/gemm.py, WQLinear_GEMM.__init__).
GPTQ and AWQ keep these as buffers, not parameters: the parameter count stays the model's own.
Pure arithmetic; no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hfmem.model.architecture import StoredQuantization

NF4_BYTES_PER_PARAM = 0.5 + 1 / 64 + 4 / (64 * 256)
"""QLoRA NF4 with block size 64 and double quantisation: 4 bits + an 8-bit absmax per 64 weights +
an fp32 second-level constant per 256 blocks = 4.127 bits (Dettmers et al. 2023: 0.127 bits/param)."""
NF4_NO_DOUBLE_QUANT_BYTES = 0.5 + 4 / 64
"""NF4 without double quantisation: bitsandbytes.functional.quantize_4bit(compress_statistics=False) keeps
the absmax of each 64-weight block as an fp32 tensor (4 bits + 32/64 bits = 4.5 bits/param)."""
GROUP_SIZE = 128
"""GPTQ and AWQ's usual group of input rows sharing a scale and a zero, where the model's config does not say."""
_INT32 = 4
_FP16 = 2


@dataclass(frozen=True)
class BaseFormat:
    """One frozen base's weight format, its bits and group size, and how its training matmul runs."""

    name: str
    """"nf4", "int8", "gptq" or "awq"."""
    bits: int
    group_size: int = GROUP_SIZE
    """GPTQ/AWQ: input rows per scale and zero; 0: one group over the whole input."""
    double_quant: bool = True
    """NF4: the absmax in 8 bits (double quantisation) or in fp32."""

    def matrix_bytes(self, in_features: int, out_features: int) -> float:
        """Bytes of one quantized (out, in) weight, every tensor of the format included."""
        i, o = in_features, out_features
        if self.name == "nf4":
            return i * o * nf4_bytes(self.double_quant)
        if self.name == "int8":
            return i * o + 4 * o  # CB int8 and SCB, one fp32 per output row
        group = self.group_size or i
        if self.name == "gptq":
            groups = math.ceil(i / group)
            return (_INT32 * (i // 32 * self.bits) * o + _INT32 * groups * (o // 32 * self.bits)
                    + _FP16 * groups * o + _INT32 * i)
        packed = o // (32 // self.bits)  # awq
        return _INT32 * i * packed + _INT32 * (i // group) * packed + _FP16 * (i // group) * o

    @property
    def keeps_input(self) -> bool:
        """The matmul keeps the layer's input as an autograd ctx attribute although the weight is frozen:
        bitsandbytes' MatMul8bitLt sets ctx.tensors = (CAt, subA, A) whenever an input needs a gradient."""
        return self.name == "int8"

    @property
    def saves_dequantized_weight(self) -> bool:
        """The training kernel dequantises the weight and calls torch.matmul on it, so autograd saves the
        compute-dtype weight for the input's gradient (GPTQModel's TorchLinear._forward_eager and
        AwqTorchLinear.forward, the kernels transformers' GPTQ and AWQ integrations train with)."""
        return self.name in {"gptq", "awq"}

    @property
    def casts_adapter_input_under_autocast(self) -> bool:
        """PEFT's LoRA layer casts its input to the adapter dtype even under autocast (lora/gptq.py); its
        bitsandbytes and AWQ layers skip the cast when autocast is on (lora/bnb.py, lora/awq.py)."""
        return self.name == "gptq"

    def describe(self) -> str:
        """The format in words, for notes."""
        if self.name == "nf4":
            dq = "double quantisation" if self.double_quant else "fp32 absmax, no double quantisation"
            return f"NF4 (block 64, {dq})"
        if self.name == "int8":
            return "LLM.int8 (int8 weights, an fp32 scale per output row)"
        group = f"group {self.group_size}" if self.group_size else "one group per column"
        return f"{self.name.upper()} {self.bits}-bit ({group}, packed int32 weights and zeros, fp16 scales)"


def nf4_bytes(double_quant: bool) -> float:
    """Bytes per NF4 weight with or without double quantisation."""
    return NF4_BYTES_PER_PARAM if double_quant else NF4_NO_DOUBLE_QUANT_BYTES


def base_format(name: str | None, stored: StoredQuantization | None, double_quant: bool) -> BaseFormat | None:
    """The format `name` (None: no quantized base), with the checkpoint's own bits and group size when it is
    `stored` in that format."""
    if name is None:
        return None
    if stored is not None and stored.format == name:
        return BaseFormat(name, stored.bits, stored.group_size, double_quant)
    return BaseFormat(name, 8 if name == "int8" else 4, GROUP_SIZE, double_quant)
