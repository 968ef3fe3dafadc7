"""hfmem against real training steps measured on a GPU (fixtures/gpu_measured.json, recorded by
bench/gpu_measure.py --measure): torch.cuda.max_memory_allocated over steps 2-3 of transformers/PEFT/bitsandbytes
runs, each row scored through the hfmem command line with the flags that state its settings."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import gpu_measure

FIXTURE = ROOT / "fixtures" / "gpu_measured.json"
GIB = 1 << 30
KNOWN_UNDER = {
    "Llama-2-7b-hf lora bf16-pure b1 s1024 r8:q+v int8":
        "bitsandbytes' MatMul8bitLt keeps more per layer on its ctx than the inputs hfmem counts (about 20 KB per "
        "token and layer here, 0.64 GiB in all); what it is has not been traced",
}
"""Rows hfmem still under-predicts by more than 5%, with what is known of why."""


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(FIXTURE.read_text())


@pytest.fixture(scope="module")
def predicted(recorded) -> dict[str, dict[str, float]]:
    """hfmem's figures for each measured row, asked through the CLI."""
    return {row["case"]: gpu_measure.predict(row, "h200") for row in recorded["rows"]}


@pytest.fixture(scope="module")
def errors(recorded, predicted) -> dict[str, float]:
    """Each row's relative error of hfmem's training-step peak allocated bytes."""
    return {row["case"]: predicted[row["case"]]["peak"] / row["bytes"]["peak"] - 1 for row in recorded["rows"]}


def test_the_fixture_says_what_measured_it(recorded) -> None:
    assert recorded["device"] == "NVIDIA H200"
    assert {"torch", "transformers", "peft", "bitsandbytes", "cuda"} <= recorded["versions"].keys()
    assert all("error" not in r and "skipped" not in r for r in recorded["rows"])
    names = {case.name for case in gpu_measure.CASES}
    assert [r["case"] for r in recorded["rows"]] == [c.name for c in gpu_measure.CASES if c.name in names]
    for row in recorded["rows"]:
        assert row["settings"] == json.loads(json.dumps(next(c for c in gpu_measure.CASES
                                                             if c.name == row["case"]).settings()))


def test_every_row_is_within_5_percent(errors) -> None:
    off = {case: f"{e:+.1%}" for case, e in errors.items() if abs(e) > 0.05 and case not in KNOWN_UNDER}
    assert not off
    assert len(errors) == 33


def test_every_evaluation_phase_is_within_5_percent(recorded, predicted) -> None:
    """The no-grad evaluation forward at eval_batch_size, measured after the training steps with the optimizer
    states alive; in five rows it needs more than the training step (the fit then takes it)."""
    evaluated = [r for r in recorded["rows"] if r["settings"].get("eval_batch_size")]
    assert len(evaluated) == 10
    off = {r["case"]: predicted[r["case"]]["eval_peak"] / r["bytes"]["eval_peak"] - 1 for r in evaluated}
    assert all(abs(e) <= 0.05 for e in off.values()), off
    larger = [r["case"] for r in evaluated if r["bytes"]["eval_peak"] > r["bytes"]["peak"]]
    assert len(larger) == 5 and all(predicted[c]["eval_peak"] > predicted[c]["peak"] for c in larger)


def test_known_misses_are_still_misses(errors) -> None:
    """A known miss that closes must leave KNOWN_UNDER (and docs/accuracy.md)."""
    for case in KNOWN_UNDER:
        assert -0.10 < errors[case] < -0.05, (case, errors[case])


def test_kbit_upcast_is_what_closes_the_prepared_qlora_rows(recorded) -> None:
    """Without --kbit-upcast the rows that ran prepare_model_for_kbit_training are under by more than 10%."""
    prepared = [r for r in recorded["rows"] if r["kbit_preparation"]]
    assert len(prepared) == 2
    for row in prepared:
        without = dict(row, settings=dict(row["settings"], kbit_upcast=False))
        assert gpu_measure.predict(without, "h200")["peak"] / row["bytes"]["peak"] - 1 < -0.10
