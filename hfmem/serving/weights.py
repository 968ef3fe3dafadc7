"""The weights an engine loads: as the checkpoint stores them (every tensor's dtype and shape from the safetensors
headers, so FP8, GPTQ/AWQ int4 with their scales and zeros, MXFP4 blocks and scales, bitsandbytes are exact), or
as --quantization says, each format's packed bytes, scales and zeros per linear weight. Split over tensor and
pipeline ranks."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hfmem.errors import InvalidInputError
from hfmem.hub.safetensors import Checkpoint
from hfmem.memory.quantization import GROUP_SIZE, BaseFormat
from hfmem.model.architecture import Architecture
from hfmem.model.inventory import Inventory
from hfmem.serving.kv import MODEL_DTYPE_BYTES

GGUF_BITS_PER_WEIGHT = {
    "f16": 16.0, "q8_0": 8.5, "q6_k": 6.5625, "q5_k": 5.5, "q5_0": 5.5, "q4_k": 4.5, "q4_0": 4.5, "q3_k": 3.4375,
    "q2_k": 2.625,
}
"""Bits per weight of GGUF's block types, from ggml's block structs (ggml-common.h): q8_0 32 int8 + an fp16 scale
(34 bytes / 32); q4_0 16 + 2 bytes / 32; the k-quants per 256-weight super-block (q6_k 210 bytes, q5_k 176,
q4_k 144, q3_k 110, q2_k 84). The mixed _S/_M/_L recipes pick among these per tensor; name the type they mostly use."""

QUANTIZATIONS = ("fp8", "int8", "awq", "gptq", "nf4", "mxfp4", "nvfp4", *GGUF_BITS_PER_WEIGHT)
_KEPT = {"embeddings", "head", "router", "norms"}
"""Components the GPU formats leave in the model's dtype (vLLM quantises the decoder's linear layers only)."""


@dataclass(frozen=True)
class Weights:
    """Weight bytes of the whole model and of one GPU, and where the figure came from."""

    total_bytes: int
    per_gpu_bytes: int
    source: str


def matrix_bytes(fmt: str, in_features: int, out_features: int) -> float:
    """Bytes of one (out, in) weight in `fmt`, every tensor of the format included."""
    i, o = in_features, out_features
    if fmt in GGUF_BITS_PER_WEIGHT:
        return i * o * GGUF_BITS_PER_WEIGHT[fmt] / 8
    if fmt == "fp8":
        return i * o + 4  # float8_e4m3 weight and one fp32 weight_scale per tensor (vLLM Fp8LinearMethod)
    if fmt == "mxfp4":
        return i * o / 2 + i * o / 32  # two E2M1 per byte, one E8M0 scale per 32 (OCP MX block)
    if fmt == "nvfp4":
        return i * o / 2 + i * o / 16 + 4  # E2M1, an FP8 E4M3 scale per 16, one fp32 global scale
    return BaseFormat(fmt, 8 if fmt == "int8" else 4, GROUP_SIZE).matrix_bytes(i, o)


def quantized_bytes(inventory: Inventory, fmt: str) -> int:
    """The model with its linear weights in `fmt` (GGUF: the embeddings and head too) and the rest in 16 bits."""
    if fmt not in QUANTIZATIONS:
        raise InvalidInputError(f"--quantization must be one of {', '.join(QUANTIZATIONS)}; got {fmt!r}.")
    p = 2  # GPU engines and llama.cpp keep what they do not quantise in 16 bits
    gguf = fmt in GGUF_BITS_PER_WEIGHT
    packed, replaced = 0.0, 0
    for g in inventory.linears:
        if g.component in _KEPT and not (gguf and g.component != "router"):
            continue
        bias = p * g.out_features if g.has_bias else 0
        packed += g.count * (matrix_bytes(fmt, g.in_features, g.out_features) + bias)
        replaced += g.parameters
    rest = inventory.total - replaced
    if gguf:
        embeddings = inventory.by_component.get("embeddings", 0)
        packed += embeddings * GGUF_BITS_PER_WEIGHT[fmt] / 8
        rest -= embeddings
    return round(packed + rest * p)


def weight_bytes(arch: Architecture, inventory: Inventory, checkpoint: Checkpoint | None, quantization: str | None,
                 dtype: str, tp: int = 1, pp: int = 1) -> Weights:
    """The weights as stored (the headers) or as `quantization` says, loaded in `dtype` where the checkpoint is
    float32 and the engine runs 16-bit, and the share of one of tp x pp GPUs."""
    if quantization:
        total, source = quantized_bytes(inventory, quantization), f"--quantization {quantization}"
    elif checkpoint is not None and checkpoint.tensors:
        dtypes = ", ".join(checkpoint.by_dtype())
        total, source = checkpoint.total_bytes, f"safetensors headers ({dtypes})"
        fp32 = sum(t.elements for t in checkpoint.tensors.values() if t.dtype == "F32")
        if arch.dtype == "float32" and dtype != "float32" and fp32:
            total -= fp32 * (4 - MODEL_DTYPE_BYTES[dtype])
            source += f", F32 tensors loaded as {dtype}"
    else:
        total = inventory.total * MODEL_DTYPE_BYTES.get(dtype, 2)
        source = f"{inventory.total:,} parameters x {dtype}"
    return Weights(total_bytes=total, per_gpu_bytes=-(-total // (tp * pp)), source=source)


MXFP4_MARLIN_ARCHS = frozenset({"ampere", "ada"})
"""Chips vLLM runs MXFP4 MoE experts on with its Marlin kernel: capability below 9.0 (get_mxfp4_backend: `...
or current_platform.get_device_capability()[0] < 9 ... return Mxfp4Backend.MARLIN`; Mxfp4Config.get_min_capability
80). Hopper and Blackwell take FlashInfer or Triton as the installation allows."""


def mxfp4_marlin_padding(arch: Architecture, config: dict[str, Any], tp: int = 1, pp: int = 1) -> int:
    """Bytes per GPU vLLM's Marlin backend adds to an MXFP4 checkpoint's experts: it allocates every expert with
    the intermediate size per rank rounded up to 128 and the hidden size to 256 (Mxfp4MoEMethod.create_weights:
    "The moe marlin kernel requires that for each linear n % 256 == 0 and k % 128 == 0"), 4-bit blocks with a
    UE8M0 scale per 32 and bf16 biases, against the checkpoint's own shapes."""
    quantization = config.get("quantization_config") or {}
    if quantization.get("quant_method") != "mxfp4" or not arch.num_experts:
        return 0
    inner, hidden = (arch.moe_intermediate_size or arch.intermediate_size) // tp, arch.hidden_size

    def expert(i: int, h: int) -> float:
        return 3 * i * h * (1 / 2 + 1 / 32) + (2 * i + h) * 2

    padded = expert(math.ceil(inner / 128) * 128, math.ceil(hidden / 256) * 256)
    layers = math.ceil((arch.num_layers - arch.num_dense_layers) / pp)
    return round(layers * arch.num_experts * (padded - expert(inner, hidden)))
