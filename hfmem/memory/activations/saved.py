"""The named, per-token byte terms one layer (or the embedding, or the head) saves for backward."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Saved:
    """Accumulates named terms (bytes) of one layer, counting each storage once."""

    terms: dict[str, float] = field(default_factory=dict)
    s2_terms: set[str] = field(default_factory=set)
    """The terms that grow with the sequence length per token (the a·s² attention matrices)."""

    def add(self, name: str, nbytes: float, *, s2: bool = False) -> None:
        """Add `nbytes` to the term `name` (nothing for an empty term); `s2`: it is an attention-matrix term."""
        if nbytes <= 0:
            return
        self.terms[name] = self.terms.get(name, 0.0) + nbytes
        if s2:
            self.s2_terms.add(name)

    @property
    def total(self) -> float:
        """All terms."""
        return sum(self.terms.values())

    @property
    def s2_total(self) -> float:
        """The a·s² terms: what selective checkpointing recomputes."""
        return sum(v for k, v in self.terms.items() if k in self.s2_terms)


def at_length(zero: Saved, one: Saved, s: int) -> Saved:
    """The terms at sequence length s from their values at 0 and 1: every per-token term is a + b·s."""
    out = Saved()
    for name in one.terms.keys() | zero.terms.keys():
        a0 = zero.terms.get(name, 0.0)
        out.terms[name] = a0 + (one.terms.get(name, 0.0) - a0) * s
    out.s2_terms = set(one.s2_terms)
    return out
