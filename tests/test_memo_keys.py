"""Memo keys come from the settings' metadata: a field that changes a part of the estimate is in that part's key."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from tiny_models import tiny_config

from hfmem.errors import InvalidInputError
from hfmem.memory.estimate import Context, activations_for, state_for, trainability
from hfmem.memory.fields import PARTS, Boolean, Choice, Group, Integer, Number, OrNone, key_fields, setting_of
from hfmem.memory.model_state import parameter_split
from hfmem.memory.settings import Overhead, TrainingSettings
from hfmem.model.architecture import read_architecture
from hfmem.model.meta import build_inventory

CONFIG = tiny_config("meta-llama/Meta-Llama-3-8B", 2)
ARCH, INVENTORY = read_architecture(CONFIG), build_inventory(CONFIG)
BASES = [TrainingSettings(method=m, num_gpus=2, sharding="zero3", seq_len=64) for m in ("full", "lora", "qlora")] + [
    TrainingSettings(num_gpus=2, sharding="zero3", seq_len=64, max_live_parameters=0, max_reuse_distance=5e5)]
"""The last: ZeRO-3 sizes under which the gathered parameters depend on recomputation (the model is tiny)."""


def alternatives(name: str) -> list:
    """Values a field can take, from its check (a few per kind)."""
    check = setting_of(next(f for f in fields(TrainingSettings) if f.name == name)).check
    inner = check.inner if isinstance(check, OrNone) else check
    values = [None] if isinstance(check, OrNone) else []
    if isinstance(inner, Choice):
        return values + list(inner.names)
    if isinstance(inner, Boolean):
        return [True, False]
    if isinstance(inner, Integer):
        return values + [1, 2, 7]
    if isinstance(inner, Number):
        return [0.0, 0.1]
    if isinstance(inner, Group):
        return [Overhead(), Overhead(cuda_context_gib=1.0, fragmentation=0.2)]
    if name == "modules_to_save":
        return [(), ("lm_head",), ("embed_tokens", "lm_head")]
    return [("all-linear",), ("q_proj",)]  # lora_targets


def parts(s: TrainingSettings) -> dict[str, object]:
    """Each memoised part computed afresh (no shared Context, so no memo can answer)."""
    ctx = Context(ARCH, INVENTORY)
    seq = s.resolved_seq_len(ARCH.max_position_embeddings)
    return {"split": parameter_split(ARCH, INVENTORY, s), "trainability": trainability(ctx, s),
            "state": state_for(ctx, s), "activations": activations_for(ctx, s, seq)}


def test_a_field_that_changes_a_part_is_in_its_key() -> None:
    changed_parts = dict.fromkeys(PARTS, 0)
    for base in BASES:
        before = parts(base.validated())
        for f in fields(TrainingSettings):
            for value in alternatives(f.name):
                try:
                    trial = replace(base, **{f.name: value}).validated()
                except InvalidInputError:
                    continue
                after = parts(trial)
                for part in PARTS:
                    if after[part] != before[part]:
                        changed_parts[part] += 1
                        assert f.name in key_fields(TrainingSettings, part), (
                            f"{f.name}={value!r} changes the {part} of a {base.method} estimate but is not in its key")
    assert all(changed_parts.values()), changed_parts  # every part was exercised


def test_keys_follow_the_parts_they_are_built_from() -> None:
    assert set(key_fields(TrainingSettings, "split")) <= set(key_fields(TrainingSettings, "state"))
    assert set(key_fields(TrainingSettings, "trainability")) <= set(key_fields(TrainingSettings, "activations"))
    assert "overhead" not in {n for part in PARTS for n in key_fields(TrainingSettings, part)}


def test_a_field_without_declared_parts_is_in_every_key() -> None:
    from dataclasses import dataclass

    from hfmem.memory.fields import setting

    @dataclass(frozen=True)
    class Sample:
        declared: int = setting(1, Integer(1), affects=("state",), panel="Training")
        undeclared: int = setting(1, Integer(1), panel="Training")

    assert [key_fields(Sample, part) for part in PARTS] == [("undeclared",), ("undeclared",),
                                                          ("declared", "undeclared"), ("undeclared",)]
    with pytest.raises(ValueError, match="unknown estimate parts"):
        setting(1, Integer(1), affects=("weights",), panel="Training")


def test_a_new_field_reaches_the_keys_and_the_assumptions() -> None:
    """A field declared once is validated, keyed and reported with no edit anywhere else."""
    from dataclasses import dataclass

    from hfmem.memory.estimate import estimate
    from hfmem.memory.fields import setting

    @dataclass(frozen=True)
    class Extended(TrainingSettings):
        example_knob: bool = setting(False, Boolean(), panel="Training")

    with pytest.raises(InvalidInputError, match="example_knob must be true or false"):
        Extended(example_knob="yes").validated()
    est = estimate(ARCH, INVENTORY, Extended(example_knob=True))
    assert est.assumptions["example_knob"] is True
    assert all("example_knob" in key_fields(Extended, part) for part in PARTS)


def test_every_field_is_in_the_assumptions() -> None:
    from hfmem.memory.estimate import _GROUPED, estimate

    a = estimate(ARCH, INVENTORY, TrainingSettings(method="qlora")).assumptions
    assert {f.name for f in fields(TrainingSettings)} - _GROUPED <= a.keys()
    grouped = {**a["lora"], **a["quantization"]}
    assert {"rank", "targets", "dropout", "adapter_dtype", "double_quant", "kernel", "lm_head_quantized",
            "previous_step_alive"} <= grouped.keys() and len(_GROUPED) == 8
