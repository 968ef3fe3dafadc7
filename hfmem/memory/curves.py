"""Memory against sequence length and against micro-batch, per method: the estimate evaluated at a few points.

Public API (pure, no torch):

    memory_curves(arch, inventory, settings, methods, per_method=None) -> {
        "seq_len": {"micro_batch_size": b, "points": [128, 192, 256, ...], "required_bytes": {method: [...]}},
        "micro_batch_size": {"seq_len": s, "points": [1, 2, 3, 4, 6, ...], "required_bytes": {method: [...]}}}

Each value is what must stay resident per GPU (`MemoryBreakdown.required`, the figure the fit search compares
with a GPU's usable memory) for the setup a fit cell judges (`fit.asked_settings`, a method's own settings from
`per_method` as fit_matrix takes them), so each curve passes through that method's cells' `asked.required_bytes`
at the set length and batch, and crosses a GPU's usable memory where `max_seq_len` / `max_micro_batch_size` end.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from hfmem.memory.estimate import Context, estimate_in
from hfmem.memory.fit import MAX_SEQ, asked_settings
from hfmem.memory.settings import TrainingSettings
from hfmem.model.architecture import Architecture
from hfmem.model.inventory import Inventory

SHORTEST_SEQ = 128
"""The first point of the sequence-length curve."""
LONGEST_UNCAPPED_SEQ = 1 << 17
"""Where the sequence-length curve stops for a model that states no maximum length."""
LARGEST_MICRO_BATCH = 64
"""The last point of the micro-batch curve."""


def doublings(first: int, last: int, *extra: int) -> list[int]:
    """first, 2·first, 4·first ..., each even one followed by 1.5 times it, up to last, with `last` and each of
    `extra` (within range) added, sorted: evenly spaced on the charts' logarithmic axes."""
    points = {last, *(x for x in extra if first <= x <= last)}
    value = first
    while value < last:
        points.add(value)
        if value % 2 == 0 and value * 3 // 2 < last:
            points.add(value * 3 // 2)
        value *= 2
    return sorted(points)


def memory_curves(arch: Architecture, inventory: Inventory, settings: TrainingSettings,
                  methods: tuple[str, ...] | list[str],
                  per_method: Mapping[str, TrainingSettings] | None = None) -> dict[str, Any]:
    """Required bytes per method at doubling sequence lengths (at the set micro-batch) and doubling micro-batches
    (at the set sequence length); both point lists include the set value."""
    ctx = Context(arch, inventory)
    base = settings.validated()
    seq = base.resolved_seq_len(arch.max_position_embeddings)
    longest = max(min(arch.max_position_embeddings or LONGEST_UNCAPPED_SEQ, MAX_SEQ), seq)
    seq_points = doublings(min(SHORTEST_SEQ, longest), longest, seq)
    batch_points = doublings(1, max(LARGEST_MICRO_BATCH, base.micro_batch_size), base.micro_batch_size)
    own = per_method or {}

    def required(s: TrainingSettings) -> int:
        """What must stay resident per GPU for the settings: the public estimate's own figure."""
        return estimate_in(ctx, s).per_gpu_bytes.required

    by_seq: dict[str, list[int]] = {}
    by_batch: dict[str, list[int]] = {}
    for method in methods:
        asked = asked_settings(own.get(method, base), method)
        by_seq[method] = [required(replace(asked, seq_len=s)) for s in seq_points]
        by_batch[method] = [required(replace(asked, micro_batch_size=b, seq_len=seq)) for b in batch_points]
    return {"seq_len": {"micro_batch_size": base.micro_batch_size, "points": seq_points, "required_bytes": by_seq},
            "micro_batch_size": {"seq_len": seq, "points": batch_points, "required_bytes": by_batch}}
