"""The one rule for "fastest" and "cheapest", shared by the fit matrix's cells, each GPU's layout search and the
report's overall picks, so no two surfaces can name different setups for the same question."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    """A timed setup as the picks compare it: its method, tokens/s (all GPUs), cost for the budget (None: no price
    or no budget), hours for the budget, whether its machine has the host RAM it needs, and its GPUs."""

    method: str
    tokens_per_s: float
    cost_usd: float | None = None
    hours: float | None = None
    host_ok: bool = True
    num_gpus: int = 1

    @property
    def per_gpu(self) -> float:
        """Tokens/s per GPU: what the floor compares, so a layout's size does not make a smaller one glacial."""
        return self.tokens_per_s / self.num_gpus


def fastest_and_cheapest(candidates: Sequence[Candidate], floor: float = 0.0) -> dict[str, int | None]:
    """The indices of the fastest candidate (most tokens/s) and the cheapest (lowest cost, the quicker at a tie)
    among those whose tokens/s per GPU is at least `floor` times the best per-GPU rate of their method (a glacial
    offload is no pick; a one-GPU run at full speed stays one beside a 1,024-GPU layout); neither untimed nor short
    of host RAM (None where none qualifies)."""
    usable = [i for i, c in enumerate(candidates) if c.tokens_per_s and c.host_ok]
    best: dict[str, float] = {}
    for i in usable:
        best[candidates[i].method] = max(best.get(candidates[i].method, 0.0), candidates[i].per_gpu)
    quick = [i for i in usable if candidates[i].per_gpu >= floor * best[candidates[i].method]]
    priced = [i for i in quick if candidates[i].cost_usd is not None]
    return {"fastest": max(quick, key=lambda i: candidates[i].tokens_per_s, default=None),
            "cheapest": min(priced, key=lambda i: (candidates[i].cost_usd, candidates[i].hours or 0.0),
                            default=None)}


def ranking(candidates: Sequence[Candidate], by: str) -> list[int]:
    """The indices of every timed candidate, best first by "cost" (priced ones only; the quicker at a tie), "time"
    (most tokens/s) or "gpus" (fewest, the faster at a tie)."""
    timed = [i for i, c in enumerate(candidates) if c.tokens_per_s]
    if by == "cost":
        return sorted((i for i in timed if candidates[i].cost_usd is not None),
                      key=lambda i: (candidates[i].cost_usd, candidates[i].hours or 0.0))
    if by == "time":
        return sorted(timed, key=lambda i: -candidates[i].tokens_per_s)
    return sorted(timed, key=lambda i: (candidates[i].num_gpus, -candidates[i].tokens_per_s))
