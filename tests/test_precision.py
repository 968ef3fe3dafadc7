"""The precision table: every dtype's record is what the estimate's bytes, notes and summaries read."""

from __future__ import annotations

import pytest

from tiny_models import reference_model

from hfmem.constants import DEFAULT_SEQ_LEN
from hfmem.github.action import Inputs, settings_line
from hfmem.memory.estimate import estimate, rule_of_thumb
from hfmem.memory.precision import PRECISIONS, precision
from hfmem.memory.settings import DTYPES, TrainingSettings

LLAMA = reference_model("meta-llama/Llama-2-7b-hf")
N = LLAMA[1].total


def test_every_dtype_has_one_record_under_its_name() -> None:
    assert set(DTYPES) == set(PRECISIONS)
    for name, record in PRECISIONS.items():
        assert record.name == name and precision(name) is record


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_full_fine_tune_holds_weights_and_gradients_at_the_records_bytes(dtype: str) -> None:
    est = estimate(*LLAMA, TrainingSettings(dtype=dtype, optimizer="sgd"))
    p, b = precision(dtype), est.per_gpu_bytes
    assert b.weights == p.weight_bytes * N and b.gradients == p.gradient_bytes * N
    assert b.master_weights == (4 * N if p.master_copy else 0)
    assert (b.autocast_weight_copies > 0) == p.weight_copies
    assert est.assumptions["compute_bytes"] == p.compute_bytes


def test_only_autocast_over_fp32_weights_copies_them() -> None:
    assert {name for name, p in PRECISIONS.items() if p.weight_copies} == {"amp-bf16", "amp-fp16"}
    assert {name for name, p in PRECISIONS.items() if p.residual_bytes > p.compute_bytes} == {"amp-bf16", "amp-fp16"}


@pytest.mark.parametrize("dtype", ["bf16", "amp-bf16", "fp32"])
def test_rule_of_thumb_counts_the_frozen_base_as_stored(dtype: str) -> None:
    """The seed-rule comparison counts LoRA's frozen base at the stored weight bytes (4 under AMP, not 2)."""
    est = estimate(*LLAMA, TrainingSettings(method="lora", dtype=dtype))
    b = est.per_gpu_bytes
    state = b.weights + b.gradients + b.optimizer
    assert rule_of_thumb(est)["model_state_gib"] == round(state / 2**30, 2)


def test_the_mixed_precision_note_follows_the_master_copy() -> None:
    noted = {d for d in DTYPES if any(n.startswith("mixed precision") for n in estimate(
        *LLAMA, TrainingSettings(dtype=d)).notes)}
    assert noted == {name for name, p in PRECISIONS.items() if p.master_copy}


def test_the_actions_settings_line_names_the_precision() -> None:
    inputs = Inputs(models=["a/b"], config_globs=[], gpus=["H100 80GB"], methods=["full"], seq_len=None,
                    batch_size=1, token="", hf_token="", fail_on=[])
    assert f" · {TrainingSettings().precision.label} · " in settings_line(inputs)
    assert f"sequence length {DEFAULT_SEQ_LEN:,} " in settings_line(inputs)
