"""What a Mamba-2 mixer layer saves, approximately (the scan's own state is not modelled)."""

from __future__ import annotations

from hfmem.memory.activations.norms import norm
from hfmem.memory.activations.saved import Saved
from hfmem.memory.activations.spec import ActivationSpec


def mamba(saved: Saved, spec: ActivationSpec) -> None:
    """A Mamba-2 mixer layer, approximately: norm, in_proj output, conv, gated output, out_proj input."""
    arch, p = spec.arch, spec.p
    h = arch.hidden_size
    inner = 2 * h
    norm(saved, "mixer_norm", spec, h, residual=True)
    saved.add("mixer.norm_out", p * h)
    saved.add("mixer.in_proj_out", p * (2 * inner + 2 * 128 + arch.num_attention_heads))
    saved.add("mixer.conv_out", p * (inner + 2 * 128))
    saved.add("mixer.scan_out", p * inner)
    saved.add("mixer.gated_norm", 4 * inner + p * inner)
    saved.add("mixer.out_proj_input", p * inner)
