"""Byte units (the one definition of each) and the number formatting the renderers share."""

from __future__ import annotations

MIB = 1 << 20
GIB = 1 << 30
GB = 10**9
"""A decimal gigabyte, as GPU vendors state memory (an "80 GB" card)."""


def count(n: int | None) -> str:
    """68976648192 -> '68,976,648,192 (68.98B)'."""
    if n is None:
        return "-"
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if abs(n) >= scale:
            return f"{n:,} ({n / scale:.2f}{suffix})"
    return f"{n:,}"


def gib(n_bytes: float | None) -> str:
    """Bytes in GiB to one decimal, '-' for None (a figure that was not estimated)."""
    return "-" if n_bytes is None else f"{n_bytes / GIB:,.1f} GiB"


def size(n_bytes: float) -> str:
    """Bytes in GiB, or MiB below 1 GiB, so small per-layer terms do not read as zero."""
    return f"{n_bytes / MIB:,.1f} MiB" if abs(n_bytes) < GIB else gib(n_bytes)
