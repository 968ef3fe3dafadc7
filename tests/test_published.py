"""hfmem against published peak-memory measurements (fixtures/published_memory.json, via bench/published.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import published  # noqa: E402

TABLE = published.rows()
MEASURED = [r for r in TABLE if r.kind == "measured"]


def test_every_measured_entry_is_predicted() -> None:
    """No measured entry is skipped: unknown settings fall back to stated defaults, listed in the table."""
    assert MEASURED, "fixtures/published_memory.json has no measured entries"
    missing = [r.id for r in MEASURED if r.predicted_gib is None]
    assert not missing, f"no prediction for {missing}"
    for r in MEASURED:
        assert r.predicted_gib > 0 and (r.assumed or r.unmodelled or r.settings), r.id


@pytest.mark.xfail(strict=True, reason=(
    "median |error| is 14.1% over the 44 measured entries (bench/published.py; 11.5% over the 30 without a default "
    "setting or an unmodelled saver): many torchtune rows state no dtype/optimizer/checkpointing/loss. torch.compile "
    "of the decoder layers is modelled now (compile_layers), but every compiled row also runs full activation "
    "checkpointing, where compile only shrinks the one-layer recompute, below the loss's transient in all but one "
    "row; see the table. QLoRA rows on bitsandbytes stay under-predicted (LitGPT Llama-2-7B -25.1% after its "
    "bnb.nf4 fp32 absmax is counted, PEFT-docs 70B FSDP/ZeRO-3 -19..-43%, torchtune Llama-2-7B -23.5%). "
    "Remove this marker when the median falls below 10%."))
def test_median_absolute_error_below_10_percent() -> None:
    assert published.median_abs_error(TABLE) < 0.10, published.render(TABLE)


def test_median_absolute_error_does_not_regress() -> None:
    assert published.median_abs_error(TABLE) < 0.20, published.render(TABLE)


def test_entries_with_every_setting_stated_are_close() -> None:
    """Rows whose source states every memory-relevant setting (LitGPT, HF docs, ULT, PEFT guide): median within 15%."""
    stated = [abs(r.error) for r in MEASURED if r.error is not None and not any(
        "hfmem default" in a or "framework default" in a for a in r.assumed) and not r.unmodelled]
    assert len(stated) >= 15
    stated.sort()
    assert stated[len(stated) // 2] < 0.15
