"""Byte units (the one definition of each), the number formatting the renderers share, and a token budget in hours
and money (the arithmetic the record writes and reads back)."""

from __future__ import annotations

from typing import Any

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


FIGURE_DIGITS = 4
"""Significant digits of a reported step time, throughput, utilisation, duration or cost: the same figure in every
output (a roofline is good to some percent, not to more digits; a cost is its GPU-hours times the price to 1e-3)."""


def figure(value: float) -> float:
    """A time, throughput or cost as reported: FIGURE_DIGITS significant digits."""
    return float(f"{value:.{FIGURE_DIGITS}g}")


def budget(tokens_per_s: float | None, num_gpus: int, tokens: float | None,
           usd_per_gpu_hour: float | None) -> dict[str, Any]:
    """Wall time for `tokens` training tokens at a throughput of `tokens_per_s` (all GPUs), and its cost at a price
    per GPU-hour; {} without a throughput or a budget."""
    if not tokens_per_s or tokens is None:
        return {}
    hours = tokens / tokens_per_s / 3600
    out: dict[str, Any] = {"tokens": tokens, "hours": figure(hours), "gpu_hours": figure(hours * num_gpus)}
    if usd_per_gpu_hour is not None:
        out |= {"usd_per_gpu_hour": usd_per_gpu_hour, "cost_usd": figure(hours * num_gpus * usd_per_gpu_hour)}
    return out
