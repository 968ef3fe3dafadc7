"""What single ops save for backward, and the dtype and attention-kernel rules every formula shares."""

from __future__ import annotations

FUSED_KERNELS = frozenset({"flash_attention_2", "sdpa"})
"""Kernels that keep no a·s² tensor (flash-attn, and SDPA's flash / memory-efficient kernels)."""


def mask_bytes(per_element: float | None, element_bytes: float) -> float:
    """Bytes per element of a dropout mask: CUDA's bool mask, or (None) the masked tensor's dtype as on CPU."""
    return element_bytes if per_element is None else per_element
