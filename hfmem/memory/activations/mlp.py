"""What a (gated) MLP saves for backward: its projections' outputs and the activation function's tensors."""

from __future__ import annotations

from typing import NamedTuple

from hfmem.memory.activation_functions import activation_saves
from hfmem.memory.activations.saved import Saved
from hfmem.memory.activations.spec import ActivationSpec
from hfmem.memory.activations.structure import Module
from hfmem.memory.activations.trainability import Trainability


class _Mlp(NamedTuple):
    """One MLP's shape: what its activation saves, gating, a fused gate_up, whether the down projection
    keeps its input, and the bytes per token of one intermediate-width tensor."""

    saves: tuple[str, ...]
    gated: bool
    fused: bool
    out_needed: bool
    unit: float
    down_unit: float
    """Bytes per token of the down projection's saved input (quantized under a low-precision recipe)."""


def mlp(saved: Saved, prefix: str, spec: ActivationSpec, width: float, ins: tuple[Module, ...],
        outs: tuple[Module, ...], *, trained: Trainability, tokens_per_token: float = 1.0) -> None:
    """A (gated) MLP of `width` on the normed input; its input is accounted by the caller.

    tokens_per_token: copies of each token it sees (a MoE's top-k routed experts).
    """
    form = _Mlp(
        saves=activation_saves(spec.activation),
        gated=spec.arch.gated_mlp,
        fused=any(m.out_features == 2 * width for m in ins) or any("gate_up" in m.name for m in ins),
        out_needed=any(trained.needs_input(m.name) for m in outs),
        unit=spec.p * width * tokens_per_token,
        down_unit=(spec.p if spec.q is None else spec.q) * width * tokens_per_token,
    )
    if spec.compiled:
        _compiled(saved, prefix, form)
    else:
        _eager(saved, prefix, form)


def _compiled(saved: Saved, prefix: str, form: _Mlp) -> None:
    """torch.compile recomputes the activation in backward from its input (the gate or fc1 output): no
    temporaries, no activation output; the down projection's input is still kept."""
    saves, unit = form.saves, form.unit
    if form.gated and form.fused:
        saved.add(f"{prefix}.gate_up", 2 * unit)
    elif form.gated:
        saved.add(f"{prefix}.gate", unit)
        saved.add(f"{prefix}.up", unit)
    elif saves != ("out",) and saves:
        saved.add(f"{prefix}.fc_out", unit)  # the activation's input, for recomputing it
    if form.out_needed or (not form.gated and saves == ("out",)):
        saved.add(f"{prefix}.down_input", form.down_unit if form.out_needed else unit)


def _eager(saved: Saved, prefix: str, form: _Mlp) -> None:
    """The eager MLP: the projections' outputs the activation keeps, its temporaries, and its output."""
    saves, unit = form.saves, form.unit
    internal = sum(1 for x in saves if x == "t")
    if form.gated:
        if form.fused:
            saved.add(f"{prefix}.gate_up", 2 * unit)
        else:
            if "in" in saves:
                saved.add(f"{prefix}.gate", unit)
            saved.add(f"{prefix}.up", unit)
        saved.add(f"{prefix}.act_internal", internal * unit)
        saved.add(f"{prefix}.act_out", unit)  # the product act(g) * u keeps both factors
        if form.out_needed:
            saved.add(f"{prefix}.down_input", form.down_unit)
    else:
        if "in" in saves:
            saved.add(f"{prefix}.fc_out", unit)
        saved.add(f"{prefix}.act_internal", internal * unit)
        if "out" in saves or (form.out_needed and form.down_unit == unit):
            saved.add(f"{prefix}.act_out", unit)
        if form.out_needed and form.down_unit != unit:
            saved.add(f"{prefix}.down_input", form.down_unit)  # the down projection's quantized copy
