"""`hfmem --config FILE` and `--framework NAME` through the CLI: which layer sets each setting (default, framework
profile, config file, explicit flag), what the JSON and the assumes line say about it, and the model a file names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hfmem.cli.main import run
from hfmem.memory.record import cells, estimates

CONFIGS = Path(__file__).resolve().parent.parent / "fixtures" / "training_configs"
TORCHTUNE_LORA = CONFIGS / "torchtune" / "8B_lora_single_device.yaml"


def hfmem(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "100")


def _report(capsys, *args: str, gpu: str = "a100") -> dict:
    code, out, err = hfmem(capsys, *args, "--format", "json", "-g", gpu)
    assert code == 0, err
    return json.loads(out)


def test_a_torchtune_recipe_sets_what_it_says_and_a_flag_wins(capsys) -> None:
    recipe = yaml.safe_load(TORCHTUNE_LORA.read_text())
    report = _report(capsys, "example:Meta-Llama-3-8B", "--config", str(TORCHTUNE_LORA))
    plan, est = report["plan"], estimates(report)
    assert plan["config"]["format"] == "torchtune" and [e["method"] for e in est] == ["lora"]
    settings = est[0]["settings"]
    assert settings["lora_rank"] == recipe["model"]["lora_rank"]
    assert settings["micro_batch_size"] == recipe["batch_size"]
    assert settings["dtype"] == "bf16-pure"  # torchtune's dtype: bf16 trains bf16 weights, no fp32 master copy
    assert plan["sources"]["lora_rank"].startswith(f"config {TORCHTUNE_LORA}")
    flagged = _report(capsys, "example:Meta-Llama-3-8B", "--config", str(TORCHTUNE_LORA), "--lora-rank", "4")
    assert estimates(flagged)[0]["settings"]["lora_rank"] == 4 and flagged["plan"]["sources"]["lora_rank"] == "flag"
    code, out, _ = hfmem(capsys, "example:Meta-Llama-3-8B", "--config", str(TORCHTUNE_LORA), "-g", "a100")
    assert code == 0 and f"torchtune config {TORCHTUNE_LORA}" in " ".join(out.split())


def test_unknown_keys_are_listed_not_dropped(capsys, tmp_path: Path) -> None:
    source = json.loads((CONFIGS / "deepspeed" / "ds_z2_offload_config.json").read_text())
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(source | {"a_key_nobody_knows": 1}))
    report = _report(capsys, "example:Meta-Llama-3-8B", "--config", str(path), "-m", "full")
    assert any("a_key_nobody_knows" in w for w in report["warnings"])
    assert report["plan"]["config"]["unknown"] == ["a_key_nobody_knows"]


def test_the_model_comes_from_the_file_unless_given(capsys, tmp_path: Path) -> None:
    path = tmp_path / "sft.yaml"
    path.write_text("model_name_or_path: example:Qwen2.5-0.5B\nper_device_train_batch_size: 2\n"
                    "gradient_checkpointing: true\nbf16: true\n")
    code, out, err = hfmem(capsys, "--config", str(path), "--format", "json", "-g", "h100")
    assert code == 0, err
    report = json.loads(out)
    assert report["model"] == "example:Qwen2.5-0.5B"
    assert estimates(report)[0]["settings"]["micro_batch_size"] == 2
    assert _report(capsys, "example:Meta-Llama-3-8B", "--config", str(path))["model"] == "example:Meta-Llama-3-8B"
    no_model = tmp_path / "no_model.yaml"
    no_model.write_text("per_device_train_batch_size: 2\nbf16: true\n")
    code, out, err = hfmem(capsys, "--config", str(no_model))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "MODEL" in err


def test_a_framework_profile_sets_its_defaults_per_method_and_a_flag_wins(capsys) -> None:
    from hfmem.frameworks import PROFILES

    profile = PROFILES["torchtune"]
    report = _report(capsys, "example:Meta-Llama-3-8B", "--framework", "torchtune")
    plan = report["plan"]
    assert plan["framework"]["name"] == "torchtune"
    assert all(d["source"].startswith("https://github.com/") for d in plan["framework"]["defaults"])
    by_method = {e["method"]: e["settings"] for e in estimates(report)}
    for method, settings in by_method.items():
        for field, value in profile.values(method).items():
            shown = settings[field]
            assert (list(value) if isinstance(value, tuple) else value) == shown, (method, field)
    for d in profile.defaults:
        assert plan["sources"][d.field] == "framework torchtune"
    by_method = {f["method"]: f for f in cells(report)}
    assert by_method["full"]["settings"]["optimizer"] == profile.values("full")["optimizer"]
    flagged = _report(capsys, "example:Meta-Llama-3-8B", "--framework", "torchtune", "--optimizer", "adamw",
                      "--lora-rank", "4")
    assert {e["settings"]["optimizer"] for e in estimates(flagged)} == {"adamw"}
    assert {e["settings"]["lora_rank"] for e in estimates(flagged)} == {4}
    assert flagged["plan"]["sources"]["lora_rank"] == "flag"
    code, out, _ = hfmem(capsys, "example:Meta-Llama-3-8B", "--framework", "torchtune", "-g", "a100")
    assert code == 0 and profile.title in " ".join(out.split())


def test_a_config_file_applies_its_framework_under_what_it_says(capsys) -> None:
    recipe = yaml.safe_load(TORCHTUNE_LORA.read_text())
    report = _report(capsys, "example:Meta-Llama-3-8B", "--config", str(TORCHTUNE_LORA))
    assert report["plan"]["framework"]["name"] == "torchtune"
    assert estimates(report)[0]["settings"]["lora_rank"] == recipe["model"]["lora_rank"]
    assert report["plan"]["sources"]["lora_rank"].startswith("config")


def test_an_unknown_framework_is_one_line(capsys) -> None:
    code, out, err = hfmem(capsys, "example:Meta-Llama-3-8B", "--framework", "nope")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "torchtune" in err


def test_a_megatron_script_brings_its_profile_and_its_flags_win(capsys) -> None:
    """The launch script sets the layout and precision; the megatron profile the rest (its fp32 gradient buffer
    stays under the script's --grad-reduce-in-bf16, its DDP under --use-distributed-optimizer)."""
    script = CONFIGS / "megatron" / "train_llama3_8b_h100_fp8.sh"
    report = _report(capsys, "example:Meta-Llama-3-8B", "--config", str(script), gpu="h100")  # an FP8 script
    plan, est = report["plan"], estimates(report)
    assert plan["framework"]["name"] == "megatron" and plan["config"]["format"] == "megatron"
    assert est[0]["settings"]["dtype"] == "fp8-te" and est[0]["per_gpu_bytes"]["quantized_weight_copies"] > 0
    code, _, err = hfmem(capsys, "example:Meta-Llama-3-8B", "--config", str(script), "-g", "a100")
    assert code == 2 and "A100 80GB has none" in err  # the script's FP8 on a GPU without it: one line
    assert [e["method"] for e in est] == ["full"]
    settings = est[0]["settings"]
    assert (settings["grad_dtype"], settings["sharding"], settings["num_gpus"]) == ("param", "zero1", 8)
    assert settings["grad_bucket_view"] is True and plan["sources"]["grad_bucket_view"] == "framework megatron"
    assert plan["sources"]["grad_dtype"].startswith(f"config {script}")
    assert plan["config"]["architecture"]["num_layers"] == report["architecture"]["num_layers"] == 32
    assert not any(" states " in w for w in report["warnings"])  # the script's dimensions are Llama 3 8B's


def test_a_megatron_script_for_another_model_warns_of_each_dimension_it_states(capsys) -> None:
    script = CONFIGS / "megatron" / "train_gpt3_175b_distributed.sh"
    report = _report(capsys, "example:Meta-Llama-3-8B", "--config", str(script), "--num-gpus", "128")
    assert f"{script} states num_layers 96 where the model has 32: the model's is counted" in report["warnings"]
    assert sum(" states " in w for w in report["warnings"]) == 4  # layers, hidden, heads, KV heads (no GQA: 96)
    assert estimates(report)[0]["settings"]["num_gpus"] == 128  # the flag gives what the one-node launch lacks


def test_the_nemo_profile_keeps_fp32_gradients_whole_under_its_distributed_optimizer(capsys) -> None:
    report = _report(capsys, "example:Meta-Llama-3-8B", "--framework", "nemo", "-m", "full", "--num-gpus", "8")
    est = estimates(report)[0]
    params = report["parameters"]["total"]
    assert est["settings"]["sharding"] == "zero1" and est["settings"]["grad_dtype"] == "fp32"
    assert est["per_gpu_bytes"]["gradients"] == 4 * params  # Megatron's main_grad buffer, not sharded by ZeRO-1
