"""A DeepSpeed JSON: ZeRO stage, offload, precision, batch sizes and optimizer, with "auto" meaning "not set here".

"auto" is Hugging Face's placeholder: its integration fills it from TrainingArguments, so an "auto" value sets
nothing and the trainer's own key decides. A bf16/fp16 section that is absent behaves the same way (accelerate's
DeepSpeedPlugin.set_mixed_precision adds the section the trainer's flag asks for). The buffer sizes hfmem assumes
(reduce bucket "auto", DeepSpeed's own defaults elsewhere) are known; any other size is listed as unmodelled. ZeRO-3's
residency sizes (max live parameters, max reuse distance, prefetch bucket) are settings of their own.
"""

from __future__ import annotations

from hfmem.configs.draft import Draft

AUTO = "auto"
STAGES = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}
ADAM = {"adam", "adamw", "fusedadam", "cpuadam", "deepspeedcpuadam"}
"""DeepSpeed's Adam family: FusedAdam on the GPU (DeepSpeedCPUAdam with offload), no extra state buffer."""
OFFLOADED = {"cpu", "nvme"}
SWAP_SIZES = {"optimizer_swap_buffers": "zero_optimization.offload_optimizer.buffer_count",
              "sub_group_size": "zero_optimization.sub_group_size",
              "param_swap_buffers": "zero_optimization.offload_param.buffer_count",
              "param_swap_buffer_size": "zero_optimization.offload_param.buffer_size",
              "param_max_in_cpu": "zero_optimization.offload_param.max_in_cpu"}
"""The NVMe swapper's sizes, by the setting each sets (DeepSpeed's defaults are the settings')."""
RESIDENCY = {"max_live_parameters": ("zero_optimization.stage3_max_live_parameters",
                                     "zero_optimization.max_live_parameters"),
             "max_reuse_distance": ("zero_optimization.stage3_max_reuse_distance",
                                    "zero_optimization.max_reuse_distance"),
             "prefetch_bucket_size": ("zero_optimization.stage3_prefetch_bucket_size",
                                      "zero_optimization.prefetch_bucket_size")}
"""ZeRO-3's residency sizes, by the setting each sets, under DeepSpeed's two spellings ("auto" sets nothing)."""

GATHER_ON_SAVE = ("zero_optimization.stage3_gather_16bit_weights_on_model_save",
                  "zero_optimization.gather_16bit_weights_on_model_save",
                  "zero_optimization.stage3_gather_fp16_weights_on_model_save")
"""Where a DeepSpeed JSON says whether ZeRO-3 gathers the 16-bit weights on rank 0 to save the model."""

IGNORED = (
    "gradient_clipping", "steps_per_print", "wall_clock_breakdown", "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer", "scheduler", "optimizer.params", "prescale_gradients", "gradient_predivide_factor",
    "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comet", "comms_logger", "checkpoint", "aio",
    "dump_state", "memory_breakdown", "elasticity", "data_efficiency", "curriculum_learning",
    "communication_data_type", "zero_allow_comm_data_type_fp32", "seq_parallel_communication_data_type",
    "fp16.loss_scale", "fp16.loss_scale_window", "fp16.initial_scale_power", "fp16.hysteresis",
    "fp16.consecutive_hysteresis", "fp16.min_loss_scale", "fp16.auto_cast", "bf16.immediate_grad_update",
    "activation_checkpointing.contiguous_memory_optimization", "activation_checkpointing.number_checkpoints",
    "activation_checkpointing.synchronize_checkpoint_boundary", "activation_checkpointing.profile",
    "zero_optimization.overlap_comm", "zero_optimization.contiguous_gradients", "zero_optimization.reduce_scatter",
    "zero_optimization.allgather_partitions", "zero_optimization.round_robin_gradients",
    "zero_optimization.elastic_checkpoint",
    "zero_optimization.load_from_fp32_weights", "zero_optimization.ignore_unused_parameters",
    "zero_optimization.legacy_stage1", "zero_optimization.use_multi_rank_bucket_allreduce",
    "zero_optimization.memory_efficient_linear", "zero_optimization.offload_optimizer.pin_memory",
    "zero_optimization.offload_optimizer.fast_init", "zero_optimization.offload_optimizer.nvme_path",
    "zero_optimization.offload_param.pin_memory", "zero_optimization.offload_param.nvme_path", "aio",
)
"""Keys that do not change the memory of one GPU (or whose default hfmem's model already is)."""

SIZES = {
    "zero_optimization.reduce_bucket_size": (AUTO,),
    "zero_optimization.stage3_param_persistence_threshold": (AUTO,),
    "zero_optimization.param_persistence_threshold": (AUTO,),
    "zero_optimization.allgather_bucket_size": (5 * 10**8,),
    "zero_optimization.offload_optimizer.ratio": (1, 1.0),
    "zero_optimization.zero_hpz_partition_size": (1,),
    "zero_optimization.mics_shard_size": (-1,),
    "tensor_parallel.autotp_size": (1,),
    "sequence_parallel_size": (1,),
}
"""Buffer and partition sizes, with the values hfmem's model assumes (HF "auto", DeepSpeed's defaults)."""

FEATURES = (
    "zero_optimization.zero_quantized_weights", "zero_optimization.zero_quantized_gradients",
    "zero_optimization.zero_quantized_nontrainable_weights", "zero_optimization.cpu_offload",
    "zero_optimization.cpu_offload_params", "activation_checkpointing.partition_activations",
    "activation_checkpointing.cpu_checkpointing", "amp.enabled", "sparse_attention", "compression_training",
    "pipeline", "fp8", "zero_optimization.offload_optimizer.pipeline",
    "zero_optimization.offload_optimizer.pipeline_read", "zero_optimization.offload_optimizer.pipeline_write",
)
"""Features that change memory (or, as the NVMe swapper's read and write pipelining, the step time) in ways hfmem
has no setting for, listed when turned on."""


def auto_or(d: Draft, path: str, read) -> object:
    """The key's value read by `read`, AUTO for "auto", None when absent."""
    return AUTO if d.raw(path) == AUTO else read(path)


def precision_flag(d: Draft) -> str | None:
    """"bf16", "fp16", None (fp32) or AUTO (the trainer's flag decides) from the bf16/fp16 sections."""
    flags = {}
    for name, paths in (("bf16", ("bf16.enabled", "bfloat16.enabled")), ("fp16", ("fp16.enabled",))):
        for path in paths:
            if d.raw(path) is not None:
                flags[name] = auto_or(d, path, d.boolean)
    if True in flags.values():
        return next(name for name, on in flags.items() if on is True)
    if AUTO in flags.values() or not flags:
        return AUTO
    return None


def read(d: Draft) -> str | None:
    """Map a DeepSpeed config into `d`; return its precision flag ("bf16", "fp16", None, or AUTO)."""
    d.know(*IGNORED)
    stage = d.integer("zero_optimization.stage")
    if stage is not None:
        if stage not in STAGES:
            raise d.fail("zero_optimization.stage", "0, 1, 2 or 3", stage)
        d.set("sharding", STAGES[stage], "zero_optimization.stage")
    gathered_save(d, stage)
    offload_devices(d, "zero_optimization.offload_optimizer.device", "zero_optimization.offload_param.device", stage)
    for field, path in SWAP_SIZES.items():
        size = d.integer(path)
        if size is not None:
            d.set(field, size, path)
    for field, paths in RESIDENCY.items():
        for path in paths:
            value = auto_or(d, path, d.integer)
            if isinstance(value, int):
                d.set(field, value, path)
    micro = auto_or(d, "train_micro_batch_size_per_gpu", d.integer)
    accum = auto_or(d, "gradient_accumulation_steps", d.integer)
    total = auto_or(d, "train_batch_size", d.integer)
    if isinstance(micro, int):
        d.set("micro_batch_size", micro, "train_micro_batch_size_per_gpu")
    if isinstance(accum, int):
        d.set("gradient_accumulation_steps", accum, "gradient_accumulation_steps")
    if (isinstance(micro, int) and isinstance(accum, int) and isinstance(total, int) and min(micro, accum, total) > 0
            and total % (micro * accum) == 0):
        d.set("num_gpus", total // (micro * accum), "train_batch_size")  # DeepSpeed: total = micro x accum x GPUs
    kind = d.text("optimizer.type")
    if kind is not None:
        if kind.strip().lower() not in ADAM:
            d.unmodelled("optimizer.type")
        elif d.boolean("optimizer.params.torch_adam"):
            d.set("optimizer", "adamw_foreach", "optimizer.params.torch_adam")  # torch.optim.AdamW, not FusedAdam
        else:
            d.set("optimizer", "adamw", "optimizer.type")
    for path, harmless in SIZES.items():
        d.unmodelled_unless(path, *harmless)
    d.unmodelled_if_active(*FEATURES)
    return precision_flag(d)


def offload_devices(d: Draft, optimizer_path: str, param_path: str, stage: int | None) -> None:
    """offload_optimizer / offload_params from the two offload devices ("none", "cpu", "nvme"), and offload_device
    from those offloaded: nvme where the optimizer's (else the parameters') device is, under ZeRO-3; a parameter
    device other than the optimizer's is listed as unmodelled (one offload_device holds both). ZeRO-1/2 offload to
    host RAM whatever the device (any but "none" is CPU offload):
    https://github.com/microsoft/DeepSpeed/blob/38327e07f6cd39b63418f60cedd1651b0be3e7c3/deepspeed/runtime/zero/stage_1_and_2.py#L141
    """
    devices = {}
    for field, path in (("offload_optimizer", optimizer_path), ("offload_params", param_path)):
        device = d.text(path)
        if device is not None:
            devices[path] = device.strip().lower()
            d.set(field, devices[path] in OFFLOADED, path)
    used = [(path, device) for path, device in devices.items() if device in OFFLOADED]
    if used:
        d.set("offload_device", "cpu" if stage in (1, 2) else used[0][1], used[0][0])
    if len({device for _, device in used}) > 1:
        d.unmodelled(param_path)


def gathered_save(d: Draft, stage: int | None) -> None:
    """ZeRO-3 saves a 16-bit model state dict on rank 0 only with stage3_gather_16bit_weights_on_model_save (or its
    older spellings) true, or "auto" (a string DeepSpeed reads as true); its default, false, writes per-rank
    shards."""
    d.know(*GATHER_ON_SAVE)
    path = next((p for p in GATHER_ON_SAVE if d.raw(p) is not None), None)
    if path is not None:
        gathers = auto_or(d, path, d.boolean)
        d.set("state_dict_type", "sharded" if gathers is False else "full", path)
    elif stage == 3:
        d.default("state_dict_type", "sharded", GATHER_ON_SAVE[0])


def read_file(d: Draft) -> None:
    """A DeepSpeed JSON given on its own: its precision is set only where the file states it."""
    flag = read(d)
    if flag != AUTO:
        source = "bf16.enabled" if flag == "bf16" else "fp16.enabled"
        d.set("dtype", flag or "fp32", source)
