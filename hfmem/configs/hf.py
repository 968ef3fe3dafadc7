"""What Hugging Face Trainer based configs share: TrainingArguments keys, FSDP options, optimizer names, DeepSpeed.

trainer-args files and LLaMA-Factory write TrainingArguments keys as they are; Axolotl and accelerate write the
same FSDP options (`fsdp_config`, with or without the `fsdp_` prefix). `training_arguments` maps the keys every
Trainer run has and returns the facts its precision follows from (trainer_precision.py); each format adds what the
weights' dtype is in that framework.
"""

from __future__ import annotations

from dataclasses import fields
from typing import NamedTuple, cast

from hfmem.configs import deepspeed_config
from hfmem.configs.draft import Draft, Linked
from hfmem.memory.fields import Choice, setting_of
from hfmem.memory.settings import TrainingSettings

HF_BATCH_SIZE = 8
"""TrainingArguments.per_device_train_batch_size's default (transformers 5.24 training_args.py); the same for
per_device_eval_batch_size."""


TRAINING_IGNORED = (
    "output_dir", "overwrite_output_dir", "do_train", "do_eval", "do_predict",
    "eval_steps", "eval_delay", "eval_on_start", "eval_accumulation_steps",
    "prediction_loss_only", "eval_do_concat_batches", "eval_use_gather_object", "batch_eval_metrics",
    "include_for_metrics", "include_inputs_for_metrics", "bf16_full_eval", "fp16_full_eval", "predict_with_generate",
    "generation_max_length", "generation_num_beams", "generation_config", "sortish_sampler", "num_train_epochs",
    "max_steps", "learning_rate", "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_steps", "warmup_ratio",
    "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "optim_target_modules", "max_grad_norm", "tf32",
    "gradient_checkpointing_kwargs", "logging_strategy", "logging_steps", "logging_first_step", "logging_dir",
    "logging_nan_inf_filter", "log_on_each_node", "log_level", "log_level_replica", "disable_tqdm", "report_to",
    "run_name", "project", "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id", "save_strategy",
    "save_steps", "save_total_limit", "save_only_model", "save_on_each_node", "save_safetensors",
    "enable_jit_checkpoint", "push_to_hub", "hub_token", "hub_private_repo", "hub_model_id", "hub_strategy",
    "hub_always_push", "hub_revision", "load_best_model_at_end", "metric_for_best_model", "greater_is_better",
    "ignore_data_skip", "restore_callback_states_from_checkpoint", "full_determinism", "seed", "data_seed",
    "accelerator_config", "dataloader_drop_last", "dataloader_num_workers", "dataloader_pin_memory",
    "dataloader_persistent_workers", "dataloader_prefetch_factor", "dataloader_multiprocessing_context",
    "dataloader_in_order", "remove_unused_columns", "label_names", "train_sampling_strategy", "group_by_length",
    "length_column_name", "ddp_find_unused_parameters", "ddp_bucket_cap_mb", "ddp_broadcast_buffers",
    "ddp_static_graph", "ddp_backend", "ddp_timeout", "debug", "skip_memory_metrics", "resume_from_checkpoint",
    "local_rank", "average_tokens_across_devices", "torch_empty_cache_steps", "use_cache", "neftune_noise_alpha",
    "torch_compile_backend", "torch_compile_mode", "include_num_input_tokens_seen",
    "include_tokens_per_second", "past_index", "half_precision_backend", "fp16_opt_level", "fp16_backend",
    "split_batches", "dispatch_batches", "jit_mode_eval", "use_ipex", "ray_scope", "mp_parameters",
    "push_to_hub_model_id", "push_to_hub_organization", "push_to_hub_token", "use_legacy_prediction_loop",
)
"""TrainingArguments keys (transformers 5.24, and older spellings) that do not change training memory on one GPU."""

TRAINING_UNMODELLED = ("use_liger_kernel", "use_cpu", "parallelism_config",
                       "auto_find_batch_size", "activation_checkpointing_kwargs.offload")
"""Keys that change memory in ways hfmem has no setting for (GaLore, ...), when turned on; use_liger_kernel also
swaps RMSNorm, SwiGLU and RoPE for Liger's kernels, which hfmem does not model (its fused loss it does)."""

FSDP_SHARDING = {"full_shard": "fsdp_full_shard", "1": "fsdp_full_shard", "shard_grad_op": "fsdp_shard_grad_op",
                 "2": "fsdp_shard_grad_op", "no_shard": "ddp", "3": "ddp"}
"""FSDP sharding strategies as TrainingArguments, accelerate (names or their enum numbers) and Axolotl write them;
HYBRID_SHARD (4) and _HYBRID_SHARD_ZERO2 (5) shard within a node only: unmodelled."""
FSDP_CONFIG_IGNORED = ("transformer_layer_cls_to_wrap", "backward_prefetch", "forward_prefetch",
                       "cpu_ram_efficient_loading", "sync_module_states", "use_orig_params",
                       "limit_all_gathers", "version", "xla", "xla_fsdp_settings", "xla_fsdp_grad_ckpt",
                       "cpu_offload_pin_memory", "activation_cpu_offload")
"""FSDP options that do not change what one GPU holds (prefetch is in hfmem's two gathered layers)."""


class Run(NamedTuple):
    """What a Trainer run's precision follows from: the autocast flag and whether DeepSpeed or FSDP runs it."""

    autocast: str | None
    engine: bool
    zero3: bool


def choice(d: Draft, path: str, field: str) -> None:
    """A value of a choice setting, in any spelling its own check accepts (aliases included); anything else is
    unmodelled."""
    name = d.text(path)
    if name is None:
        return
    check = setting_of(next(f for f in fields(TrainingSettings) if f.name == field)).check
    known = cast(Choice, getattr(check, "inner", check)).table.get(name.strip().lower())
    if known is None:
        d.unmodelled(path)
    else:
        d.set(field, known, path)


def optimizer(d: Draft, path: str) -> None:
    """An optimizer name hfmem knows (transformers' `optim` spellings included); anything else is unmodelled.
    GaLore/APOLLO read their rank and update_proj_gap from `optim_args` ("rank=128, update_proj_gap=200",
    transformers' Trainer defaults 128 and 200); optim_target_modules is taken as every decoder linear layer."""
    choice(d, path, "optimizer")
    d.know("optim_args", "optim_target_modules")
    text = d.text("optim_args")
    if not text:
        return
    pairs = dict(part.split("=", 1) for part in text.replace(" ", "").split(",") if "=" in part)
    for key, field in (("rank", "galore_rank"), ("update_proj_gap", "galore_update_proj_gap")):
        if key in pairs:
            if not pairs[key].isdigit():
                raise d.fail("optim_args", f"an integer {key}", pairs[key])
            d.set(field, int(pairs[key]), f"optim_args.{key}")


def fsdp_config(d: Draft, path: str) -> None:
    """The options of an FSDP config mapping (accelerate's fsdp_config, TrainingArguments', Axolotl's); FSDP's own
    default, full shard, where they name no strategy."""
    d.default("sharding", "fsdp_full_shard", f"{path}.fsdp_sharding_strategy")
    if isinstance(d.raw(path), str):
        d.unmodelled(path)  # TrainingArguments' path to a JSON of FSDP options: not followed
        return
    options = d.mapping(path) or {}
    for key in options:
        name = str(key).removeprefix("fsdp_")
        at = f"{path}.{key}"
        if name in FSDP_CONFIG_IGNORED:
            d.know(at)
        elif name == "sharding_strategy":
            strategy = str(d.raw(at)).strip().lower()
            if strategy in FSDP_SHARDING:
                d.set("sharding", FSDP_SHARDING[strategy], at)
            else:
                d.unmodelled(at)
        elif name == "reshard_after_forward":
            d.set("sharding", "fsdp_full_shard" if d.boolean(at) else "fsdp_shard_grad_op", at)
        elif name == "offload_params":
            offload(d, bool(d.boolean(at)), at)
        elif name == "state_dict_type":
            choice(d, at, "state_dict_type")
        elif name == "activation_checkpointing":
            d.set("gradient_checkpointing", "full" if d.boolean(at) else "off", at)
        elif name == "auto_wrap_policy":
            d.unmodelled_unless(at, "TRANSFORMER_BASED_WRAP", "transformer_based_wrap")
        elif name == "min_num_params":
            d.unmodelled_unless(at, 0)


def offload(d: Draft, on: bool, path: str) -> None:
    """FSDP CPU offload: parameters, gradients and the optimizer step all on the CPU."""
    d.set("offload_params", on, path)
    d.set("offload_optimizer", on, path)


def fsdp_options(d: Draft, path: str) -> bool:
    """TrainingArguments' `fsdp` ("full_shard auto_wrap", a list, or true); whether FSDP is on."""
    value = d.raw(path)
    if isinstance(value, bool):
        if value:
            d.set("sharding", "fsdp_full_shard", path)
        return value
    options = d.names(path) or []
    for option in options:
        option = option.lower()
        if option in FSDP_SHARDING:
            d.set("sharding", FSDP_SHARDING[option], path)
        elif option == "offload":
            offload(d, True, path)
        elif option != "auto_wrap":
            d.unmodelled(path)
    return bool(options)


def linked_deepspeed(d: Draft, linked: Linked) -> str | None:
    """Read the DeepSpeed config a file names (or holds inline) into `d`; its precision flag (deepspeed_config.AUTO
    too)."""
    child = Draft(linked.data, d.label, prefix=linked.prefix)
    flag = deepspeed_config.read(child)
    d.absorb(child)
    return flag


def evaluation(d: Draft) -> None:
    """eval_strategy (or evaluation_strategy) other than "no" evaluates between steps at per_device_eval_batch_size."""
    d.know("eval_strategy", "evaluation_strategy", "per_device_eval_batch_size")
    strategy = next((d.text(key) for key in ("eval_strategy", "evaluation_strategy") if d.raw(key) is not None), None)
    if strategy is None or strategy.strip().lower() == "no":
        return
    size = d.integer("per_device_eval_batch_size")
    if size is None:
        d.default("eval_batch_size", HF_BATCH_SIZE, "per_device_eval_batch_size")
    else:
        d.set("eval_batch_size", size, "per_device_eval_batch_size")


def training_arguments(d: Draft, linked: Linked | None, bf16_default: bool = False) -> Run:
    """The TrainingArguments keys of a Trainer run; `linked` is the DeepSpeed config its `deepspeed` key names.

    `bf16_default`: bf16 is on unless the file says otherwise or asks for fp16 (TRL's configs).
    """
    d.know(*TRAINING_IGNORED)
    batch = d.integer("per_device_train_batch_size")
    if batch is None:
        d.default("micro_batch_size", HF_BATCH_SIZE, "per_device_train_batch_size")
    else:
        d.set("micro_batch_size", batch, "per_device_train_batch_size")
    evaluation(d)
    accum = d.integer("gradient_accumulation_steps")
    if accum is not None:
        d.set("gradient_accumulation_steps", accum, "gradient_accumulation_steps")
    optimizer(d, "optim")
    sync = "accelerator_config.gradient_accumulation_kwargs.sync_each_batch"
    if (each := d.boolean(sync)) is not None:
        d.set("sync_each_batch", each, sync)
    for key in ("gradient_checkpointing", "activation_checkpointing"):
        on = d.boolean(key)
        if on is not None:
            d.set("gradient_checkpointing", "full" if on else "off", key)
    d.unmodelled_unless("activation_checkpointing_kwargs.every_n_layers", 1)
    d.know("activation_checkpointing_kwargs")
    if d.boolean("torch_compile"):
        d.set("compile_layers", True, "torch_compile")  # the whole model, its loss inside forward included
        d.set("compile_loss", True, "torch_compile")
    d.unmodelled_unless("label_smoothing_factor", 0, 0.0)  # HF's LabelSmoother keeps another fp32 log-softmax
    liger(d)
    d.unmodelled_if_active(*TRAINING_UNMODELLED)
    bf16, fp16 = d.boolean("bf16"), d.boolean("fp16")
    if bf16 is None:
        bf16 = bf16_default and not fp16
    autocast = "bf16" if bf16 else "fp16" if fp16 else None
    engine = fsdp_options(d, "fsdp")
    if engine:
        fsdp_config(d, "fsdp_config")
    else:
        d.know("fsdp_config")  # FSDP options without FSDP on: unused
    zero3 = False
    if linked is not None:
        d.know("deepspeed")
        flag = linked_deepspeed(d, linked)
        if flag != deepspeed_config.AUTO:
            autocast = flag
        engine = True
        zero3 = d.values.get("sharding") == "zero3"
    return Run(autocast, engine, zero3)


def liger(d: Draft) -> None:
    """use_liger_kernel: the Trainer applies Liger to the model, with its fused linear cross-entropy on
    (fused_linear_cross_entropy=True in every apply_liger_kernel_to_*, e.g. liger_kernel/transformers/
    monkey_patch.py#L220 at v0.6.3) unless liger_kernel_config turns it off."""
    d.know("liger_kernel_config")
    if not d.boolean("use_liger_kernel"):
        return
    config = d.mapping("liger_kernel_config") or {}
    if config.get("fused_linear_cross_entropy", True) is not False:
        d.set("fused_loss", "liger", "use_liger_kernel")
