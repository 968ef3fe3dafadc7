"""GPU catalogue, name=GiB specs and training-settings validation."""

from __future__ import annotations

from dataclasses import fields

import pytest

from hfmem.errors import InvalidInputError
from hfmem.hardware.gpus import catalogue, catalogue_units, find_gpu, parse_gpu_spec, resolve_gpus
from hfmem.memory.fields import Choice, field_docs
from hfmem.memory.settings import Overhead, TrainingSettings, parse_lora_targets

REQUIRED = {"RTX 3090": 24, "RTX 4090": 24, "RTX 5090": 32, "L4": 24, "A10": 24, "L40S": 48, "A100 40GB": 40,
            "A100 80GB": 80, "H100 80GB": 80, "H800 80GB": 80, "H200 141GB": 141, "B200 180GB": 180,
            "MI300X 192GB": 192, "Ascend 910B 64GB": 64}


def test_catalogue_has_the_required_gpus_with_vendor_figures() -> None:
    names = {g.name: g for g in catalogue()}
    for name, vendor_gb in REQUIRED.items():
        gpu = names[name]
        assert gpu.vendor_memory == vendor_gb and gpu.vendor_unit == "GB"
        assert 0.9 * vendor_gb <= gpu.usable_gib <= vendor_gb  # usable is what the driver reports, never more
    assert names["H100 80GB"].usable_gib == pytest.approx(79.6, abs=0.1)
    assert "GiB" in catalogue_units()


def test_find_gpu_by_alias_and_errors() -> None:
    assert find_gpu("h100").name == "H100 80GB"
    assert find_gpu("A100-80GB").name == "A100 80GB"
    with pytest.raises(InvalidInputError, match="unknown GPU"):
        find_gpu("tpu-v5")


@pytest.mark.parametrize(("spec", "gib"), [("mygpu=40", 40.0), ("my card=24GiB", 24.0), ("x.1=80GB", 74.506)])
def test_parse_gpu_spec(spec: str, gib: float) -> None:
    gpu = parse_gpu_spec(spec)
    assert gpu.user_defined and gpu.usable_gib == pytest.approx(gib, abs=1e-3)


@pytest.mark.parametrize("spec", ["", "=40", "gpu=", "gpu=-1", "gpu=abc", "gpu=40TB", "gpu=99999", "a=b=c", "gpu 40"])
def test_bad_gpu_specs_raise_invalid_input(spec: str) -> None:
    with pytest.raises(InvalidInputError):
        parse_gpu_spec(spec)


def test_resolve_mixes_catalogue_and_specs() -> None:
    gpus = resolve_gpus(["h100", "lab=12"])
    assert [g.name for g in gpus] == ["H100 80GB", "lab"]
    assert resolve_gpus(None) == catalogue()


def test_defaults_are_what_a_user_expects() -> None:
    s = TrainingSettings().validated()
    assert (s.method, s.dtype, s.resolved_optimizer, s.micro_batch_size, s.attention) == (
        "full", "bf16", "adamw", 1, "flash_attention_2")
    assert s.resolved_seq_len(None) == 2048 and s.resolved_seq_len(1024) == 1024 and s.resolved_seq_len(8192) == 2048
    assert TrainingSettings(method="qlora").resolved_optimizer == "paged_adamw_8bit"
    assert TrainingSettings(num_gpus=4).resolved_sharding == "ddp"


def test_aliases_normalise() -> None:
    s = TrainingSettings(dtype="mixed-bf16", optimizer="adamw_torch", attention="fa2", sharding="fsdp", num_gpus=2,
                         gradient_checkpointing=True, lora_targets="q_proj, v_proj").validated()
    assert (s.dtype, s.optimizer, s.attention, s.sharding, s.gradient_checkpointing, s.lora_targets) == (
        "bf16", "adamw_foreach", "flash_attention_2", "fsdp_full_shard", "full", ("q_proj", "v_proj"))
    assert s.zero_stage == 3


@pytest.mark.parametrize("changes", [
    {"method": "dpo"}, {"dtype": "int8"}, {"optimizer": "rmsprop_16bit"}, {"micro_batch_size": 0}, {"seq_len": -5},
    {"attention": "ring"}, {"num_gpus": 2, "sharding": "none"}, {"offload_params": True},
    {"offload_optimizer": True}, {"lora_dropout": 1.5}, {"lora_rank": True}, {"lora_dropout": "high"},
    {"qlora_kernel": "bnb"}, {"overhead": Overhead(fragmentation=-0.1)}, {"overhead": 0.5},
])
def test_bad_settings_raise_invalid_input(changes: dict) -> None:
    with pytest.raises(InvalidInputError):
        TrainingSettings(**changes).validated()


def test_lora_target_parsing() -> None:
    assert parse_lora_targets("all_linear") == ("all-linear",)
    with pytest.raises(InvalidInputError):
        parse_lora_targets(" , ")
    with pytest.raises(InvalidInputError):
        parse_lora_targets("q_proj;drop table")


@pytest.mark.parametrize("name", [f.name for f in fields(TrainingSettings)])
def test_every_field_is_checked(name: str) -> None:
    """validated() runs each field's own check: a value of the wrong kind is a one-line error naming the field."""
    with pytest.raises(InvalidInputError, match=name) as caught:
        TrainingSettings(**{name: object()}).validated()
    assert "\n" not in str(caught.value)


def test_choice_aliases_must_name_a_choice() -> None:
    with pytest.raises(ValueError, match="outside the choices"):
        Choice(("fp32", "compute"), {"bf16": "bf16"})
    assert Choice(("fp32", "compute"), {"bf16": "compute"})("adapter_dtype", " BF16 ") == "compute"


def test_every_setting_is_documented() -> None:
    for cls in (TrainingSettings, Overhead):
        docs = field_docs(cls)
        assert set(docs) == {f.name for f in fields(cls)} and all(len(doc) > 10 for doc in docs.values())


def test_settings_and_flags_import_light() -> None:
    """Building every flag (and the docs' settings table) loads no torch, transformers or huggingface_hub."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    code = ("import sys; import hfmem.cli.options as o, hfmem.cli.reference as r; o.plan_flags(); r.table(); "
            "print(sorted({'torch', 'transformers', 'huggingface_hub'} & set(sys.modules)))")
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root, check=True)
    assert done.stdout.strip() == "[]"
