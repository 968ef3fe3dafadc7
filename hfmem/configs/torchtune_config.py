"""A torchtune recipe YAML (`tune run RECIPE --config FILE`): the model builder and the recipe's memory switches.

The builder's name says the method (`lora_...`, `qlora_...` or a plain model; `quantize_base: True` makes a
LoRA builder QLoRA, with torchao's NF4). torchtune trains in the configured dtype without a master copy
(`dtype: bf16` is bf16-pure), keeps LoRA adapters in that dtype, and attends with torch SDPA
(torchtune/modules/attention.py). Builder defaults (torchtune at bd2a0fc7, models/llama3_1/_model_builders.py):
lora_rank 8, lora_dropout 0, LoRA on neither the MLP nor the output. The recipe's name is not in the file: a
distributed-only key (custom_sharded_layers, fsdp_cpu_offload, fsdp_reshard_after_forward) or a file name with
`distributed` means FSDP full shard, `single_device` one GPU; otherwise sharding is left unset.
"""

from __future__ import annotations

from pathlib import PurePath

from hfmem.configs.draft import Draft, active

ATTENTION_MODULES = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj"}
"""torchtune's attention projections by their Hugging Face (Llama-style) module names."""
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")
"""torchtune's w1, w3, w2."""
CHUNKED_LOSSES = {"CEWithChunkedOutputLoss", "LinearCrossEntropyLoss"}
"""Both split the output projection's cross-entropy into num_output_chunks (8 by default) chunks."""
PLAIN_LOSSES = {"CrossEntropyLoss"}
OPTIMIZERS = {
    "torch.optim.SGD": "sgd", "bitsandbytes.optim.PagedAdamW8bit": "paged_adamw_8bit",
    "bitsandbytes.optim.AdamW8bit": "adamw_8bit", "bitsandbytes.optim.PagedAdamW": "paged_adamw",
    "bitsandbytes.optim.PagedAdamW32bit": "paged_adamw",
}
"""Optimizer components other than torch's AdamW/Adam (fused: adamw, else the foreach adamw_foreach)."""
DISTRIBUTED_KEYS = ("custom_sharded_layers", "fsdp_cpu_offload", "fsdp_reshard_after_forward")
DTYPES = {"bf16": "bf16-pure", "fp32": "fp32"}

IGNORED = (
    "output_dir", "tokenizer", "checkpointer", "resume_from_checkpoint", "save_adapter_weights_only", "dataset",
    "dataset_val", "batch_size_val", "run_val_every_n_steps", "seed", "shuffle", "optimizer.lr",
    "optimizer.weight_decay", "optimizer.betas", "optimizer.eps", "optimizer.amsgrad", "optimizer.momentum",
    "optimizer.fused", "optimizer._component_", "lr_scheduler", "epochs", "max_steps_per_epoch", "clip_grad_norm",
    "metric_logger", "log_every_n_steps", "log_peak_memory_stats", "log_level", "device", "profiler",
    "low_cpu_ram", "model.lora_alpha", "model._component_", "model.lora_attn_modules", "model.apply_lora_to_mlp",
    "model.apply_lora_to_output", "model.lora_rank", "model.lora_dropout", "model.quantize_base",
    "loss._component_", "loss.num_output_chunks", "loss.ignore_index", "save_every_n_epochs",
    "keep_last_n_checkpoints", "collate_fn", "data_parallel_shard_dim", "enable_kv_cache", "dtype", "batch_size",
    "gradient_accumulation_steps", "compile", "optimizer_in_bwd", "enable_activation_checkpointing",
    "enable_activation_offloading", "custom_sharded_layers", "fsdp_cpu_offload", "fsdp_reshard_after_forward",
    "tensor_parallel_plan", "use_distributed_state_dict",
)
"""Recipe keys that do not change training memory, or that are read below."""

UNMODELLED = ("model.use_dora", "quantizer", "teacher_model", "teacher_checkpointer", "kd_loss", "kd_ratio",
              "ref_checkpointer", "ref_policy_checkpointer", "reward_checkpointer", "value_checkpointer",
              "ac_mode", "ac_option", "model.encoder_trainable", "model.fusion_trainable", "memory_efficient_fsdp_wrap")
"""DoRA, QAT, distillation and RL (extra models), selective checkpointing by layer, multimodal parts."""


def read(d: Draft, name: str) -> tuple[str, str | None]:
    """Map a torchtune recipe config into `d` (`name`: the file's name); return the framework and the model named."""
    builder = d.text("model._component_") or ""
    method = method_of(d, builder)
    if method in {"lora", "qlora"}:
        lora(d)
    dtype = d.text("dtype")
    if dtype is not None:
        if dtype.strip().lower() in DTYPES:
            d.set("dtype", DTYPES[dtype.strip().lower()], "dtype")
        else:
            d.unmodelled("dtype")
    d.set("attention", "sdpa", "model._component_")
    for key, field in (("batch_size", "micro_batch_size"),
                       ("gradient_accumulation_steps", "gradient_accumulation_steps")):
        value = d.integer(key)
        if value is not None:
            d.set(field, value, key)
    seq = d.integer("tokenizer.max_seq_len")
    if seq is not None:
        d.set("seq_len", seq, "tokenizer.max_seq_len")
    switches(d)
    loss(d)
    optimizer(d)
    sharding(d, name)
    packed(d)
    d.unmodelled_if_active(*UNMODELLED)
    d.unmodelled_unless("tensor_parallel_dim", 1)
    d.unmodelled_unless("data_parallel_replicate_dim", 1)
    d.know(*IGNORED)
    return "torchtune", d.text("checkpointer.checkpoint_dir") or builder or None


def method_of(d: Draft, builder: str) -> str:
    """full, lora or qlora from the builder's name (qlora_..., lora_..., or quantize_base on a LoRA builder)."""
    leaf = builder.rsplit(".", 1)[-1]
    quantised = leaf.startswith("qlora_") or bool(d.boolean("model.quantize_base"))
    method = "qlora" if quantised else "lora" if leaf.startswith("lora_") else "full"
    d.set("method", method, "model.quantize_base" if d.boolean("model.quantize_base") else "model._component_")
    if method == "qlora":
        d.set("qlora_kernel", "torchao", "model._component_")
    if method != "full":
        d.set("adapter_dtype", "compute", "model._component_")
    return method


def lora(d: Draft) -> None:
    """The LoRA builder's arguments, with its defaults (rank 8, dropout 0) where the file is silent."""
    rank = d.integer("model.lora_rank")
    d.given_or("lora_rank", rank, 8, "model.lora_rank")
    dropout = d.number("model.lora_dropout")
    if dropout is not None:
        d.set("lora_dropout", dropout, "model.lora_dropout")
    targets = []
    for module in d.names("model.lora_attn_modules") or []:
        if module not in ATTENTION_MODULES:
            raise d.fail("model.lora_attn_modules", f"names from {', '.join(ATTENTION_MODULES)}", module)
        targets.append(ATTENTION_MODULES[module])
    if d.boolean("model.apply_lora_to_mlp"):
        targets += MLP_MODULES
    if d.boolean("model.apply_lora_to_output"):
        targets.append("lm_head")
    if targets:
        d.set("lora_targets", tuple(targets), "model.lora_attn_modules")


def switches(d: Draft) -> None:
    """Activation checkpointing and offloading, compile, optimizer in backward."""
    checkpoint = d.boolean("enable_activation_checkpointing")
    if checkpoint is not None:
        d.set("gradient_checkpointing", "full" if checkpoint else "off", "enable_activation_checkpointing")
    offload = d.boolean("enable_activation_offloading")
    if offload is not None:
        d.set("activation_offloading", offload, "enable_activation_offloading")
    compiled = d.raw("compile")
    if isinstance(compiled, dict):  # full_finetune_distributed.py lines 343-355: model and loss default to True
        for part, field in (("model", "compile_layers"), ("loss", "compile_loss")):
            d.given_or(field, d.boolean(f"compile.{part}"), True, f"compile.{part}")
        d.know("compile")
    elif compiled is not None:
        on = d.boolean("compile")
        d.set("compile_layers", bool(on), "compile")
        d.set("compile_loss", bool(on), "compile")
    in_backward = d.boolean("optimizer_in_bwd")
    if in_backward is not None:
        d.set("optimizer_in_backward", in_backward, "optimizer_in_bwd")


def loss(d: Draft) -> None:
    """A chunked cross-entropy sets loss_chunks; another loss (DPO, distillation, ...) is unmodelled."""
    component = d.text("loss._component_")
    if component is None:
        return
    leaf = component.rsplit(".", 1)[-1]
    if leaf in CHUNKED_LOSSES:
        chunks = d.integer("loss.num_output_chunks")
        d.set("loss_chunks", 8 if chunks is None else chunks,
              "loss.num_output_chunks" if chunks is not None else "loss._component_")
    elif leaf in PLAIN_LOSSES:
        d.set("loss_chunks", 1, "loss._component_")
    else:
        d.unmodelled("loss._component_")


def optimizer(d: Draft) -> None:
    """torch's AdamW (fused or foreach), SGD, or a bitsandbytes optimizer; other components are unmodelled."""
    component = d.text("optimizer._component_")
    if component is None:
        return
    if component in {"torch.optim.AdamW", "torch.optim.Adam"}:
        d.set("optimizer", "adamw" if d.boolean("optimizer.fused") else "adamw_foreach", "optimizer._component_")
    elif component == "torch.optim.SGD" and (d.number("optimizer.momentum") or 0) > 0:
        d.set("optimizer", "sgd_momentum", "optimizer.momentum")
    elif component in OPTIMIZERS:
        d.set("optimizer", OPTIMIZERS[component], "optimizer._component_")
    else:
        d.unmodelled("optimizer._component_")


def sharding(d: Draft, name: str) -> None:
    """FSDP full shard (or shard-grad-op without resharding) when the file shows a distributed recipe."""
    layers = d.names("custom_sharded_layers")
    if layers:
        d.set("fsdp_wrap_embeddings", True, "custom_sharded_layers")
    if d.boolean("fsdp_cpu_offload"):
        d.set("offload_params", True, "fsdp_cpu_offload")
        d.set("offload_optimizer", True, "fsdp_cpu_offload")
    reshard = d.boolean("fsdp_reshard_after_forward")
    present = [key for key in DISTRIBUTED_KEYS if d.raw(key) is not None]
    stem = PurePath(name).stem.lower()
    if reshard is False:
        d.set("sharding", "fsdp_shard_grad_op", "fsdp_reshard_after_forward")
    elif present:
        d.set("sharding", "fsdp_full_shard", present[0])
    elif "distributed" in stem:
        d.set("sharding", "fsdp_full_shard", "(file name)")
    elif "single_device" in stem:
        d.set("sharding", "none", "(file name)")


def packed(d: Draft) -> None:
    """Packed datasets (one dataset or a list of them): flex attention over packed documents is unmodelled."""
    data = d.raw("dataset")
    sets = data if isinstance(data, list) else [data]
    if any(isinstance(s, dict) and active(s.get("packed")) for s in sets):
        d.unmodelled("dataset.packed")
