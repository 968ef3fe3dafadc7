"""What single ops save for backward, and the dtype and attention-kernel rules every formula shares."""

from __future__ import annotations

from hfmem.memory.activations.families import FamilyTraits
from hfmem.memory.settings import ATTENTION
from hfmem.model.architecture import Architecture

FUSED_KERNELS = frozenset({"flash_attention_2", "sdpa"})
"""Kernels that keep no a·s² tensor (flash-attn, and SDPA's flash / memory-efficient kernels)."""


def mask_bytes(per_element: float | None, element_bytes: float) -> float:
    """Bytes per element of a dropout mask: CUDA's bool mask, or (None) the masked tensor's dtype as on CPU."""
    return element_bytes if per_element is None else per_element


def resolve_attention(arch: Architecture, traits: FamilyTraits, attention: str) -> str:
    """The kernel that actually runs: SDPA falls back to math where no fused kernel takes the shapes.

    flash-attn supports logit soft-capping natively, so soft-capping families keep flash_attention_2.
    """
    if attention not in ATTENTION:
        raise ValueError(f"unknown attention kernel {attention!r}")
    if attention == "sdpa" and traits.sdpa_broadcast_mqa and arch.num_key_value_heads == 1 < arch.num_attention_heads:
        return "sdpa_math"
    return attention


def kernel_notes(arch: Architecture, requested: str, kernel: str) -> list[str]:
    """The note saying why the kernel that runs is not the one requested (none when they agree)."""
    if kernel == requested:
        return []
    return [(f"attention: {arch.model_type} cannot use a fused SDPA kernel (broadcast multi-query K/V); "
             "SDPA falls back to its math path, which stores the attention matrix in fp32")]
