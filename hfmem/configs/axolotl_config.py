"""An Axolotl YAML (`axolotl train FILE`): adapter, quantisation, precision, batch, attention, FSDP and DeepSpeed keys.

Axolotl loads the model in bf16 when `bf16` (true or auto) or `bfloat16` is set, in fp16 for `fp16`, `float16` or
8-bit loading, else in fp32 (axolotl-ai-cloud/axolotl at 067b021c, src/axolotl/utils/config/__init__.py lines
191-196), and hands `bf16`/`fp16` to the Trainer as autocast flags. Its defaults where the file is silent
(utils/schemas/): sequence_len 512, micro_batch_size 1, gradient_accumulation_steps 1, lora_dropout 0.
"""

from __future__ import annotations

from hfmem.configs import deepspeed_config, hf
from hfmem.configs.draft import Draft, Linked
from hfmem.configs.trainer_args import attention
from hfmem.configs.trainer_precision import trainer_dtype

AXOLOTL_SEQUENCE_LEN = 512
CCE_PLUGIN = "CutCrossEntropyPlugin"
LIGER_PLUGIN = "LigerPlugin"
ATTENTION_SWITCHES = {"flash_attention": "flash_attention_2", "sdp_attention": "sdpa", "eager_attention": "eager"}

IGNORED = (
    "base_model", "base_model_config", "model_type", "tokenizer_type", "tokenizer_config", "tokenizer_use_fast",
    "tokenizer_legacy", "trust_remote_code", "datasets", "pretraining_dataset",
    "dataset_prepared_path", "dataset_processes", "dataset_exact_deduplication", "shuffle_merged_datasets",
    "push_dataset_to_hub", "skip_prepare_dataset", "output_dir", "hub_model_id", "hub_strategy",
    "wandb_project", "wandb_entity", "wandb_watch", "wandb_name", "wandb_log_model", "wandb_run_id", "use_wandb",
    "mlflow_tracking_uri", "mlflow_experiment_name", "trackio_project_name", "trackio_run_name", "trackio_space_id",
    "comet_project_name", "num_epochs", "max_steps", "lr_scheduler", "lr_scheduler_kwargs", "learning_rate",
    "warmup_ratio", "warmup_steps", "cosine_min_lr_ratio", "lr_quadratic_warmup", "weight_decay", "adam_beta1",
    "adam_beta2", "adam_epsilon", "max_grad_norm", "evals_per_epoch", "eval_steps", "saves_per_epoch", "save_steps",
    "save_strategy", "save_total_limit", "save_first_step", "save_safetensors", "eval_table_size",
    "eval_max_new_tokens", "eval_sample_packing", "batch_size", "logging_steps",
    "resume_from_checkpoint", "auto_resume_from_checkpoints", "early_stopping_patience", "special_tokens", "tokens",
    "eot_tokens", "chat_template", "default_system_message", "train_on_inputs", "group_by_length", "seed", "strict",
    "debug", "local_rank", "tf32", "gradient_checkpointing_kwargs", "torch_compile_backend", "torch_compile_mode",
    "ddp_timeout", "ddp_bucket_cap_mb", "ddp_broadcast_buffers", "dataloader_pin_memory", "dataloader_num_workers",
    "dataloader_prefetch_factor", "dataloader_drop_last", "remove_unused_columns", "is_llama_derived_model",
    "is_mistral_derived_model", "is_falcon_derived_model", "is_qwen_derived_model", "hf_use_auth_token",
    "experimental_skip_move_to_device", "low_cpu_mem_usage", "lora_model_dir", "lora_alpha", "lora_fan_in_fan_out",
    "peft_use_rslora", "peft_init_lora_weights", "loraplus_lr_ratio", "loraplus_lr_embedding", "merge_lora",
    "peft_use_dora",
    "pad_to_sequence_len", "noisy_embedding_alpha", "neftune_noise_alpha", "fsdp_version", "adapter", "load_in_4bit",
    "bnb_config_kwargs", "sequence_len", "micro_batch_size", "lora_target_linear", "bf16", "fp16", "bfloat16",
    "float16", "load_in_8bit",
)
"""Axolotl keys that do not change training memory, or that are read below."""

UNMODELLED = (
    "sample_packing", "max_packed_sequence_len", "lora_target_parameters",
    "peft_layers_to_transform", "peft_trainable_token_indices", "lora_rank_pattern", "gptq", "relora", "lora_on_cpu",
    "unfrozen_parameters", "liger_cross_entropy", "liger_rms_norm", "liger_glu_activation", "liger_rope",
    "liger_layer_norm", "flash_attn_cross_entropy", "flash_attn_rms_norm",
    "flash_attn_fuse_qkv", "flash_attn_fuse_mlp", "xformers_attention", "flex_attention", "s2_attention",
    "model_quantization_config", "model_quantization_config_kwargs", "use_kernels",
    "auto_find_batch_size", "rl", "sequence_parallel_degree", "context_parallel_size", "tensor_parallel_size",
    "qat", "lora_qkv_kernel", "lora_o_kernel", "lora_mlp_kernel", "flex_attn_compile_kwargs",
    "use_sonicmoe", "nvfp4_merge_aware",
)
"""Packing, extra trained modules, DoRA, partial freezing, Liger's kernels other than its fused loss, fused kernels,
other attention kernels, other quantisation, RL trainers and model parallelism: hfmem has no setting for them."""


def read(d: Draft, linked: Linked | None) -> tuple[str, str | None]:
    """Map an Axolotl config into `d`; return the framework and the model named."""
    d.know(*IGNORED)
    method = method_of(d)
    if method in {"lora", "qlora", "dora"}:
        lora(d)
    seq = d.integer("sequence_len")
    if seq is None:
        d.default("seq_len", AXOLOTL_SEQUENCE_LEN, "sequence_len")
    else:
        d.set("seq_len", seq, "sequence_len")
    for key, field in (("micro_batch_size", "micro_batch_size"),
                       ("gradient_accumulation_steps", "gradient_accumulation_steps")):
        value = d.integer(key)
        if value is not None:
            d.set(field, value, key)
    evaluation(d)
    hf.optimizer(d, "optimizer")
    checkpointing(d)
    attention_of(d)
    compile_ = d.raw("torch_compile")
    if compile_ is True or compile_ == "auto":
        d.set("compile_layers", True, "torch_compile")
        d.set("compile_loss", True, "torch_compile")
    d.know("torch_compile")
    if d.boolean("llama4_linearized_experts"):  # its Llama 4 loader splits the experts into per-expert Linears
        d.set("expert_lora", "per-expert", "llama4_linearized_experts")
    d.know("llama4_linearized_experts")
    loss_plugins(d)
    d.unmodelled_if_active(*UNMODELLED)
    engine, flag = parallelism(d, linked)
    precision(d, method, engine, flag)
    return "axolotl", d.text("base_model")


def loss_plugins(d: Draft) -> None:
    """The CutCrossEntropyPlugin (its cut_cross_entropy defaults to true, integrations/cut_cross_entropy/args.py#L33
    at 067b021) or the LigerPlugin with liger_fused_linear_cross_entropy fuse the head and the loss; any other
    plugin is unmodelled."""
    names = {name.rsplit(".", 1)[-1] for name in d.names("plugins") or ()}
    if CCE_PLUGIN in names and d.boolean("cut_cross_entropy") is not False:
        d.set("fused_loss", "cce", f"plugins ({CCE_PLUGIN})")
    elif LIGER_PLUGIN in names and d.boolean("liger_fused_linear_cross_entropy"):
        d.set("fused_loss", "liger", "liger_fused_linear_cross_entropy")
    d.know("cut_cross_entropy", "liger_fused_linear_cross_entropy", "plugins")
    if names - {CCE_PLUGIN, LIGER_PLUGIN}:
        d.unmodelled("plugins")


def evaluation(d: Draft) -> None:
    """A validation split (val_set_size above 0, or test_datasets) is evaluated between steps unless eval_strategy
    is "no", at eval_batch_size, which defaults to micro_batch_size (axolotl's utils/config/__init__.py)."""
    d.know("val_set_size", "test_datasets", "eval_strategy", "eval_batch_size")
    held_out = (d.number("val_set_size") or 0) > 0 or bool(d.raw("test_datasets"))
    if not held_out or (d.text("eval_strategy") or "").strip().lower() == "no":
        return
    size = d.integer("eval_batch_size")
    if size is not None:
        d.set("eval_batch_size", size, "eval_batch_size")
    else:
        d.default("eval_batch_size", d.integer("micro_batch_size") or 1, "eval_batch_size (micro_batch_size)")


def method_of(d: Draft) -> str:
    """adapter lora/qlora (4-bit loading makes it QLoRA; 8-bit loading a LoRA on an LLM.int8 base), or full."""
    adapter = (d.text("adapter") or "").strip().lower()
    four, eight = d.boolean("load_in_4bit"), d.boolean("load_in_8bit")
    if adapter not in {"", "lora", "qlora"}:
        d.unmodelled("adapter")
    if eight and adapter == "lora":
        d.set("base_quantization", "int8", "load_in_8bit")
    elif eight:
        d.unmodelled("load_in_8bit")
    if adapter == "qlora" or (adapter == "lora" and four):
        method = "qlora"
    elif adapter == "lora":
        method = "lora"
    else:
        method = "full"
    if method != "full" and d.boolean("peft_use_dora"):  # axolotl passes use_dora to PEFT's LoraConfig
        if method == "qlora":
            d.set("base_quantization", "nf4", "adapter")
        d.set("method", "dora", "peft_use_dora")
        return "dora"
    d.set("method", method, "adapter" + ("" if adapter else " (not set)"))
    return method


def lora(d: Draft) -> None:
    """lora_r, lora_dropout, and the targets: lora_target_linear (all linear layers) or lora_target_modules."""
    rank = d.integer("lora_r")
    if rank is not None:
        d.set("lora_rank", rank, "lora_r")
    dropout = d.number("lora_dropout")
    if dropout is not None:
        d.set("lora_dropout", dropout, "lora_dropout")
    if d.boolean("lora_target_linear"):
        d.set("lora_targets", ("all-linear",), "lora_target_linear")
    else:
        targets = d.names("lora_target_modules")
        if targets:
            d.set("lora_targets", tuple(targets), "lora_target_modules")
    d.know("lora_target_modules")
    saved = d.names("lora_modules_to_save")
    if saved:
        d.set("modules_to_save", tuple(saved), "lora_modules_to_save")
    d.know("lora_modules_to_save")
    if d.boolean("peft_autocast_adapter_dtype") is False:
        d.set("adapter_dtype", "compute", "peft_autocast_adapter_dtype")
    # peft.loftq_config (LoftQ): axolotl passes init_lora_weights "loftq" (src/axolotl/loaders/adapter.py#L142-L145 at
    # 067b021c) and PEFT replaces each adapted base weight in place by its dequantised loftq_bits approximation, in
    # the base's dtype (peft/tuners/lora/layer.py loftq_init: `self.get_base_layer().weight.data = qweight`): the
    # initialisation changes, the memory is LoRA's on a 16-bit base
    d.know("peft.loftq_config")


def checkpointing(d: Draft) -> None:
    """gradient_checkpointing true/false, or offload/offload_disk (checkpoints off the GPU: unmodelled)."""
    value = d.raw("gradient_checkpointing")
    if isinstance(value, bool):
        d.set("gradient_checkpointing", "full" if value else "off", "gradient_checkpointing")
    elif value is not None:
        d.set("gradient_checkpointing", "full", "gradient_checkpointing")
        d.unmodelled("gradient_checkpointing")
    offload = d.raw("activation_offloading")
    if offload is True:
        d.set("activation_offloading", True, "activation_offloading")
    elif active_mode(offload):
        d.unmodelled("activation_offloading")


def active_mode(value: object) -> bool:
    """A mode string (legacy, disk, hidden_states) rather than true/false/absent."""
    return isinstance(value, str) and value.strip().lower() not in {"", "false", "none"}


def attention_of(d: Draft) -> None:
    """attn_implementation, or the older flash_attention / sdp_attention / eager_attention switches."""
    for key, kernel in ATTENTION_SWITCHES.items():
        if d.boolean(key):
            d.set("attention", kernel, key)
    attention(d, "attn_implementation")


def parallelism(d: Draft, linked: Linked | None) -> tuple[bool, str | None]:
    """FSDP (the `fsdp` list, or an fsdp_config of its own as in FSDP2 configs) or DeepSpeed: whether either runs,
    and the DeepSpeed config's precision flag (deepspeed_config.AUTO when it leaves it to the Trainer)."""
    fsdp = hf.fsdp_options(d, "fsdp") or bool(d.mapping("fsdp_config"))
    if fsdp:
        hf.fsdp_config(d, "fsdp_config")
    if d.raw("deepspeed") is None:
        d.know("deepspeed")  # present and empty in older examples: no DeepSpeed
    if linked is None:
        return fsdp, deepspeed_config.AUTO
    d.know("deepspeed")
    return True, hf.linked_deepspeed(d, linked)


def precision(d: Draft, method: str, engine: bool, flag: str | None) -> None:
    """The dtype from Axolotl's load dtype rule and the Trainer's autocast flags (trainer_precision.py); fp8: true on
    a full fine-tune is torchao's tensorwise float8 (core/trainers/base.py lines 682-699: AORecipeKwargs over a
    default Float8LinearConfig)."""
    d.know("fp8", "fp8_enable_fsdp_float8_all_gather")
    if d.boolean("fp8"):
        if method == "full":
            d.set("dtype", "fp8-torchao", "fp8")
            if d.boolean("fp8_enable_fsdp_float8_all_gather"):  # Float8LinearConfig(enable_fsdp_float8_all_gather=)
                d.set("fp8_all_gather", True, "fp8_enable_fsdp_float8_all_gather")
            return
        d.unmodelled("fp8")
    bf16 = d.raw("bf16")
    bf16_on = bf16 is True or (isinstance(bf16, str) and bf16.strip().lower() in {"auto", "true"})
    if bf16 is not None and not isinstance(bf16, bool) and not bf16_on:
        raise d.fail("bf16", "true, false or auto", bf16)
    fp16 = bool(d.boolean("fp16")) and not bf16_on
    sixteen = bf16_on or bool(d.boolean("bfloat16")) or fp16 or bool(d.boolean("float16")) or bool(
        d.boolean("load_in_8bit"))
    autocast = ("bf16" if bf16_on else "fp16" if fp16 else None) if flag == deepspeed_config.AUTO else flag
    source = "bf16" if "bf16" in d.data else "fp16" if "fp16" in d.data else "bf16 (not set)"
    d.set("dtype", trainer_dtype(method, autocast, "16" if sixteen else "fp32", engine), source)
