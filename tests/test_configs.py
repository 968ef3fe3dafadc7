"""Training-config readers: real configs from the frameworks' repositories read into the settings they state, and
hostile files refused with one line.

Expected values come from each file itself (read here with yaml.safe_load / json) and from the frameworks'
documented behaviour, cited where it is not in the file. fixtures/training_configs/README.md names every
file's source repository, commit and path.
"""

from __future__ import annotations

import json
import os
import shlex
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings, strategies as st

from hfmem.configs import ConfigFile, read_config
from hfmem.errors import ExitCode, InvalidInputError, classify
from hfmem.memory.settings import TrainingSettings

ROOT = Path(__file__).resolve().parent.parent / "fixtures" / "training_configs"
FIXTURES = sorted(p for p in ROOT.rglob("*") if p.suffix in {".yaml", ".yml", ".json", ".toml", ".sh"})
FIELDS = {f.name for f in fields(TrainingSettings)}

HF_NAMES = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj"}
"""torchtune's attention projections and the module names transformers' Llama gives them (modeling_llama.py)."""
HF_MLP = ("gate_proj", "up_proj", "down_proj")


def raw(relative: str) -> dict:
    """A fixture as its framework's own loader sees it."""
    path = ROOT / relative
    return json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())


def read(relative: str) -> ConfigFile:
    return read_config(ROOT / relative)


# -- every real file -----------------------------------------------------------------------------------------


def test_every_format_has_a_real_fixture():
    assert {read_config(p).format for p in FIXTURES} == {"torchtune", "axolotl", "llama-factory", "deepspeed",
                                                         "accelerate", "trainer-args", "megatron", "torchtitan",
                                                         "nemo"}


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(p.relative_to(ROOT)))
def test_fixture_values_are_valid_settings(path):
    config = read_config(path)
    assert set(config.values) <= FIELDS
    assert set(config.sources) == set(config.values)
    TrainingSettings(**config.values).validated()
    assert config.unknown == (), "every key of the real configs is known (mapped, ignored or unmodelled)"


# -- torchtune -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["8B_lora_single_device.yaml", "8B_qlora_single_device.yaml"])
def test_torchtune_lora(name):
    file = raw(f"torchtune/{name}")
    config = read(f"torchtune/{name}")
    model = file["model"]
    expected_targets = [HF_NAMES[m] for m in model["lora_attn_modules"]]
    expected_targets += list(HF_MLP) if model["apply_lora_to_mlp"] else []
    expected_targets += ["lm_head"] if model["apply_lora_to_output"] else []
    assert config.format == config.framework == "torchtune"
    assert config.model == file["checkpointer"]["checkpoint_dir"]
    qlora = model["_component_"].rsplit(".", 1)[-1].startswith("qlora_")
    assert config.values["method"] == ("qlora" if qlora else "lora")
    assert config.values.get("qlora_kernel") == ("torchao" if qlora else None)  # torchtune's NF4 is torchao's
    assert config.values["lora_rank"] == model["lora_rank"]
    assert config.values["lora_dropout"] == model["lora_dropout"]
    assert config.values["lora_targets"] == tuple(expected_targets)
    assert config.values["adapter_dtype"] == "compute"  # torchtune builds adapters in the model's dtype
    assert config.values["micro_batch_size"] == file["batch_size"]
    assert config.values["gradient_accumulation_steps"] == file["gradient_accumulation_steps"]
    assert file["dtype"] == "bf16" and config.values["dtype"] == "bf16-pure"  # no fp32 master copy in torchtune
    assert config.values["gradient_checkpointing"] == ("full" if file["enable_activation_checkpointing"] else "off")
    assert config.values["activation_offloading"] is file["enable_activation_offloading"]
    assert config.values["compile_layers"] is config.values["compile_loss"] is file["compile"]
    # LinearCrossEntropyLoss(num_output_chunks: int = 8), torchtune/modules/loss/cross_entropy_loss.py
    assert file["loss"]["_component_"].endswith("LinearCrossEntropyLoss") and config.values["loss_chunks"] == 8
    assert file["optimizer"]["fused"] is True and config.values["optimizer"] == "adamw"
    assert file["tokenizer"]["max_seq_len"] is None and "seq_len" not in config.values
    assert config.values["sharding"] == "none" and config.sources["sharding"] == "(file name)"
    assert config.unmodelled == ()


def test_torchtune_distributed_full():
    file = raw("torchtune/70B_full.yaml")
    config = read("torchtune/70B_full.yaml")
    assert config.values["method"] == "full" and "lora_rank" not in config.values
    assert file["custom_sharded_layers"] == ["tok_embeddings", "output"]
    assert config.values["fsdp_wrap_embeddings"] is True
    assert config.values["sharding"] == "fsdp_full_shard"  # custom_sharded_layers exists only in FSDP recipes
    assert file["fsdp_cpu_offload"] is True
    assert config.values["offload_params"] is config.values["offload_optimizer"] is True
    assert file["optimizer"]["fused"] is False and config.values["optimizer"] == "adamw_foreach"
    assert config.values["optimizer_in_backward"] is file["optimizer_in_bwd"]
    assert config.sources["offload_params"] == "fsdp_cpu_offload"


def test_torchtune_compile_sections_and_dataset_lists(tmp_path):
    """full_finetune_distributed.py: `compile: {model, loss, ...}` defaults both to True; datasets may be a list."""
    data = raw("torchtune/8B_full.yaml")
    data["compile"] = {"loss": False, "optimizer_step": True}
    data["dataset"] = [data["dataset"], {"_component_": "torchtune.datasets.slimorca_dataset", "packed": True}]
    path = tmp_path / "full.yaml"
    path.write_text(yaml.safe_dump(data))
    config = read_config(path)
    assert (config.values["compile_layers"], config.values["compile_loss"]) == (True, False)
    assert config.unmodelled == ("dataset.packed",)


def test_torchtune_sharding_unknown_without_a_sign(tmp_path):
    """torchtune's distributed LoRA recipe has none of the distributed-only keys: sharding is left unset."""
    copy = tmp_path / "8B_lora.yaml"
    copy.write_text((ROOT / "torchtune" / "8B_lora_single_device.yaml").read_text())
    assert "sharding" not in read_config(copy).values


# -- Axolotl -------------------------------------------------------------------------------------------------


def test_axolotl_lora_with_8bit_base():
    file = raw("axolotl/examples/llama-3/lora-8b.yml")
    config = read("axolotl/examples/llama-3/lora-8b.yml")
    assert config.model == file["base_model"] and config.framework == "axolotl"
    assert file["adapter"] == "lora" and config.values["method"] == "lora"
    assert config.values["lora_rank"] == file["lora_r"]
    assert config.values["lora_dropout"] == file["lora_dropout"]
    assert file["lora_target_linear"] is True and config.values["lora_targets"] == ("all-linear",)
    assert config.values["seq_len"] == file["sequence_len"]
    assert config.values["micro_batch_size"] == file["micro_batch_size"]
    assert config.values["gradient_accumulation_steps"] == file["gradient_accumulation_steps"]
    assert file["optimizer"] == "adamw_bnb_8bit" and config.values["optimizer"] == "adamw_8bit"
    assert config.values["attention"] == file["attn_implementation"]
    assert file["bf16"] == "auto" and config.values["dtype"] == "bf16"  # bf16-loaded base under bf16 autocast
    # the 8-bit base and the fully trained embed_tokens/lm_head are settings; packing is not modelled
    assert file["load_in_8bit"] and config.values["base_quantization"] == "int8"
    assert config.values["modules_to_save"] == tuple(file["lora_modules_to_save"])
    assert file["sample_packing"] and set(config.unmodelled) == {"sample_packing"}


def test_axolotl_qlora_fsdp_offload():
    file = raw("axolotl/examples/llama-3/qlora-fsdp-70b.yaml")
    config = read("axolotl/examples/llama-3/qlora-fsdp-70b.yaml")
    assert file["adapter"] == "qlora" and config.values["method"] == "qlora"
    assert file["fsdp_config"]["fsdp_sharding_strategy"] == "FULL_SHARD"
    assert config.values["sharding"] == "fsdp_full_shard"
    assert file["fsdp_config"]["fsdp_offload_params"] is True
    assert config.values["offload_params"] is config.values["offload_optimizer"] is True
    assert config.values["seq_len"] == file["sequence_len"] == 512
    assert config.values["dtype"] == "bf16"


def test_axolotl_follows_its_deepspeed_file():
    file = raw("axolotl/examples/gpt-oss/gpt-oss-20b-fft-deepspeed-zero3.yaml")
    ds = raw("axolotl/deepspeed_configs/zero3_bf16.json")
    config = read("axolotl/examples/gpt-oss/gpt-oss-20b-fft-deepspeed-zero3.yaml")
    assert file["deepspeed"] == "deepspeed_configs/zero3_bf16.json"
    assert ds["zero_optimization"]["stage"] == 3 and config.values["sharding"] == "zero3"
    assert config.sources["sharding"] == "deepspeed_configs/zero3_bf16.json:zero_optimization.stage"
    assert ds["bf16"]["enabled"] is True and config.values["dtype"] == "bf16"  # ZeRO keeps fp32 masters
    assert config.values["method"] == "full" and config.values["activation_offloading"] is True
    zero = ds["zero_optimization"]
    assert zero["max_live_parameters"] == config.values["max_live_parameters"] == 0  # no prefetching
    assert zero["max_reuse_distance"] == config.values["max_reuse_distance"] == 0  # nothing kept for reuse
    assert config.sources["max_live_parameters"] == "deepspeed_configs/zero3_bf16.json:zero_optimization.max_live_parameters"
    assert zero["stage3_prefetch_bucket_size"] == "auto" and "prefetch_bucket_size" not in config.values
    assert not [key for key in config.unmodelled if "zero_optimization" in key]
    assert {"attn_implementation", "sample_packing"} <= set(config.unmodelled)
    assert file["optimizer"] == "adamw_torch_8bit" and config.values["optimizer"] == "adamw_torchao_8bit"
    assert file["plugins"] == ["axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"]
    assert config.values["fused_loss"] == "cce" and "plugins" not in config.unmodelled


def test_axolotl_linearized_llama4_experts_take_per_expert_adapters():
    """llama4_linearized_experts loads Llama 4's routed experts as per-expert nn.Linear modules, so LoRA adapts them
    as Linears (expert_lora per-expert), not through PEFT's ParamWrapper over the fused tensors."""
    file = raw("axolotl/examples/llama-4/scout-qlora-single-h100-flex.yaml")
    config = read("axolotl/examples/llama-4/scout-qlora-single-h100-flex.yaml")
    assert file["llama4_linearized_experts"] is True
    assert config.values["expert_lora"] == "per-expert" and "llama4_linearized_experts" not in config.unmodelled
    assert "expert_lora" not in read("axolotl/examples/gpt-oss/gpt-oss-20b-fft-fsdp2.yaml").values


# -- LLaMA-Factory -------------------------------------------------------------------------------------------


def test_llama_factory_lora_defaults():
    file = raw("llama-factory/examples/train_lora/llama3_lora_sft.yaml")
    config = read("llama-factory/examples/train_lora/llama3_lora_sft.yaml")
    assert config.model == file["model_name_or_path"] and config.framework == "llama-factory"
    assert config.values["method"] == file["finetuning_type"] == "lora"
    assert config.values["lora_rank"] == file["lora_rank"]
    assert file["lora_target"] == "all" and config.values["lora_targets"] == ("all-linear",)
    assert config.values["seq_len"] == file["cutoff_len"]
    assert config.values["micro_batch_size"] == file["per_device_train_batch_size"]
    assert config.values["gradient_accumulation_steps"] == file["gradient_accumulation_steps"]
    # model_args.py: disable_gradient_checkpointing=False, flash_attn="auto" (transformers picks SDPA)
    assert "disable_gradient_checkpointing" not in file and config.values["gradient_checkpointing"] == "full"
    assert config.sources["gradient_checkpointing"] == "disable_gradient_checkpointing (default)"
    assert config.values["attention"] == "sdpa"
    assert file["bf16"] is True and config.values["dtype"] == "bf16"
    assert config.unmodelled == ()


def test_llama_factory_qlora():
    file = raw("llama-factory/examples/train_qlora/llama3_lora_sft_otfq.yaml")
    config = read("llama-factory/examples/train_qlora/llama3_lora_sft_otfq.yaml")
    assert file["quantization_bit"] == 4 and file["quantization_method"] == "bnb"
    assert config.values["method"] == "qlora"
    assert config.values["qlora_double_quant"] is True  # model_args.py double_quantization=True


def test_llama_factory_follows_its_deepspeed_path():
    """`deepspeed: examples/deepspeed/ds_z3_config.json` is written from the repository root, two folders up."""
    file = raw("llama-factory/examples/train_full/qwen3_full_sft.yaml")
    ds = raw("llama-factory/examples/deepspeed/ds_z3_config.json")
    config = read("llama-factory/examples/train_full/qwen3_full_sft.yaml")
    assert file["deepspeed"] == "examples/deepspeed/ds_z3_config.json"
    assert ds["zero_optimization"]["stage"] == 3 and config.values["sharding"] == "zero3"
    assert config.sources["sharding"] == f"{file['deepspeed']}:zero_optimization.stage"
    assert ds["train_micro_batch_size_per_gpu"] == "auto"  # so the trainer's own value stands
    assert config.values["micro_batch_size"] == file["per_device_train_batch_size"]
    assert ds["bf16"]["enabled"] == "auto" and file["bf16"] is True and config.values["dtype"] == "bf16"
    assert config.values["method"] == "full"


def test_llama_factory_lora_under_zero3_keeps_adapters_in_bf16():
    """adapter.py: no fp32 upcast of trainable parameters under ZeRO-3 for an unquantised model."""
    config = read("llama-factory/examples/train_lora/qwen3_lora_sft_ds3.yaml")
    assert config.values["sharding"] == "zero3" and config.values["adapter_dtype"] == "compute"


# -- DeepSpeed -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["zero_stage3_offload_config.json", "zero3_bf16_cpuoffload_all.json",
                                  "ds_z2_offload_config.json"])
def test_deepspeed_files(name):
    file = raw(f"deepspeed/{name}")
    config = read(f"deepspeed/{name}")
    zero = file["zero_optimization"]
    assert config.format == config.framework == "deepspeed" and config.model is None
    assert config.values["sharding"] == f"zero{zero['stage']}"
    assert config.values["offload_optimizer"] is (zero["offload_optimizer"]["device"] == "cpu")
    assert config.values.get("offload_params", False) is (zero.get("offload_param", {}).get("device") == "cpu")
    bf16, fp16 = file.get("bf16", {}).get("enabled"), file.get("fp16", {}).get("enabled")
    if bf16 is True or fp16 is True:
        assert config.values["dtype"] == ("bf16" if bf16 is True else "fp16")
    else:
        assert "dtype" not in config.values  # "auto": the trainer's flag decides
    for key in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        field = "micro_batch_size" if key.startswith("train") else key
        assert (field in config.values) is isinstance(file[key], int)


def test_deepspeed_gpu_count_from_the_batch_identity(tmp_path):
    """DeepSpeed's train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x GPUs."""
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4,
                                "gradient_accumulation_steps": 2, "zero_optimization": {"stage": 2}}))
    values = read_config(path).values
    assert (values["num_gpus"], values["micro_batch_size"], values["gradient_accumulation_steps"]) == (8, 4, 2)


# -- accelerate ----------------------------------------------------------------------------------------------


def test_accelerate_fsdp():
    file = raw("accelerate/fsdp_config.yaml")
    config = read("accelerate/fsdp_config.yaml")
    assert config.format == config.framework == "accelerate" and config.model is None
    assert config.values["num_gpus"] == file["num_processes"]
    assert file["fsdp_config"]["fsdp_sharding_strategy"] == "FULL_SHARD"
    assert config.values["sharding"] == "fsdp_full_shard"
    assert config.values["offload_params"] is file["fsdp_config"]["fsdp_offload_params"]
    assert file["mixed_precision"] == "bf16" and config.values["dtype"] == "bf16"  # FSDP upcasts to fp32 masters


def test_accelerate_fsdp2_reshard_and_checkpointing():
    file = raw("accelerate/fsdp2.yaml")
    config = read("accelerate/fsdp2.yaml")
    assert file["fsdp_config"]["fsdp_reshard_after_forward"] is True and config.values["sharding"] == "fsdp_full_shard"
    assert config.values["gradient_checkpointing"] == "off"
    assert file["fsdp_config"]["fsdp_activation_checkpointing"] is False


def test_accelerate_deepspeed_plugin_and_ddp():
    file = raw("accelerate/deepspeed_config_z3_qlora.yaml")
    config = read("accelerate/deepspeed_config_z3_qlora.yaml")
    assert config.values["sharding"] == f"zero{file['deepspeed_config']['zero_stage']}"
    assert config.values["offload_optimizer"] is False and config.values["offload_params"] is False
    assert config.values["num_gpus"] == file["num_processes"] and config.values["dtype"] == "bf16"
    ddp = read("accelerate/ddp.yaml")
    assert ddp.values["sharding"] == "ddp" and ddp.values["num_gpus"] == raw("accelerate/ddp.yaml")["num_processes"]
    assert ddp.values["dtype"] == "amp-bf16"  # DDP: autocast over the weights as the script loaded them


def test_accelerate_follows_a_relative_deepspeed_file():
    """accelerate's own template names ../deepspeed_config_templates/zero_stage1_config.json."""
    config = read("accelerate/examples/config_yaml_templates/deepspeed.yaml")
    ds = raw("accelerate/examples/deepspeed_config_templates/zero_stage1_config.json")
    ref = raw("accelerate/examples/config_yaml_templates/deepspeed.yaml")["deepspeed_config"]["deepspeed_config_file"]
    assert config.values["sharding"] == f"zero{ds['zero_optimization']['stage']}"
    assert ds["fp16"]["enabled"] is True and config.values["dtype"] == "fp16"
    assert ds["optimizer"]["params"]["torch_adam"] is True and config.values["optimizer"] == "adamw_foreach"
    assert ds["zero_optimization"]["allgather_bucket_size"] != 5e8  # DeepSpeed's default
    assert config.unmodelled == (f"{ref}:zero_optimization.allgather_bucket_size",)


# -- trainer arguments (TRL SFTConfig + ModelConfig, HF TrainingArguments) ----------------------------------


def test_trl_full():
    file = raw("trainer-args/config_full.yaml")
    config = read("trainer-args/config_full.yaml")
    assert config.format == "trainer-args" and config.framework == "trl"
    assert config.model == file["model_name_or_path"]
    assert config.values["method"] == "full"
    assert config.values["micro_batch_size"] == file["per_device_train_batch_size"]
    assert config.values["seq_len"] == file["max_seq_length"]
    assert config.values["attention"] == file["attn_implementation"]
    # bf16 weights (torch_dtype) trained by the Trainer without DeepSpeed/FSDP: no master copy
    assert file["torch_dtype"] == "bfloat16" and config.values["dtype"] == "bf16-pure"


def test_trl_qlora():
    file = raw("trainer-args/config_qlora.yaml")
    config = read("trainer-args/config_qlora.yaml")
    assert file["load_in_4bit"] and file["use_peft"] and config.values["method"] == "qlora"
    assert config.values["lora_rank"] == file["lora_r"]
    assert config.values["lora_dropout"] == file["lora_dropout"]
    assert config.values["lora_targets"] == tuple(file["lora_target_modules"])
    assert "use_bnb_nested_quant" not in file
    assert config.values["qlora_double_quant"] is False  # trl ModelConfig use_bnb_nested_quant=False
    assert config.values["adapter_dtype"] == "compute"  # SFTTrainer casts QLoRA adapters to bf16
    assert config.values["dtype"] == "bf16"


def test_trl_packing_and_liger_kernels_are_unmodelled_its_fused_loss_is_read():
    """use_liger_kernel turns on Liger's fused linear cross-entropy (a setting) and its RMSNorm, SwiGLU and RoPE
    kernels (not modelled, so the key is still listed)."""
    file = raw("trainer-args/sft.yaml")
    config = read("trainer-args/sft.yaml")
    assert file["packing"] is True and file["use_liger_kernel"] is True
    assert set(config.unmodelled) == {"packing", "use_liger_kernel"}
    assert config.values["fused_loss"] == "liger" and config.sources["fused_loss"] == "use_liger_kernel"
    assert config.values["seq_len"] == file["max_length"]


def test_trl_defaults_where_the_file_is_silent():
    """trl's example CLI config sets none of them: SFTConfig max_length=1024, gradient_checkpointing=True, bf16
    on; TrainingArguments per_device_train_batch_size=8; ModelConfig dtype float32 (autocast over fp32)."""
    config = read("trainer-args/example_config.yaml")
    assert config.values["seq_len"] == 1024 and config.sources["seq_len"] == "max_length (default)"
    assert config.values["gradient_checkpointing"] == "full" and config.values["micro_batch_size"] == 8
    assert config.values["dtype"] == "amp-bf16"


def test_trainer_args_as_json_with_inline_deepspeed(tmp_path):
    """TrainingArguments also come as JSON, and accept the DeepSpeed config as a dict."""
    data = raw("trainer-args/config_qlora.yaml")
    data["deepspeed"] = raw("deepspeed/zero3_bf16_cpuoffload_all.json")
    path = tmp_path / "args.json"
    path.write_text(json.dumps(data))
    config = read_config(path)
    assert config.values["method"] == "qlora" and config.values["micro_batch_size"] == data["per_device_train_batch_size"]
    assert config.values["sharding"] == "zero3" and config.sources["sharding"] == "deepspeed.zero_optimization.stage"
    assert config.values["offload_params"] is True


def test_plain_trainer_arguments(tmp_path):
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"output_dir": "out", "per_device_train_batch_size": 4, "fp16": True,
                                "optim": "adafactor", "gradient_checkpointing": True}))
    config = read_config(path)
    assert config.framework == "hf-trainer" and config.model is None
    assert config.values["optimizer"] == "adafactor" and config.values["gradient_checkpointing"] == "full"
    assert config.values["dtype"] == "amp-fp16"


@pytest.mark.parametrize("each", [True, False])
def test_trainer_arguments_sync_each_batch(tmp_path, each):
    """accelerator_config's gradient_accumulation_kwargs.sync_each_batch is the setting; absent, the default stays."""
    path = tmp_path / "args.json"
    args = {"output_dir": "out", "gradient_accumulation_steps": 4, "fsdp": "full_shard auto_wrap"}
    kwargs = {"gradient_accumulation_kwargs": {"sync_each_batch": each}}
    path.write_text(json.dumps(args | {"accelerator_config": kwargs}))
    assert read_config(path).values["sync_each_batch"] is each
    path.write_text(json.dumps(args))
    assert "sync_each_batch" not in read_config(path).values


@pytest.mark.parametrize(("args", "expected"), [
    ({"eval_strategy": "steps", "per_device_eval_batch_size": 4}, 4),
    ({"evaluation_strategy": "epoch"}, 8),  # the older spelling; TrainingArguments' default eval batch
    ({"eval_strategy": "no", "per_device_eval_batch_size": 4}, None),
    ({"per_device_eval_batch_size": 4}, None),  # eval_strategy defaults to "no": nothing is evaluated
])
def test_trainer_arguments_evaluate_only_with_an_eval_strategy(tmp_path, args, expected):
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"output_dir": "out", "per_device_train_batch_size": 2} | args))
    config = read_config(path)
    assert config.values.get("eval_batch_size") == expected and config.unknown == ()


def test_real_configs_that_evaluate_get_an_evaluation_phase():
    """The alignment-handbook-style QLoRA recipe evaluates every epoch at 8 sequences; Axolotl's Llama-3 LoRA holds
    out 5% and evaluates it at its micro-batch (eval_batch_size unset); its QLoRA holds out nothing."""
    assert read_config(ROOT / "trainer-args/config_qlora.yaml").values["eval_batch_size"] == 8
    lora = read_config(ROOT / "axolotl/examples/llama-3/lora-8b.yml")
    assert lora.values["eval_batch_size"] == lora.values["micro_batch_size"] == 2
    assert "eval_batch_size" not in read_config(ROOT / "axolotl/examples/llama-3/qlora.yml").values


# -- what is listed --------------------------------------------------------------------------------------------


def test_unknown_keys_are_listed(tmp_path):
    data = raw("llama-factory/examples/train_lora/llama3_lora_sft.yaml") | {"frobnicate": 3, "warp": {"drive": 9}}
    path = tmp_path / "lf.yaml"
    path.write_text(yaml.safe_dump(data))
    assert read_config(path).unknown == ("frobnicate", "warp.drive")
    ds = raw("deepspeed/ds_z2_offload_config.json")
    ds["zero_optimization"]["mystery_knob"] = 1
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(ds))
    assert read_config(path).unknown == ("zero_optimization.mystery_knob",)


def test_unknown_keys_of_a_linked_file_are_listed(tmp_path):
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 2, "odd": 1}}))
    (tmp_path / "run.yaml").write_text("per_device_train_batch_size: 2\ndeepspeed: ds.json\nbf16: true\n")
    config = read_config(tmp_path / "run.yaml")
    assert config.unknown == ("ds.json:zero_optimization.odd",)
    assert config.values["sharding"] == "zero2" and config.values["dtype"] == "bf16"


def test_off_switches_are_not_unmodelled(tmp_path):
    data = raw("axolotl/examples/llama-3/lora-8b.yml") | {"load_in_8bit": False, "sample_packing": False,
                                                          "lora_modules_to_save": None}
    path = tmp_path / "ax.yaml"
    path.write_text(yaml.safe_dump(data))
    assert read_config(path).unmodelled == ()


# -- hostile files ---------------------------------------------------------------------------------------------


def refused(path: Path | str, *words: str) -> str:
    """read_config refuses the file with one InvalidInputError line naming it (and `words`)."""
    with pytest.raises(InvalidInputError) as caught:
        read_config(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    assert classify(caught.value) == (ExitCode.INVALID_INPUT, message)
    rest = message.replace(str(path), "")  # the words must be in what it says, not in the path (test names)
    for word in words:
        assert word in rest
    return message


def test_yaml_bomb(tmp_path):
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size < 2_000
    refused(path, "aliases are expanded")


def test_recursive_alias(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("a: &a [*a]\n")
    refused(path, "alias")


def test_huge_file(tmp_path):
    path = tmp_path / "huge.yaml"
    with path.open("wb") as handle:
        handle.truncate(1 << 30)  # 1 GiB, sparse: refused on its size, never read
    refused(path, "larger than")


@pytest.mark.parametrize(("text", "shape"), [("- 1\n- 2\n", "list"), ("42\n", "int"), ("", "empty"),
                                             ("just a string\n", "str")])
def test_top_level_not_a_mapping(tmp_path, text, shape):
    path = tmp_path / "top.yaml"
    path.write_text(text)
    refused(path, shape, "mapping")


@pytest.mark.parametrize(("fixture", "key", "value", "where"), [
    ("torchtune/8B_lora_single_device.yaml", "batch_size", [1, 2], "batch_size"),
    ("torchtune/8B_lora_single_device.yaml", "model", {"_component_": "x.lora_llama3_1_8b", "lora_rank": "big"},
     "model.lora_rank"),
    ("axolotl/examples/llama-3/qlora.yml", "micro_batch_size", {"n": 2}, "micro_batch_size"),
    ("llama-factory/examples/train_lora/llama3_lora_sft.yaml", "bf16", "maybe", "bf16"),
    ("deepspeed/ds_z2_offload_config.json", "zero_optimization", 3, "zero_optimization"),
    ("trainer-args/config_qlora.yaml", "lora_target_modules", 7, "lora_target_modules"),
    ("trainer-args/config_qlora.yaml", "deepspeed", 5, "deepspeed"),
    ("accelerate/fsdp_config.yaml", "num_processes", "eight", "num_processes"),
])
def test_wrong_types(tmp_path, fixture, key, value, where):
    data = raw(fixture) | {key: value}
    path = tmp_path / Path(fixture).name
    path.write_text(json.dumps(data) if path.suffix == ".json" else yaml.safe_dump(data))
    refused(path, where)


def test_out_of_range_value_names_its_key(tmp_path):
    data = raw("axolotl/examples/llama-3/qlora.yml") | {"lora_r": 0}
    path = tmp_path / "ax.yaml"
    path.write_text(yaml.safe_dump(data))
    refused(path, "lora_r", "lora_rank")


@pytest.mark.parametrize(("content", "words"), [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", ("binary",)),
    ("base_model: café\n".encode("latin-1"), ("UTF-8",)),
    (b"a: [1, 2\n", ("not valid YAML", "line")),
    (b"x: !!python/object/apply:os.system ['true']\n", ("not valid YAML",)),
    (b"a:\n" + b"".join(b" " * i + b"b:\n" for i in range(1, 200)), ("nests",)),
])
def test_bad_bytes(tmp_path, content, words):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    refused(path, *words)


def test_bad_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"zero_optimization": {"stage": 3},}')
    refused(path, "not valid JSON", "line 1")
    path.write_text("[" * 100_000 + "]" * 100_000)
    refused(path, "JSON")


def test_missing_path_directory_device_and_suffix(tmp_path):
    refused(tmp_path / "absent.yaml", "no such file")
    (tmp_path / "dir.yaml").mkdir()
    refused(tmp_path / "dir.yaml", "directory")
    os.mkfifo(tmp_path / "pipe.yaml")  # opening a FIFO would block: refused on its type first
    refused(tmp_path / "pipe.yaml", "not a regular file")
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    refused(tmp_path / "zero.yaml", "not a regular file")
    (tmp_path / "notes.txt").write_text("batch_size: 2\n")
    refused(tmp_path / "notes.txt", ".yaml")


def test_unknown_and_ambiguous_shapes(tmp_path):
    path = tmp_path / "what.yaml"
    path.write_text("foo: 1\nbar: [2]\n")
    refused(path, "expected", "torchtune", "axolotl", "deepspeed")
    path.write_text("base_model: x/y\ndatasets: []\nstage: sft\n")
    refused(path, "axolotl and llama-factory")


def test_deepspeed_path_that_loops(tmp_path):
    """A config naming itself as its DeepSpeed file: a DeepSpeed JSON names no file, so nothing is followed twice."""
    (tmp_path / "run.yaml").write_text("per_device_train_batch_size: 2\ndeepspeed: run.yaml\n")
    refused(tmp_path / "run.yaml", "not a DeepSpeed config")


@pytest.mark.parametrize("reference", ["../../../../../../etc/passwd", "/etc/passwd", "~/ds.json", "link.json"])
def test_deepspeed_path_that_escapes(tmp_path, reference):
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    (project / "link.json").symlink_to(outside)
    (project / "run.yaml").write_text(f"per_device_train_batch_size: 2\ndeepspeed: {reference}\n")
    refused(project / "run.yaml", "deepspeed names", "outside")


@pytest.mark.parametrize("reference", ['"a\\0b.json"', "x" * 5000 + ".json", "loop.json"])
def test_deepspeed_path_unusable(tmp_path, reference):
    (tmp_path / "loop.json").symlink_to(tmp_path / "loop2.json")
    (tmp_path / "loop2.json").symlink_to(tmp_path / "loop.json")
    (tmp_path / "run.yaml").write_text(f"per_device_train_batch_size: 2\ndeepspeed: {reference}\n")
    refused(tmp_path / "run.yaml", "deepspeed names", "not a usable path")


def test_deepspeed_path_missing(tmp_path):
    (tmp_path / "run.yaml").write_text("per_device_train_batch_size: 2\ndeepspeed: nowhere/ds.json\n")
    refused(tmp_path / "run.yaml", "not a file")


def test_deepspeed_file_that_is_hostile(tmp_path):
    (tmp_path / "ds.json").write_bytes(b"\xff\xfe{}")
    (tmp_path / "run.yaml").write_text("per_device_train_batch_size: 2\ndeepspeed: ds.json\n")
    refused(tmp_path / "run.yaml", "UTF-8")


def test_eight_bit_bases_and_saved_modules_become_settings(tmp_path) -> None:
    """Axolotl's load_in_8bit LoRA and lora_modules_to_save, LLaMA-Factory's quantization_bit 8 and
    additional_target: settings now, no longer warnings."""
    axolotl = tmp_path / "axolotl.yml"
    axolotl.write_text("base_model: org/m\nadapter: lora\nload_in_8bit: true\nlora_r: 8\n"
                       "lora_modules_to_save: [embed_tokens, lm_head]\ndatasets: [{path: x}]\n")
    read = read_config(axolotl)
    assert read.values["base_quantization"] == "int8" and read.values["method"] == "lora"
    assert read.values["modules_to_save"] == ("embed_tokens", "lm_head")
    assert "load_in_8bit" not in read.unmodelled and "lora_modules_to_save" not in read.unmodelled
    factory = tmp_path / "factory.yaml"
    factory.write_text("model_name_or_path: org/m\nstage: sft\nfinetuning_type: lora\nquantization_bit: 8\n"
                       "additional_target: embed_tokens\n")
    read = read_config(factory)
    assert read.values["base_quantization"] == "int8" and read.values["modules_to_save"] == ("embed_tokens",)
    assert not {"quantization_bit", "additional_target"} & set(read.unmodelled)


# -- checkpoint saving ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("relative", "expected"), [
    ("accelerate/fsdp_config.yaml", "sharded"),  # fsdp_state_dict_type: SHARDED_STATE_DICT
    ("accelerate/fsdp2.yaml", "full"),  # FSDP2, FULL_STATE_DICT stated
    ("axolotl/examples/llama-3/qlora-fsdp-70b.yaml", "full"),
    ("accelerate/deepspeed_config_z3_qlora.yaml", "full"),  # zero3_save_16bit_model: true
    ("llama-factory/examples/deepspeed/ds_z3_config.json", "full"),  # stage3_gather_16bit_weights_on_model_save
    ("deepspeed/zero_stage3_offload_config.json", "full"),  # the same key as "auto", which DeepSpeed reads as true
])
def test_how_real_files_save_their_checkpoints(relative, expected):
    assert read(relative).values["state_dict_type"] == expected


def test_checkpoint_saving_defaults_follow_the_framework(tmp_path):
    """accelerate's FSDP2 saves shards unless told, DeepSpeed ZeRO-3 unless it gathers; a stated key wins."""
    fsdp2 = tmp_path / "fsdp2.yaml"
    fsdp2.write_text(yaml.safe_dump({"distributed_type": "FSDP", "num_processes": 2, "fsdp_config": {"fsdp_version": 2}}))
    assert read_config(fsdp2).values["state_dict_type"] == "sharded"
    zero3 = tmp_path / "ds.json"
    zero3.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    assert read_config(zero3).values["state_dict_type"] == "sharded"
    zero3.write_text(json.dumps({"zero_optimization": {"stage": 3, "gather_16bit_weights_on_model_save": False}}))
    assert read_config(zero3).values["state_dict_type"] == "sharded"
    zero2 = tmp_path / "ds2.json"
    zero2.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    assert "state_dict_type" not in read_config(zero2).values  # nothing gathered to save below ZeRO-3


# -- generation between steps (TRL GRPO) -------------------------------------------------------------------


def test_grpo_generates_its_completions_between_steps(tmp_path):
    """GRPOConfig: per GPU, per_device_train_batch_size x steps_per_generation completions of
    max_completion_length new tokens after prompts of max_prompt_length; the ZeRO-3 gather switch carried."""
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump({"model_name_or_path": "Qwen/Qwen2.5-1.5B-Instruct", "per_device_train_batch_size": 4,
                                    "gradient_accumulation_steps": 2, "num_generations": 8, "max_prompt_length": 256,
                                    "max_completion_length": 1024, "ds3_gather_for_generation": False}))
    config = read_config(path)
    assert config.framework == "trl"
    values = config.values
    assert (values["generation_batch_size"], values["generation_tokens"], values["seq_len"]) == (8, 1024, 1280)
    assert values["generation_gathers_weights"] is False
    path.write_text(yaml.safe_dump({"per_device_train_batch_size": 4, "num_generations": 4,
                                    "generation_batch_size": 64}))
    assert read_config(path).values["generation_batch_size"] == 64  # global: all on one GPU, as no count is given
    path.write_text(yaml.safe_dump({"per_device_train_batch_size": 4, "num_generations": 4, "use_vllm": True}))
    vllm = read_config(path)
    assert "generation_batch_size" not in vllm.values and "use_vllm" in " ".join(vllm.unmodelled)


@pytest.mark.parametrize(("backend", "dtype"), [("TE", "fp8-te"), ("AO", "fp8-torchao"), ("MSAMP", None)])
def test_accelerate_fp8_backend_names_the_recipe(tmp_path: Path, backend: str, dtype: str | None) -> None:
    """mixed_precision fp8: fp8_config.backend TE is TransformerEngine's delayed scaling with its amax history, AO
    torchao float8; another backend is unmodelled."""
    path = tmp_path / "fp8.yaml"
    path.write_text(yaml.safe_dump({"distributed_type": "MULTI_GPU", "num_processes": 8, "mixed_precision": "fp8",
                                    "fp8_config": {"backend": backend, "amax_history_len": 16}}))
    config = read_config(str(path))
    assert config.values.get("dtype") == dtype
    assert config.values.get("fp8_amax_history_len") == (16 if backend == "TE" else None)
    assert config.values.get("fp8_all_gather") == (True if backend == "AO" else None)  # AORecipeKwargs' default
    assert (dtype is None) == any("mixed_precision" in key for key in config.unmodelled)


@pytest.mark.parametrize(("extra", "dtype", "history"), [
    ({"fp8_backend": "te"}, "fp8-te", 16), ({}, "fp8-torchao-rowwise", None),
    ({"fp8_backend": "torchao"}, "fp8-torchao-rowwise", None), ({"fp8_backend": "msamp"}, "amp-bf16", None)])
def test_llama_factory_fp8_backend_names_the_recipe(tmp_path: Path, extra: dict, dtype: str, history: int | None):
    """fp8: true on a full fine-tune: te is TE delayed scaling with LLaMA-Factory's amax_history_len 16, auto and
    torchao torchao's rowwise recipe (train/fp8_utils.py); msamp is unmodelled and the Trainer's dtype stands (fp32
    trained weights under autocast)."""
    path = tmp_path / "fp8.yaml"
    path.write_text(yaml.safe_dump({"model_name_or_path": "meta-llama/Meta-Llama-3-8B", "stage": "sft",
                                    "finetuning_type": "full", "bf16": True, "fp8": True, "deepspeed": None,
                                    "per_device_train_batch_size": 1, **extra}))
    config = read_config(str(path))
    assert config.format == "llama-factory" and "fp8_all_gather" not in config.values
    assert config.values["dtype"] == dtype and config.values.get("fp8_amax_history_len") == history
    assert (extra.get("fp8_backend") == "msamp") == ("fp8" in config.unmodelled)


@pytest.mark.parametrize(("adapter", "dtype"), [(None, "fp8-torchao"), ("lora", None)])
@pytest.mark.parametrize("all_gather", [True, False])
def test_axolotl_fp8_is_torchao_tensorwise(tmp_path: Path, adapter: str | None, dtype: str | None, all_gather: bool):
    """Axolotl's fp8: true hands accelerate an AORecipeKwargs over torchao's default (tensorwise) Float8LinearConfig;
    on an adapter run the recipe is not modelled and says so."""
    path = tmp_path / "fp8.yml"
    path.write_text(yaml.safe_dump({"base_model": "meta-llama/Meta-Llama-3-8B", "bf16": True, "fp8": True,
                                    "micro_batch_size": 1, "sequence_len": 2048, "datasets": [{"path": "d"}],
                                    "fp8_enable_fsdp_float8_all_gather": all_gather,
                                    **({"adapter": adapter} if adapter else {})}))
    config = read_config(str(path))
    assert config.format == "axolotl"
    assert (config.values["dtype"] == dtype) if dtype else ("fp8" in config.unmodelled)
    assert config.values.get("fp8_all_gather") == (True if all_gather and dtype else None)


# -- Megatron-LM argument lists, torchtitan TOML, NeMo 2 recipe YAML -----------------------------------------


def script_flags(relative: str) -> list[str]:
    """Every token of a launch script as the shell splits it (comments dropped), to check flags against."""
    return shlex.split((ROOT / relative).read_text(), comments=True)


def test_megatron_llama3_8b_script():
    config = read("megatron/train_llama3_8b_h100_fp8.sh")
    tokens = script_flags("megatron/train_llama3_8b_h100_fp8.sh")
    assert config.format == config.framework == "megatron" and config.model is None
    assert {"TP_SIZE=1", "CP_SIZE=1", "GPUS_PER_NODE=8", "NUM_NODES=1", "GLOBAL_BATCH_SIZE=128",
            "SEQ_LENGTH=8192"} <= set(tokens)  # the variables the flags name, as the script assigns them
    v = config.values
    assert (v["tp"], v["cp"], v["num_gpus"], v["gpus_per_node"], v["seq_len"]) == (1, 1, 8, 8, 8192)
    assert v["gradient_accumulation_steps"] == 128 // (1 * 8)  # global batch / (micro-batch x DP)
    assert v["sharding"] == "zero1"  # --use-distributed-optimizer
    assert "--sequence-parallel" in tokens and "sequence_parallel" not in v  # Megatron turns it off without TP
    assert "--grad-reduce-in-bf16" in tokens and v["grad_dtype"] == "param"
    assert v["tie_word_embeddings"] is False and v["attention"] == "flash_attention_2"  # --attention-backend fused
    # --fp8-format hybrid with the default --fp8-recipe delayed: TE's DelayedScaling, the script's amax history
    assert not any("--fp8-recipe" in t for t in tokens) and "--fp8-amax-history-len 1024" in tokens
    assert (v["dtype"], v["fp8_amax_history_len"]) == ("fp8-te", 1024)
    assert {"--fp8-param-gather", "--cross-entropy-loss-fusion"} <= set(config.unmodelled)
    assert "--fp8-format" not in config.unmodelled
    assert config.sources["gradient_accumulation_steps"].startswith("--global-batch-size")


def test_megatron_gpt3_175b_script_whose_launch_is_smaller_than_its_layout():
    """The example runs TP 8 x PP 16 (128 GPUs) from a one-node torchrun ("Change for multinode config"): the GPUs
    and the micro-batches per step are left to the flags, and both keys are reported."""
    config = read("megatron/train_gpt3_175b_distributed.sh")
    v = config.values
    assert (v["tp"], v["pp"], v["dtype"], v["grad_dtype"]) == (8, 16, "fp16", "param")
    assert "num_gpus" not in v and "gradient_accumulation_steps" not in v
    assert set(config.unresolved) == {"--nnodes", "--global-batch-size"} and not config.unmodelled
    assert "torchrun's 8 GPUs cannot hold the layout (TP x PP x CP 128" in config.unresolved["--nnodes"]
    assert v["tie_word_embeddings"] is True  # no --untie-embeddings-and-output-weights: Megatron ties them


def test_megatron_mixtral_script_pipeline_and_experts():
    """PP 4 x EP 8 with the distributed optimizer; --sequence-parallel without TP is off, as Megatron turns it off
    (arguments.py#L1433); one node of 8 GPUs cannot hold EP 8 over DP 2, so the GPUs are left to the flags."""
    config = read("megatron/train_mixtral_8x7b_distributed.sh")
    tokens = script_flags("megatron/train_mixtral_8x7b_distributed.sh")
    v = config.values
    assert "--sequence-parallel" in tokens and "sequence_parallel" not in v
    assert (v["tp"], v["pp"], v["ep"], v["sharding"], v["grad_dtype"]) == (1, 4, 8, "zero1", "fp32")
    assert "num_gpus" not in v and "--nnodes" in config.unresolved
    assert "--moe-token-dispatcher-type" in config.unmodelled and config.unknown == ()
    assert config.architecture == {"num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                                   "intermediate_size": 14336, "num_experts": 8, "experts_per_token": 2,
                                   "num_key_value_heads": 8}


def test_megatron_argument_file_with_continuations_and_variables(tmp_path):
    path = tmp_path / "args.sh"
    path.write_text('#!/bin/bash\nLAYERS=32\nPP=4\nexport MBS=2\n'
                    'torchrun --nproc_per_node 8 --nnodes ${NODES:-4} pretrain_gpt.py \\\n'
                    '  --tensor-model-parallel-size 2 --pipeline-model-parallel-size $PP \\\n'
                    '  --num-layers ${LAYERS} --num-layers-per-virtual-pipeline-stage 4 \\\n'
                    '  --context-parallel-size 2 --cp-comm-type a2a  # Ulysses\n'
                    '  --micro-batch-size $MBS --global-batch-size 64 --seq-length 16384 --bf16 \\\n'
                    '  --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 \\\n'
                    '  --optimizer adam --save $UNSET_DIR --lr 1e-4\n')
    v = read_config(path).values
    assert (v["tp"], v["pp"], v["cp"], v["cp_kind"]) == (2, 4, 2, "all-to-all")
    assert (v["vpp"], v["pp_schedule"]) == (32 // (4 * 4), "interleaved")
    assert v["num_gpus"] == 8 * 4 and v["gradient_accumulation_steps"] == 64 // (2 * (32 // (2 * 4 * 2)))
    assert (v["dtype"], v["grad_dtype"], v["gradient_checkpointing"]) == ("bf16", "fp32", "full")
    assert v["micro_batch_size"] == 2 and v["seq_len"] == 16384 and v["optimizer"] == "adamw"
    unresolved = tmp_path / "unresolved.sh"
    unresolved.write_text("python pretrain_gpt.py --tensor-model-parallel-size $TP --micro-batch-size 1\n")
    config = read_config(unresolved)
    assert "tp" not in config.values and not config.unmodelled
    assert config.unresolved == {"--tensor-model-parallel-size": "$TP is a variable the file does not assign a "
                                                                 "literal to"}
    block = tmp_path / "block.sh"
    block.write_text("pretrain_gpt.py --tensor-model-parallel-size 1 --recompute-granularity full "
                     "--recompute-method block --recompute-num-layers 3\n")
    v = read_config(block).values
    assert (v["gradient_checkpointing"], v["checkpoint_method"], v["checkpoint_layers"]) == ("full", "block", 3)
    block.write_text("pretrain_gpt.py --tensor-model-parallel-size 1 --recompute-granularity full "
                     "--recompute-method stripes\n")
    refused(block, "--recompute-method", "uniform or block")


def test_an_argument_list_without_megatron_flags_is_refused(tmp_path):
    path = tmp_path / "launch.sh"
    path.write_text("accelerate launch --num_processes 8 train.py --learning_rate 1e-4\n")
    refused(path, "Megatron")
    empty = tmp_path / "notes.txt"
    empty.write_text("no flags here\n")
    refused(empty, "--flags")


def test_torchtitan_llama3_70b():
    config = read("torchtitan/llama3_70b.toml")
    file = tomllib.loads((ROOT / "torchtitan/llama3_70b.toml").read_text())
    assert config.format == config.framework == "torchtitan"
    assert config.model == file["model"]["hf_assets_path"]
    v = config.values
    assert v["tp"] == file["parallelism"]["tensor_parallel_degree"] and v["sequence_parallel"] == "dtensor"
    assert file["parallelism"]["data_parallel_shard_degree"] == -1 and v["sharding"] == "fsdp_full_shard"
    assert "num_gpus" not in v  # -1: every GPU the other dimensions leave, however many there are
    assert v["micro_batch_size"] == file["training"]["local_batch_size"]
    assert v["seq_len"] == file["training"]["seq_len"]
    assert file["activation_checkpoint"]["mode"] == "full" and v["gradient_checkpointing"] == "full"
    assert v["dtype"] == "bf16"  # FSDP2's bf16 param_dtype over fp32 shards: 16 bytes per parameter in all
    assert config.unmodelled == ()


@pytest.mark.parametrize("name", ["llama3_8b.toml", "deepseek_v3_16b.toml"])
def test_torchtitan_selective_checkpointing_is_read(name):
    config = read(f"torchtitan/{name}")
    file = tomllib.loads((ROOT / "torchtitan" / name).read_text())
    assert file["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}
    assert config.values["gradient_checkpointing"] == "op"
    assert not any(key.startswith("activation_checkpoint") for key in config.unmodelled)
    assert config.values.get("ep", 1) == file["parallelism"].get("expert_parallel_degree", 1)
    assert "pp_schedule" not in config.values  # Interleaved1F1B is named, but there is no pipeline (degree 1)


def test_torchtitan_pipeline_micro_batches_gpus_and_precision(tmp_path):
    path = tmp_path / "pp.toml"
    path.write_text('[training]\nlocal_batch_size = 8\nseq_len = 4096\ndtype = "bfloat16"\n'
                    '[parallelism]\ndata_parallel_shard_degree = 2\ntensor_parallel_degree = 4\n'
                    'pipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 2\n'
                    'pipeline_parallel_schedule = "GPipe"\ncontext_parallel_degree = 2\n'
                    'context_parallel_rotate_method = "alltoall"\n[activation_checkpoint]\nmode = "none"\n')
    v = read_config(path).values
    assert v["num_gpus"] == 2 * 4 * 2 * 2 and (v["micro_batch_size"], v["gradient_accumulation_steps"]) == (2, 4)
    assert (v["pp_schedule"], v["cp_kind"], v["dtype"]) == ("gpipe", "all-to-all", "bf16-pure")
    assert v["gradient_checkpointing"] == "off"
    for option, expected in (("3", ("full", "every", 3)), ("0", ("full", "uniform", 1))):
        path.write_text(f'[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "{option}"\n')
        v = read_config(path).values
        assert (v["gradient_checkpointing"], v["checkpoint_method"], v["checkpoint_layers"]) == expected
    path.write_text('[activation_checkpoint]\nselective_ac_option = "every"\n')
    refused(path, "activation_checkpoint.selective_ac_option", "op or a layer interval")
    ddp = tmp_path / "ddp.toml"
    ddp.write_text("[parallelism]\ndata_parallel_replicate_degree = 4\ndata_parallel_shard_degree = 1\n")
    v = read_config(ddp).values
    assert (v["sharding"], v["dtype"], v["num_gpus"]) == ("ddp", "amp-bf16", 4)  # no FSDP: torch.autocast


def test_nemo_speechlm_recipe_yaml():
    config = read("nemo/salm_llama3.2-1b_fc_linear_peft.yaml")
    file = raw("nemo/salm_llama3.2-1b_fc_linear_peft.yaml")
    assert config.format == config.framework == "nemo"
    assert config.model == file["model"]["llm"]["pretrained_model"]
    v = config.values
    assert (v["tp"], v["pp"], v["cp"]) == tuple(file["strategy"][f"{k}_parallel_size"]
                                                for k in ("tensor_model", "pipeline_model", "context"))
    assert v["method"] == "lora" and v["lora_rank"] == file["model"]["peft"]["dim"]
    assert file["plugins"]["precision"] == "bf16-mixed" and v["dtype"] == "bf16" and v["grad_dtype"] == "fp32"
    assert v["micro_batch_size"] == file["data"]["common"]["micro_batch_size"]
    assert v["seq_len"] == file["data"]["common"]["max_seq_length"]
    assert "use_distributed_optimizer" not in file["optim"]["config"] and v["sharding"] == "ddp"
    assert set(config.unmodelled) == {"model.speech_encoder", "model.modality_adapter"}


def test_nemo_run_serialised_recipe(tmp_path):
    """NeMo-Run's YAML of a recipe: the strategy and plugins under trainer, Megatron's DDP and OptimizerConfig."""
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({
        "trainer": {"_target_": "nemo.lightning.pytorch.trainer.Trainer", "devices": 8, "num_nodes": 4,
                    "strategy": {"_target_": "nemo.lightning.pytorch.strategies.megatron_strategy.MegatronStrategy",
                                 "tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 4,
                                 "virtual_pipeline_model_parallel_size": 5, "context_parallel_size": 1,
                                 "sequence_parallel": True, "gradient_as_bucket_view": True,
                                 "ddp": {"grad_reduce_in_fp32": False}},
                    "plugins": {"_target_": "nemo.lightning.MegatronMixedPrecision", "precision": "bf16-mixed"}},
        "optim": {"config": {"optimizer": "adam", "use_distributed_optimizer": True}},
        "data": {"micro_batch_size": 1, "global_batch_size": 128, "seq_length": 8192},
        "model": {"config": {"recompute_granularity": "selective"}}}))
    uniform = tmp_path / "uniform.yaml"
    uniform.write_text(yaml.safe_dump({"trainer": {"strategy": {
        "_target_": "nemo.lightning.pytorch.strategies.megatron_strategy.MegatronStrategy"}}, "model": {"config": {
        "recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 4}}}))
    v = read_config(uniform).values
    assert (v["gradient_checkpointing"], v["checkpoint_method"], v["checkpoint_layers"]) == ("full", "uniform", 4)
    v = read_config(path).values
    assert (v["tp"], v["pp"], v["vpp"], v["pp_schedule"]) == (4, 4, 5, "interleaved")
    assert v["num_gpus"] == 32 and v["gradient_accumulation_steps"] == 128 // (1 * 32 // 16)
    assert (v["sharding"], v["grad_dtype"], v["grad_bucket_view"]) == ("zero1", "param", True)
    assert v["sequence_parallel"] == "megatron" and v["gradient_checkpointing"] == "selective"


def test_hostile_toml_and_argument_lists(tmp_path):
    (tmp_path / "bad.toml").write_text("[parallelism\ntensor_parallel_degree = 2\n")
    refused(tmp_path / "bad.toml", "not valid TOML")
    (tmp_path / "deep.toml").write_text("x = " + "[" * 100 + "]" * 100 + "\n")
    refused(tmp_path / "deep.toml", "nests deeper")
    (tmp_path / "wrong.toml").write_text('[parallelism]\ntensor_parallel_degree = "eight"\n')
    refused(tmp_path / "wrong.toml", "parallelism.tensor_parallel_degree", "an integer")
    (tmp_path / "quote.sh").write_text('echo "unbalanced\n--tensor-model-parallel-size two\n')
    refused(tmp_path / "quote.sh", "--tensor-model-parallel-size", "an integer")
    (tmp_path / "odd.sh").write_text("--micro-batch-size 2 --global-batch-size 3 --nproc_per_node 2\n")
    refused(tmp_path / "odd.sh", "--global-batch-size", "a multiple")


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("-$={}()\\\"' \n#ab12.:")), max_size=200))
def test_argument_lists_parse_or_refuse_with_one_line(text):
    from hfmem.configs import argument_list

    try:
        flags = argument_list.parse(text, "fuzzed.sh")
    except InvalidInputError as err:
        assert "\n" not in str(err)
    else:
        assert flags and all(key.startswith("--") for key in flags)


@pytest.mark.parametrize(("flags", "dtype", "history"), [
    ("--bf16 --fp8-format hybrid", "fp8-te", 1), ("--bf16 --fp8-format e4m3 --fp8-amax-history-len 16", "fp8-te", 16),
    ("--bf16 --fp8-format hybrid --fp8-recipe tensorwise", "fp8-te-current", None),
    ("--bf16 --fp8-format e4m3 --fp8-recipe mxfp8", "mxfp8", None), ("--bf16 --fp4-format e2m1", "nvfp4", None),
    ("--bf16 --fp8-format e4m3 --fp8-recipe blockwise", "bf16", None)])
def test_megatron_fp8_and_fp4_recipes(tmp_path: Path, flags: str, dtype: str, history: int | None) -> None:
    """--fp8-recipe (default delayed) picks TE's recipe (core/fp8_utils.py): delayed with Megatron's default amax
    history of 1, tensorwise current scaling, MXFP8; --fp4-format NVFP4; blockwise is unmodelled and --bf16 stands."""
    path = tmp_path / "args.txt"
    path.write_text(f"--tensor-model-parallel-size 1 --micro-batch-size 1 {flags}\n")
    config = read_config(str(path))
    assert config.format == "megatron" and config.values["dtype"] == dtype
    assert config.values.get("fp8_amax_history_len") == history
    assert ("--fp8-recipe" in config.unmodelled) == (dtype == "bf16")


@pytest.mark.parametrize(("converters", "edit", "dtype", "all_gather"), [
    ('["float8"]', ("enable_fsdp_float8_all_gather = false", "enable_fsdp_float8_all_gather = true"), "fp8-torchao",
     True),
    ('["quantize.linear.float8"]', ("filter_fqns", 'recipe_name = "rowwise"\nfilter_fqns'), "fp8-torchao-rowwise",
     None),
    ('["quantize.linear.mx"]', ("", ""), "bf16", None)])
def test_torchtitan_float8_converter(tmp_path: Path, converters: str, edit: tuple[str, str], dtype: str,
                                     all_gather: bool | None):
    """llama3_8b.toml with its float8 converter on: torchao float8 training (tensorwise unless recipe_name says
    rowwise) with its FSDP float8 all-gather; the MX converter is not modelled and the bf16 dtype stands."""
    text = (ROOT / "torchtitan" / "llama3_8b.toml").read_text()
    text = text.replace('# converters = ["float8"]', f"converters = {converters}")
    if edit[0]:
        text = text.replace(edit[0], edit[1], 1)
    path = tmp_path / "float8.toml"
    path.write_text(text)
    config = read_config(str(path))
    assert config.values["dtype"] == dtype and config.values.get("fp8_all_gather") == all_gather
    assert ("model.converters" in config.unmodelled) == (dtype == "bf16")


@pytest.mark.parametrize(("extra", "dtype", "history"), [
    ({"fp8": "hybrid"}, "fp8-te", 1), ({"fp8": "hybrid", "fp8_amax_history_len": 1024}, "fp8-te", 1024),
    ({"fp8": "e4m3", "fp8_recipe": "tensorwise"}, "fp8-te-current", None),
    ({"fp8": "e4m3", "fp8_recipe": "mxfp8"}, "mxfp8", None), ({"fp4": "e2m1"}, "nvfp4", None),
    ({"fp8": "e4m3", "fp8_recipe": "blockwise"}, "bf16", None)])
def test_nemo_precision_plugin_fp8_and_fp4(tmp_path: Path, extra: dict, dtype: str, history: int | None) -> None:
    """MegatronMixedPrecision's fp8 with fp8_recipe (default delayed, amax history 1) or fp4 names the recipe over
    bf16-mixed; a recipe hfmem does not model is flagged and bf16 stands."""
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({"trainer": {
        "_target_": "nemo.lightning.Trainer",
        "strategy": {"_target_": "nemo.lightning.MegatronStrategy", "tensor_model_parallel_size": 2},
        "plugins": {"_target_": "nemo.lightning.pytorch.plugins.MegatronMixedPrecision", "precision": "bf16-mixed",
                    **extra}}}))
    config = read_config(str(path))
    assert config.format == "nemo" and config.values["dtype"] == dtype
    assert config.values.get("fp8_amax_history_len") == history
    assert bool(config.unmodelled) == (dtype == "bf16")
