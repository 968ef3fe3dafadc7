"""Quantized linear layers as the libraries lay them out, for CPU tests of a quantized LoRA base.

Each class allocates the tensors of its format with the shapes and dtypes the library's source gives, and
trains the way the library's training kernel does, in torch ops (the libraries' kernels need CUDA or are not
installed here):
- GptqTorchLinear: AutoGPTQ nn_modules/qlinear/qlinear_cuda_old.py QuantLinear.__init__ (qweight, qzeros,
  scales, g_idx); forward as GPTQModel nn_modules/qlinear/torch.py TorchLinear._forward_eager: dequantise the
  weight to the input's dtype, then torch.matmul(x, weights).
- AwqTorchLinear: AutoAWQ awq/modules/linear/gemm.py WQLinear_GEMM.__init__ (qweight, qzeros, scales);
  forward as GPTQModel nn_modules/qlinear/torch_awq.py AwqTorchLinear.forward (dequantize_gemm, then matmul).
- Int8Linear: bitsandbytes nn/modules.py Int8Params (CB int8 (out, in), SCB fp32 (out,)); forward through
  _MatMul8bit, which keeps what bitsandbytes/autograd/_functions.py MatMul8bitLt.forward keeps
  (ctx.tensors = (CAt, subA, A) when an input needs a gradient; CAt is None for a frozen weight, subA None
  without outliers) and dequantises CB in backward as MatMul8bitLt.backward does.
PEFT wraps them with its own LoRA layers for these formats (GPTQLoraLinear, AwqLoraLinear) through
LoraConfig._register_custom_module.
"""

from __future__ import annotations

import math

import torch


class _Quantized(torch.nn.Module):
    """A frozen linear whose weight lives in buffers of its format; in_features / out_features for PEFT."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        if linear.bias is not None:
            self.register_buffer("bias", linear.bias.detach().clone())
        else:
            self.bias = None

    def _with_bias(self, out: torch.Tensor) -> torch.Tensor:
        return out if self.bias is None else out + self.bias


class GptqTorchLinear(_Quantized):
    """GPTQ 4-bit, group 128: packed int32 weights and zeros, fp16 scales, int32 g_idx."""

    bits, group_size = 4, 128

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__(linear)
        i, o, bits = self.in_features, self.out_features, self.bits
        groups = math.ceil(i / self.group_size)
        self.register_buffer("qweight", torch.randint(-2**31, 2**31 - 1, (i // 32 * bits, o), dtype=torch.int32))
        self.register_buffer("qzeros", torch.randint(-2**31, 2**31 - 1, (groups, o // 32 * bits), dtype=torch.int32))
        self.register_buffer("scales", torch.rand(groups, o, dtype=torch.float16) / 64)
        self.register_buffer("g_idx", torch.tensor([k // self.group_size for k in range(i)], dtype=torch.int32))

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        per_int = 32 // self.bits
        shifts = torch.arange(0, 32, self.bits, dtype=torch.int32)
        weight = (self.qweight.unsqueeze(1) >> shifts.view(1, -1, 1)) & (2**self.bits - 1)
        weight = weight.reshape(-1, self.out_features)
        zeros = (self.qzeros.unsqueeze(2) >> shifts.view(1, 1, -1)) & (2**self.bits - 1)
        zeros = zeros.reshape(self.qzeros.shape[0], self.qzeros.shape[1] * per_int)
        g = self.g_idx.long()
        return (self.scales[g] * (weight - zeros[g]).to(torch.float16)).to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape[:-1] + (self.out_features,)
        out = torch.matmul(x.reshape(-1, x.shape[-1]), self.dequantize(x.dtype)).reshape(shape)
        return self._with_bias(out)


class AwqTorchLinear(_Quantized):
    """AWQ 4-bit, group 128 (GEMM layout): packed int32 weights and zeros, fp16 scales."""

    bits, group_size = 4, 128

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__(linear)
        i, o, per_int = self.in_features, self.out_features, 32 // self.bits
        self.register_buffer("qweight", torch.randint(-2**31, 2**31 - 1, (i, o // per_int), dtype=torch.int32))
        self.register_buffer("qzeros", torch.randint(-2**31, 2**31 - 1, (i // self.group_size, o // per_int),
                                                     dtype=torch.int32))
        self.register_buffer("scales", torch.rand(i // self.group_size, o, dtype=torch.float16) / 64)

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        shifts = torch.arange(0, 32, self.bits, dtype=torch.int32)
        weight = ((self.qweight.unsqueeze(-1) >> shifts) & (2**self.bits - 1)).reshape(self.in_features, -1)
        zeros = ((self.qzeros.unsqueeze(-1) >> shifts) & (2**self.bits - 1)).reshape(self.qzeros.shape[0], -1)
        scales = self.scales.repeat_interleave(self.group_size, dim=0)
        zeros = zeros.repeat_interleave(self.group_size, dim=0)
        return ((weight - zeros).to(torch.float16) * scales).to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape[:-1] + (self.out_features,)
        out = torch.matmul(x.reshape(-1, x.shape[-1]), self.dequantize(x.dtype)).reshape(shape)
        return self._with_bias(out)


class _MatMul8bit(torch.autograd.Function):
    """What MatMul8bitLt keeps: the input as a ctx attribute (not save_for_backward), CB and SCB on its state."""

    keeps = True
    """False: the same matmul without the ctx attribute, to see what the attribute alone keeps alive."""

    @staticmethod
    def forward(ctx, a, cb, scb):
        ctx.cb, ctx.scb = cb, scb
        if ctx.needs_input_grad[0] and _MatMul8bit.keeps:
            ctx.tensors = (None, None, a.reshape(-1, a.shape[-1]))
        return a @ (cb.to(a.dtype) * (scb.unsqueeze(1) / 127).to(a.dtype)).t()

    @staticmethod
    def backward(ctx, grad):
        weight = ctx.cb.to(grad.dtype, copy=True).mul_(ctx.scb.unsqueeze(1).mul(1.0 / 127.0).to(grad.dtype))
        return grad @ weight, None, None


class Int8Linear(_Quantized):
    """bitsandbytes LLM.int8: `weight` holds CB, int8 (out, in), as Int8Params' data does; SCB an fp32 scale per
    output row."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__(linear)
        weight = linear.weight.detach().float()
        scb = weight.abs().amax(dim=1)
        self.register_buffer("weight", torch.round(weight * 127 / scb.unsqueeze(1)).to(torch.int8))
        self.register_buffer("SCB", scb)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._with_bias(_MatMul8bit.apply(x, self.weight, self.SCB))


FORMATS = {"gptq": GptqTorchLinear, "awq": AwqTorchLinear, "int8": Int8Linear}


def quantize(model: torch.nn.Module, fmt: str) -> list[str]:
    """Replace every nn.Linear but the output head by the format's layer (as transformers' integrations leave
    lm_head in the compute dtype); the replaced leaf names."""
    head = model.get_output_embeddings()
    names = []
    for path, module in list(model.named_modules()):
        for leaf, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear) and child is not head:
                setattr(module, leaf, FORMATS[fmt](child))
                names.append(leaf)
    return sorted(set(names))


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the unique storages of every parameter and of the quantized layers' buffers."""
    tensors = list(model.parameters())
    tensors += [b for m in model.modules() if isinstance(m, _Quantized) for b in m.buffers()]
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())
