"""An accelerate config YAML (`accelerate launch --config_file FILE`): how many GPUs, DDP, FSDP or DeepSpeed, and
mixed precision. It says nothing of the model or the method.

`mixed_precision` is torch autocast; accelerate does not cast the model. Under FSDP and DeepSpeed the trainable
weights are held in fp32 (see trainer_precision.py), so bf16/fp16 there is hfmem's mixed bf16/fp16; with DDP or one GPU
the weights keep the dtype the script loaded, taken as fp32 (the cautious reading): amp-bf16/amp-fp16.
"""

from __future__ import annotations

from hfmem.configs import deepspeed_config, hf
from hfmem.configs.draft import Draft, Linked

PRECISIONS = {"bf16": "bf16", "fp16": "fp16"}
DISTRIBUTED = {"NO": "none", "MULTI_GPU": "ddp"}
"""distributed_type values that are plain data parallelism; FSDP and DEEPSPEED are read from their sections."""

IGNORED = (
    "compute_environment", "debug", "downcast_bf16", "machine_rank", "main_training_function", "num_machines",
    "rdzv_backend", "same_network", "tpu_env", "tpu_use_cluster", "tpu_use_sudo", "tpu_name", "tpu_zone",
    "tpu_vm", "command_file", "commands", "gpu_ids", "main_process_ip", "main_process_port",
    "enable_cpu_affinity", "mpirun_config", "deepspeed_config.deepspeed_multinode_launcher",
    "deepspeed_config.zero3_init_flag", "deepspeed_config.gradient_clipping",
    "deepspeed_config.deepspeed_hostfile", "deepspeed_config.deepspeed_exclusion_filter",
    "deepspeed_config.deepspeed_inclusion_filter", "deepspeed_config.offload_optimizer_nvme_path",
    "deepspeed_config.offload_param_nvme_path", "deepspeed_config.deepspeed_config_file", "num_processes",
    "distributed_type", "mixed_precision", "use_cpu",
)
"""accelerate keys that do not change what one GPU holds (launcher, network and TPU settings), or read below."""

UNMODELLED = ("use_cpu", "dynamo_config.dynamo_backend", "parallelism_config", "megatron_lm_config",
              "deepspeed_config.deepspeed_moe_layer_cls_names")
"""CPU training, torch.compile through dynamo, tensor/context parallelism, Megatron-LM."""
FP8_BACKENDS = {"TE": "fp8-te", "AO": "fp8-torchao"}
"""mixed_precision: fp8 by fp8_config.backend (accelerate utils/dataclasses.py FP8BackendType: TE, AO; the launcher
reads fp8_config's keys as --fp8_* arguments, commands/launch.py): TransformerEngine's DelayedScaling recipe
(TERecipeKwargs, amax_history_len default 1024) or torchao float8."""


def read(d: Draft, linked: Linked | None) -> tuple[str, str | None]:
    """Map an accelerate config into `d`; return the framework (no model: the file does not name one)."""
    d.know(*IGNORED)
    processes = d.integer("num_processes")
    if processes is not None and processes >= 1:
        d.set("num_gpus", processes, "num_processes")
    kind = (d.text("distributed_type") or "NO").strip().upper()
    engine = kind in {"FSDP", "DEEPSPEED"}
    flag: str | None = deepspeed_config.AUTO
    if kind in DISTRIBUTED:
        d.set("sharding", DISTRIBUTED[kind], "distributed_type")
    elif kind == "FSDP":
        if d.integer("fsdp_config.fsdp_version") == 2:  # accelerate's FSDP2 saves SHARDED_STATE_DICT unless told
            d.default("state_dict_type", "sharded", "fsdp_config.fsdp_state_dict_type")
        hf.fsdp_config(d, "fsdp_config")
    elif kind == "DEEPSPEED":
        flag = deepspeed_plugin(d, linked)
    else:
        d.unmodelled("distributed_type")
    if kind != "FSDP":
        d.know("fsdp_config")
    if kind != "DEEPSPEED":
        d.know("deepspeed_config")
    d.unmodelled_if_active(*UNMODELLED)
    d.know("dynamo_config")
    precision(d, engine, flag)
    return "accelerate", None


def deepspeed_plugin(d: Draft, linked: Linked | None) -> str | None:
    """accelerate's DeepSpeed plugin keys, or the DeepSpeed JSON its deepspeed_config_file names."""
    if linked is not None:
        return hf.linked_deepspeed(d, linked)
    stage = d.integer("deepspeed_config.zero_stage")
    if stage is not None:
        if stage not in deepspeed_config.STAGES:
            raise d.fail("deepspeed_config.zero_stage", "0, 1, 2 or 3", stage)
        d.set("sharding", deepspeed_config.STAGES[stage], "deepspeed_config.zero_stage")
    saved = d.boolean("deepspeed_config.zero3_save_16bit_model")
    if saved is not None:
        d.set("state_dict_type", "full" if saved else "sharded", "deepspeed_config.zero3_save_16bit_model")
    elif stage == 3:  # accelerate's plugin default: false
        d.default("state_dict_type", "sharded", "deepspeed_config.zero3_save_16bit_model")
    deepspeed_config.offload_devices(d, "deepspeed_config.offload_optimizer_device",
                                     "deepspeed_config.offload_param_device", stage)
    accum = d.integer("deepspeed_config.gradient_accumulation_steps")
    if accum is not None:
        d.set("gradient_accumulation_steps", accum, "deepspeed_config.gradient_accumulation_steps")
    return deepspeed_config.AUTO


def precision(d: Draft, engine: bool, flag: str | None) -> None:
    """mixed_precision as an hfmem dtype, unless a DeepSpeed JSON states its own bf16/fp16 (`flag` other than
    deepspeed_config.AUTO); "no" leaves it to the script."""
    if flag != deepspeed_config.AUTO:
        d.set("dtype", flag or "fp32", "deepspeed_config.deepspeed_config_file")
        return
    mode = (d.text("mixed_precision") or "no").strip().lower()
    backend = (d.text("fp8_config.backend") or "").strip().upper()
    if mode == "fp8" and backend in FP8_BACKENDS:
        d.set("dtype", FP8_BACKENDS[backend], "fp8_config.backend")
        history = d.integer("fp8_config.amax_history_len")
        if history is not None and backend == "TE":
            d.set("fp8_amax_history_len", history, "fp8_config.amax_history_len")
        if backend == "AO":  # AORecipeKwargs: enable_fsdp_float8_all_gather defaults to True (accelerate 1.16
            # utils/dataclasses.py lines 321-325; the launcher's --fp8_enable_fsdp_float8_all_gather default "true")
            d.given_or("fp8_all_gather", d.boolean("fp8_config.enable_fsdp_float8_all_gather"), True,
                       "fp8_config.enable_fsdp_float8_all_gather")
        d.know("fp8_config")
        return
    d.unmodelled_if_active("fp8_config")
    if mode in PRECISIONS:
        d.set("dtype", PRECISIONS[mode] if engine else f"amp-{mode}", "mixed_precision")
    elif mode != "no":
        d.unmodelled("mixed_precision")
