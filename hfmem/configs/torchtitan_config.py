"""A torchtitan train config (TOML), its sections as torchtitan's JobConfig names them.

Field names and defaults are torchtitan/config/job_config.py's at 238fa99, the last commit whose configs were TOML:
data_parallel_shard_degree -1 (FSDP2 over the GPUs the other dimensions leave), training.dtype float32 with
mixed_precision_param bfloat16 (fp32 shards under FSDP's bf16 compute; torch.autocast when nothing is sharded,
L282-L287), pipeline_parallel_microbatch_size 1 (the local batch split into micro-batches when PP is on), context
parallel K/V all-gathered, selective activation checkpointing (every second layer checkpointed whole).
"""

from __future__ import annotations

from hfmem.configs.draft import Draft

SCHEDULES = {"1f1b": "1f1b", "gpipe": "gpipe"}
"""Pipeline schedules hfmem counts; the looped and zero-bubble ones need their stages per rank (not modelled)."""
CP_KINDS = {"allgather": "all-gather", "alltoall": "all-to-all"}
CHECKPOINTING = {"full": "full", "none": "off"}
IGNORED = ("job", "profiling", "metrics", "lr_scheduler", "checkpoint", "comm", "memory_estimation",
           "fault_tolerance", "experimental", "debug", "model.name", "model.flavor", "model.hf_assets_path",
           "model.tokenizer_path", "model.print_after_conversion", "optimizer.lr", "optimizer.eps",
           "optimizer.weight_decay", "optimizer.beta1", "optimizer.beta2", "optimizer.name", "optimizer.implementation",
           "training.dataset", "training.dataset_path", "training.max_norm", "training.steps", "training.gc_freq",
           "training.gc_debug", "training.seed", "training.deterministic", "training.dataloader",
           "training.mixed_precision_reduce", "parallelism.disable_loss_parallel",
           "parallelism.enable_async_tensor_parallel", "parallelism.context_parallel_load_balancer",
           "parallelism.pipeline_parallel_first_stage_less_layers",
           "parallelism.pipeline_parallel_last_stage_less_layers", "parallelism.pipeline_parallel_schedule_csv",
           "parallelism.pipeline_parallel_expert_parallel_overlap", "parallelism.expert_parallel_comm_backend",
           "activation_checkpoint.preserve_rng_state", "activation_checkpoint.determinism_check",
           "activation_checkpoint.debug", "activation_checkpoint.early_stop", "compile.backend",
           "validation.dataset", "validation.dataset_path", "validation.freq", "validation.steps",
           "validation.seq_len", "validation.dataloader", "quantize", "float8")
"""Sections and keys that do not change training memory, or that are read below (quantize and float8 count only
through model.converters)."""


def read(d: Draft) -> tuple[str, str | None]:
    """Map a torchtitan TOML into `d`; return the framework and the model's assets path (its config.json)."""
    d.set("method", "full", "(torchtitan's train.py trains every weight)")
    gpus = parallelism(d)
    training(d, gpus)
    checkpointing(d)
    compiled = d.boolean("compile.enable")
    if compiled is not None:
        parts = d.names("compile.components") or ["model", "loss"]
        d.set("compile_layers", bool(compiled) and "model" in parts, "compile.enable")
        d.set("compile_loss", bool(compiled) and "loss" in parts, "compile.enable")
        d.know("compile.components")
    optimizer(d)
    converters(d)
    if d.boolean("validation.enable"):
        d.set("eval_batch_size", d.integer("validation.local_batch_size") or 8, "validation.local_batch_size")
    d.know("validation.enable", "validation.local_batch_size", *IGNORED)
    return "torchtitan", d.text("model.hf_assets_path")


FLOAT8_CONVERTERS = ("quantize.linear.float8", "float8")
"""The converter that swaps nn.Linear for torchao's Float8Linear: its name at 238fa99
(components/quantization/float8.py L238) and the older one its own llama3_405b.toml still lists."""
FLOAT8_RECIPES = {"tensorwise": "fp8-torchao", "rowwise": "fp8-torchao-rowwise"}
"""Float8Linear.recipe_name (job_config.py L738; None is torchao's default, tensorwise); rowwise_with_gw_hp is not
modelled."""


def converters(d: Draft) -> None:
    """model.converters: torchao float8 training of the linears as an fp8-torchao dtype, with its FSDP float8
    all-gather; MX and the grouped-GEMM converters are not modelled."""
    names = d.names("model.converters") or []
    float8 = [n for n in names if n in FLOAT8_CONVERTERS]
    if float8 and d.values.get("dtype") in {"bf16", "amp-bf16", "bf16-pure"}:
        section = "quantize.linear.float8" if d.raw("quantize.linear.float8") is not None else "float8"
        recipe = (d.text(f"{section}.recipe_name") or "tensorwise").lower()
        if recipe in FLOAT8_RECIPES:
            d.set("dtype", FLOAT8_RECIPES[recipe], "model.converters")
            if recipe == "tensorwise" and d.boolean(f"{section}.enable_fsdp_float8_all_gather"):
                d.set("fp8_all_gather", True, f"{section}.enable_fsdp_float8_all_gather")
        else:
            d.unmodelled(f"{section}.recipe_name")
    if float8 != names or (float8 and d.values.get("dtype") not in FLOAT8_RECIPES.values()):
        d.unmodelled("model.converters")


def parallelism(d: Draft) -> int | None:
    """The degrees, FSDP, DDP or HSDP, the pipeline schedule and CP's rotation; the GPUs when every degree is
    given."""
    degrees = {}
    for key, field in (("tensor_parallel_degree", "tp"), ("pipeline_parallel_degree", "pp"),
                       ("context_parallel_degree", "cp"), ("expert_parallel_degree", "ep")):
        value = d.integer(f"parallelism.{key}")
        if value is not None:
            d.set(field, value, f"parallelism.{key}")
        degrees[field] = value or 1
    replicate = d.integer("parallelism.data_parallel_replicate_degree") or 1
    shard = d.integer("parallelism.data_parallel_shard_degree")
    shard = -1 if shard is None else shard
    never = d.text("parallelism.fsdp_reshard_after_forward") == "never"
    if shard == 1 and degrees["cp"] == 1:
        if replicate > 1:
            d.set("sharding", "ddp", "parallelism.data_parallel_replicate_degree")
    else:
        d.set("sharding", "fsdp_shard_grad_op" if never else "fsdp_full_shard",
              "parallelism.fsdp_reshard_after_forward" if never else "parallelism.data_parallel_shard_degree")
        if replicate > 1:
            d.unmodelled("parallelism.data_parallel_replicate_degree")  # HSDP: states shard over dp_shard only
    expert_tp = d.integer("parallelism.expert_tensor_parallel_degree")
    if expert_tp is not None and degrees["ep"] > 1 and expert_tp != degrees["tp"]:
        d.unmodelled("parallelism.expert_tensor_parallel_degree")
    if degrees["pp"] > 1:
        schedule = (d.text("parallelism.pipeline_parallel_schedule") or "1F1B").strip().lower()
        if schedule in SCHEDULES:
            d.set("pp_schedule", SCHEDULES[schedule], "parallelism.pipeline_parallel_schedule")
        else:
            d.unmodelled("parallelism.pipeline_parallel_schedule")
        if d.raw("parallelism.module_fqns_per_model_part") or d.raw("parallelism.pipeline_parallel_layers_per_stage"):
            d.unmodelled("parallelism.pipeline_parallel_layers_per_stage")
    d.know("parallelism.pipeline_parallel_schedule", "parallelism.module_fqns_per_model_part",
           "parallelism.pipeline_parallel_layers_per_stage", "parallelism.fsdp_reshard_after_forward")
    if degrees["cp"] > 1:
        rotate = d.text("parallelism.context_parallel_rotate_method") or "allgather"
        if rotate not in CP_KINDS:
            raise d.fail("parallelism.context_parallel_rotate_method", "allgather or alltoall", rotate)
        d.set("cp_kind", CP_KINDS[rotate], "parallelism.context_parallel_rotate_method")
    d.know("parallelism.context_parallel_rotate_method")
    if degrees["tp"] > 1:
        d.set("sequence_parallel", "dtensor", "parallelism.tensor_parallel_degree")
    if shard == -1:
        return None
    gpus = replicate * shard * degrees["tp"] * degrees["pp"] * degrees["cp"]
    d.set("num_gpus", gpus, "parallelism (the degrees' product)")
    return gpus


def training(d: Draft, gpus: int | None) -> None:
    """Batch, sequence, precision and offload; with PP, the local batch split into micro-batches."""
    local = d.integer("training.local_batch_size")
    seq = d.integer("training.seq_len")
    if seq is not None:
        d.set("seq_len", seq, "training.seq_len")
    micro = d.integer("parallelism.pipeline_parallel_microbatch_size")
    if d.values.get("pp", 1) > 1:
        micro = micro or 1
        chunks, rest = divmod(local if local is not None else 8, micro)
        if rest or not chunks:
            raise d.fail("parallelism.pipeline_parallel_microbatch_size", "a divisor of training.local_batch_size",
                         micro)
        d.set("micro_batch_size", micro, "parallelism.pipeline_parallel_microbatch_size")
        d.set("gradient_accumulation_steps", chunks, "training.local_batch_size / pipeline_parallel_microbatch_size")
    elif local is not None:
        d.set("micro_batch_size", local, "training.local_batch_size")
    total = d.integer("training.global_batch_size")
    if total is not None and total > 0 and d.values.get("pp", 1) == 1:
        if gpus is None:
            d.unresolved_value("training.global_batch_size", "data_parallel_shard_degree -1 leaves the GPUs, and with "
                               "them the micro-batches per step, to the launch; give them with --grad-accum")
        else:
            dp = gpus // (d.values.get("tp", 1) * d.values.get("cp", 1))
            steps, rest = divmod(total, (local or 8) * dp)
            if rest or not steps:
                raise d.fail("training.global_batch_size", f"a multiple of local_batch_size x DP ({local or 8} x {dp})",
                             total)
            d.set("gradient_accumulation_steps", steps, "training.global_batch_size")
    dtype = (d.text("training.dtype") or "float32").lower()
    param = (d.text("training.mixed_precision_param") or "bfloat16").lower()
    if dtype == "bfloat16":
        d.set("dtype", "bf16-pure", "training.dtype")
    elif param == "float32":
        d.set("dtype", "fp32", "training.mixed_precision_param")
    elif d.values.get("sharding", "fsdp_full_shard").startswith("fsdp"):
        d.set("dtype", "bf16", "training.mixed_precision_param")
    else:
        d.set("dtype", "amp-bf16", "training.mixed_precision_param")
    if d.boolean("training.enable_cpu_offload"):
        d.set("offload_params", True, "training.enable_cpu_offload")
        d.set("offload_optimizer", True, "training.enable_cpu_offload")


def checkpointing(d: Draft) -> None:
    """activation_checkpoint.mode full or none; selective with selective_ac_option a layer interval (every n-th
    layer checkpointed whole, 0 every layer: activation_checkpoint.py:27-49) or op (per-op selective); nothing
    stated leaves the profile's default (selective, every second layer); memory_budget is not modelled."""
    mode = d.text("activation_checkpoint.mode")
    raw = d.raw("activation_checkpoint.selective_ac_option")
    option = None if raw is None else str(raw).strip().lower()
    d.know("activation_checkpoint.memory_budget", "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns",
           "activation_checkpoint.visualize_memory_budget_pareto")
    if mode is None and option is None:
        return
    mode = (mode or "selective").lower()
    source = "activation_checkpoint.mode" if d.raw("activation_checkpoint.mode") else "activation_checkpoint"
    if mode in CHECKPOINTING:
        d.set("gradient_checkpointing", CHECKPOINTING[mode], source)
    elif mode != "selective":
        d.unmodelled("activation_checkpoint.mode")
    elif option == "op":
        d.set("gradient_checkpointing", "op", "activation_checkpoint.selective_ac_option")
    elif option is None or option.isdigit():
        interval = int(option or "2")
        d.set("gradient_checkpointing", "full", "activation_checkpoint.selective_ac_option")
        d.set("checkpoint_method", "every" if interval > 1 else "uniform", "activation_checkpoint.selective_ac_option")
        d.set("checkpoint_layers", max(1, interval), "activation_checkpoint.selective_ac_option")
    else:
        raise d.fail("activation_checkpoint.selective_ac_option", "op or a layer interval", raw)


def optimizer(d: Draft) -> None:
    """AdamW/Adam fused (torchtitan's default) or foreach; another optimizer is not modelled."""
    name = d.text("optimizer.name")
    implementation = (d.text("optimizer.implementation") or "fused").lower()
    if name is not None and name not in {"AdamW", "Adam"}:
        d.unmodelled("optimizer.name")
    elif name is not None or d.raw("optimizer.implementation") is not None:
        d.set("optimizer", "adamw_foreach" if implementation == "foreach" else "adamw",
              "optimizer.implementation" if d.raw("optimizer.implementation") else "optimizer.name")
    if d.boolean("optimizer.early_step_in_backward"):
        d.set("optimizer_in_backward", True, "optimizer.early_step_in_backward")
