"""What each chip generation can run: bf16 and fp8 matmuls and the attention kernels training code picks.

Per generation, not per card, because the kernels and dtypes follow the architecture. Sources:
- bf16 needs compute capability 8.0 (Ampere) or later on NVIDIA: CUDA's "bfloat16 ... requires sm_80"
  (https://docs.nvidia.com/cuda/cuda-math-api/cuda_math_api/group__CUDA__MATH__INTRINSIC__BFLOAT16.html), and
  torch.cuda.is_bf16_supported() is False on Volta and Turing.
- fp8 (E4M3/E5M2) tensor cores: Ada (sm_89), Hopper and Blackwell (NVIDIA Transformer Engine's
  "FP8 ... on Hopper, Ada and Blackwell"); CDNA3 (MI300X, AMD's datasheet states FP8); not Ascend 910B.
- MXFP8 and NVFP4 training: compute capability 10.0 or later (TransformerEngine transformer_engine/pytorch/
  quantization.py at d0067d0, lines 162-176: "Device compute capability 10.0 or higher required for MXFP8
  execution", the same for NVFP4): Blackwell. TE refuses MXFP8 on 12.0 (GeForce Blackwell), which shares the
  catalogue's "blackwell" generation: its row is answered as asked.
- FlashAttention-2: "Ampere, Ada, or Hopper GPUs (e.g., A100, RTX 3090, RTX 4090, H100). Support for Turing GPUs
  (T4, RTX 2080) is coming soon" and, on ROCm, "MI200 or MI300" (https://github.com/Dao-AILab/flash-attention,
  README, Installation and features). FlashAttention-3: Hopper (same README). Blackwell is not in that list, so
  Blackwell rows use SDPA (its flash and cuDNN backends run there).
- SDPA's fused backends: flash needs sm_80+, the memory-efficient one sm_50+ (torch's checks in
  aten/src/ATen/native/transformers/cuda/sdp_utils.cpp), so
  Volta and Turing run SDPA's memory-efficient kernel, which like flash keeps no attention matrix.
- Ascend 910B: transformers routes attn_implementation="flash_attention_2" to torch_npu's npu_fusion_attention
  (transformers/integrations/npu_flash_attention.py), a fused kernel that keeps no attention matrix either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hfmem.hardware.gpus import Gpu


@dataclass(frozen=True)
class Capabilities:
    """What one chip generation runs; None (unknown chip, a user-defined GPU): assume it runs what is asked."""

    arch: str | None
    bf16: bool = True
    fp8: bool = False
    mxfp8: bool = False
    """MXFP8 block-scaled matmuls (Blackwell)."""
    fp4: bool = False
    """NVFP4 matmuls (Blackwell)."""
    flash_attention: tuple[str, ...] = ()
    """FlashAttention generations available ("fa2", "fa3")."""
    sdpa: Literal["flash", "efficient"] = "flash"
    """The fused SDPA backend training gets: "flash" or "efficient" (memory-efficient)."""
    kernels: str = ""
    """Where the attention kernels come from, for non-NVIDIA chips."""
    label: str = ""
    """The attention kernel in a word or two where it is not NVIDIA's FlashAttention build."""

    @property
    def flash_attention_2(self) -> bool:
        return "fa2" in self.flash_attention

    def to_dict(self) -> dict[str, object]:
        return {"arch": self.arch, "bf16": self.bf16, "fp8": self.fp8, "mxfp8": self.mxfp8, "fp4": self.fp4,
                "flash_attention": list(self.flash_attention),
                "sdpa": self.sdpa, "kernels": self.kernels or None}

    @property
    def runs(self) -> str:
        """One line of what it trains with, e.g. "bf16 fp8 FA2 FA3" or "fp16 SDPA-mem" (SDPA's
        memory-efficient kernel)."""
        sdpa = {"efficient": "SDPA-mem", "flash": "SDPA"}[self.sdpa]
        kernels = [self.label] if self.label else [k.upper() for k in self.flash_attention] or [sdpa]
        return " ".join(["bf16" if self.bf16 else "fp16", *(["fp8"] if self.fp8 else []),
                         *(["fp4"] if self.fp4 else []), *kernels])


ARCHS: dict[str | None, Capabilities] = {c.arch: c for c in (
    Capabilities("volta", bf16=False, sdpa="efficient"),
    Capabilities("turing", bf16=False, sdpa="efficient"),
    Capabilities("ampere", flash_attention=("fa2",)),
    Capabilities("ada", fp8=True, flash_attention=("fa2",)),
    Capabilities("hopper", fp8=True, flash_attention=("fa2", "fa3")),
    Capabilities("blackwell", fp8=True, mxfp8=True, fp4=True),
    Capabilities("cdna3", fp8=True, flash_attention=("fa2",),
                 kernels="ROCm: FlashAttention-2's composable_kernel build", label="FA2 (ROCm)"),
    Capabilities("davinci", flash_attention=("fa2",),
                 kernels="CANN: torch_npu's npu_fusion_attention stands in for FlashAttention-2",
                 label="NPU-FA"),
)}
"""Capabilities by the `arch` of gpus.json."""

UNKNOWN = Capabilities(None, flash_attention=("fa2",))
"""A chip hfmem knows nothing about (user-defined name=GiB): the settings stand as asked."""


def runs_matmuls(caps: Capabilities, needs: str) -> bool:
    """Whether a chip runs a low-precision recipe's matmuls: "fp8", "mxfp8" or "fp4"."""
    return {"fp8": caps.fp8, "mxfp8": caps.mxfp8, "fp4": caps.fp4}[needs]


def capabilities(gpu: Gpu) -> Capabilities:
    """What `gpu` runs, from its generation (UNKNOWN for a user-defined GPU)."""
    return ARCHS.get(gpu.arch or "", UNKNOWN)
