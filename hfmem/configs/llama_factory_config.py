"""A LLaMA-Factory YAML (`llamafactory-cli train FILE`): its model, method and data keys over TrainingArguments.

LLaMA-Factory's defaults apply where the file is silent (hiyouga/LLaMA-Factory at ff6d4d12, src/llamafactory/
hparams/): finetuning_type lora, lora_rank 8, lora_target all, cutoff_len 2048, gradient checkpointing on
(model_args.py disable_gradient_checkpointing=False), flash_attn auto (transformers' own choice, SDPA),
double_quantization on. It loads the model in the compute dtype (bf16 with `bf16: true`) and casts trainable
parameters to fp32 unless pure_bf16 or BAdam is on, or DeepSpeed ZeRO-3 runs an unquantised model
(model/adapter.py lines 336-350; PEFT's autocast_adapter_dtype follows the same switch, line 281).
"""

from __future__ import annotations

from hfmem.configs.draft import Draft, Linked
from hfmem.configs.hf import Run, training_arguments
from hfmem.configs.trainer_precision import trainer_dtype

METHODS = {"lora": "lora", "full": "full", "oft": "oft"}  # use_dora turns lora into dora
"""finetuning_type values hfmem models; freeze (the last layers only) has no hfmem method."""
FLASH_ATTN = {"auto": "sdpa", "sdpa": "sdpa", "disabled": "eager", "fa2": "flash_attention_2",
              "fa3": "flash_attention_2"}
"""flash_attn -> attention; auto leaves transformers to choose, which is SDPA (model_utils/attention.py)."""
FP8_BACKENDS = {"te": "fp8-te", "torchao": "fp8-torchao-rowwise", "auto": "fp8-torchao-rowwise"}
"""fp8: true by fp8_backend (hparams/training_args.py Fp8Arguments, default auto): train/fp8_utils.py gives te
TransformerEngine's HYBRID delayed scaling with amax_history_len 16 (line 50) and auto or torchao torchao's
Float8LinearConfig.from_recipe_name("rowwise") (line 60); msamp is not modelled."""
FP8_TE_AMAX_HISTORY = 16
STAGES = ("sft", "pt")
"""Stages with one model and one forward per batch; rm, ppo, dpo and kto add models or passes."""

IGNORED = (
    "model_name_or_path", "trust_remote_code", "template", "dataset", "eval_dataset", "dataset_dir", "media_dir",
    "max_samples", "overwrite_cache", "preprocessing_num_workers", "tokenized_path", "val_size", "plot_loss",
    "lora_alpha", "use_rslora", "pissa_init", "pissa_iter", "pissa_convert", "create_new_adapter", "loraplus_lr_ratio",
    "loraplus_lr_embedding", "adapter_name_or_path", "cache_dir", "model_revision", "hf_hub_token",
    "use_fast_tokenizer",
    "split_special_tokens", "new_special_tokens", "resize_vocab", "quantization_type", "streaming", "buffer_size",
    "mix_strategy", "interleave_probs", "ignore_pad_token_for_loss", "train_on_prompt", "mask_history",
    "default_system", "enable_thinking", "tool_format", "export_dir", "export_size", "export_device",
    "infer_backend", "infer_dtype", "do_sample", "temperature", "top_p", "top_k", "max_new_tokens", "ddp_timeout",
    "image_max_pixels", "image_min_pixels", "video_max_pixels", "video_min_pixels", "video_fps", "video_maxlen",
    "rope_scaling", "finetuning_type", "quantization_bit", "quantization_method", "double_quantization", "stage",
    "pure_bf16", "lora_rank", "lora_dropout", "lora_target", "cutoff_len", "flash_attn",
    "disable_gradient_checkpointing",
)
"""LLaMA-Factory keys that do not change training memory, or that are read below."""

UNMODELLED = ("packing", "neat_packing", "use_unsloth", "use_unsloth_gc",
              "enable_liger_kernel", "use_llama_pro",
              "upcast_layernorm", "upcast_lmhead_output", "shift_attn", "moe_aux_loss_coef")
"""Extra trained modules, packing, Unsloth and Liger kernels, fp32 upcasts."""
OPTIMIZER_SWITCHES = (("use_galore", "galore_adamw"), ("use_apollo", "apollo_adamw"), ("use_adam_mini", "adam_mini"),
                      ("use_muon", "muon"), ("use_badam", "badam"))
"""LLaMA-Factory's optimizer switches (src/llamafactory/hparams/finetuning_args.py GaloreArguments, ApolloArguments,
BAdamArgument, use_adam_mini, use_muon) and the optimizer each selects."""
OPTIMIZER_KEYS = ("galore_target", "galore_scale", "galore_proj_type", "galore_layerwise", "galore_rank",
                  "galore_update_interval", "apollo_target", "apollo_scale", "apollo_proj", "apollo_proj_type",
                  "apollo_scale_type", "apollo_scale_front", "apollo_layerwise", "apollo_rank",
                  "apollo_update_interval", "badam_mode", "badam_start_block", "badam_switch_mode",
                  "badam_switch_interval", "badam_update_ratio", "badam_mask_mode", "badam_verbose")
"""Their options: read below, or not changing memory (targets are every linear layer, scales and schedules)."""


def read(d: Draft, linked: Linked | None) -> tuple[str, str | None]:
    """Map a LLaMA-Factory config into `d`; return the framework and the model named."""
    d.know(*IGNORED)
    run = training_arguments(d, linked)
    stage = d.text("stage") or "sft"
    if stage not in STAGES:
        d.unmodelled("stage")
    if stage == "pt" and d.boolean("packing") is None:
        d.unmodelled("stage")  # pre-training packs sequences by default
    if stage in {"pt", "sft"} and d.boolean("enable_liger_kernel"):
        # src/llamafactory/model/loader.py#L142 at ff6d4d1: Liger with its defaults, fused linear cross-entropy on,
        # unless the stage needs the logits; its RMSNorm, SwiGLU and RoPE kernels stay unmodelled
        d.set("fused_loss", "liger", "enable_liger_kernel")
    d.unmodelled_if_active(*UNMODELLED)
    kind = d.text("finetuning_type") or "lora"
    bits = d.integer("quantization_bit")
    method = METHODS.get(kind)
    if method is None:
        d.unmodelled("finetuning_type")
    elif bits is not None:
        method = quantised(d, method, bits)
    if method in {"lora", "qlora"} and d.boolean("use_dora"):  # PEFT LoraConfig(use_dora=True), on a 4-bit base too
        if method == "qlora":
            d.set("base_quantization", "nf4", "quantization_bit")
        method = "dora"
    if method is not None:
        d.set("method", method, "use_dora" if method == "dora" else
              "finetuning_type" if "finetuning_type" in d.data else "finetuning_type (default)")
    optimizers(d)
    if method in {"lora", "qlora", "dora"}:
        lora(d)
    if method == "oft":
        oft(d)
    seq = d.integer("cutoff_len")
    if seq is None:
        d.default("seq_len", 2048, "cutoff_len")
    else:
        d.set("seq_len", seq, "cutoff_len")
    off = d.boolean("disable_gradient_checkpointing")
    if "gradient_checkpointing" not in d.sources:
        d.set("gradient_checkpointing", "off" if off else "full",
              "disable_gradient_checkpointing" + ("" if off is not None else " (default)"))
    flash = (d.text("flash_attn") or "auto").strip().lower()
    if flash in FLASH_ATTN:
        d.set("attention", FLASH_ATTN[flash], "flash_attn" if "flash_attn" in d.data else "flash_attn (default)")
    else:
        d.unmodelled("flash_attn")
    precision(d, method, run, bits)
    return "llama-factory", d.text("model_name_or_path")


def oft(d: Draft) -> None:
    """OFTArguments (hparams/finetuning_args.py): oft_block_size (default 32) and oft_target ("all": every linear
    layer but the head); an oft_rank instead of a block size is unmodelled."""
    d.given_or("oft_block_size", d.integer("oft_block_size"), 32, "oft_block_size")
    targets = d.names("oft_target") or ["all"]
    d.set("lora_targets", ("all-linear",) if targets == ["all"] else tuple(targets),
          "oft_target" if "oft_target" in d.data else "oft_target (default)")
    d.unmodelled_unless("oft_rank", 0)
    d.know("module_dropout")


def optimizers(d: Draft) -> None:
    """use_galore/use_apollo/use_adam_mini/use_muon/use_badam as the optimizer, with LLaMA-Factory's defaults:
    galore_rank 16, galore_update_interval 200, apollo_rank 16, badam_mode layer (one decoder layer at a time)."""
    d.know(*OPTIMIZER_KEYS)
    for key, name in OPTIMIZER_SWITCHES:
        if not d.boolean(key):
            continue
        if key == "use_galore" and d.boolean("galore_layerwise"):
            name = "galore_adamw_layerwise"
        d.set("optimizer", name, key)
        if key in {"use_galore", "use_apollo"}:
            prefix = key.removeprefix("use_")
            d.given_or("galore_rank", d.integer(f"{prefix}_rank"), 16, f"{prefix}_rank")
            d.given_or("galore_update_proj_gap", d.integer(f"{prefix}_update_interval"), 200,
                       f"{prefix}_update_interval")
        if key == "use_badam":
            if (d.text("badam_mode") or "layer") != "layer":
                d.unmodelled("badam_mode")  # ratio mode updates a share of every matrix
            d.set("active_layers", 1, "badam_mode" if "badam_mode" in d.data else "badam_mode (default)")


def quantised(d: Draft, method: str, bits: int) -> str | None:
    """quantization_bit 4 with bitsandbytes (the default method) is QLoRA, 8 a LoRA on an LLM.int8 base; HQQ/EETQ
    bases are unmodelled."""
    backend = (d.text("quantization_method") or "bnb").strip().lower()
    if bits == 4 and backend == "bnb" and method == "lora":
        double = d.boolean("double_quantization")
        d.given_or("qlora_double_quant", double, True, "double_quantization")
        return "qlora"
    if bits == 8 and backend == "bnb" and method == "lora":
        d.set("base_quantization", "int8", "quantization_bit")
        return method
    d.unmodelled("quantization_bit")
    return method


def lora(d: Draft) -> None:
    """lora_rank, lora_dropout and lora_target ("all": every linear layer but the head), with the defaults."""
    rank = d.integer("lora_rank")
    d.given_or("lora_rank", rank, 8, "lora_rank")
    dropout = d.number("lora_dropout")
    if dropout is not None:
        d.set("lora_dropout", dropout, "lora_dropout")
    targets = d.names("lora_target") or ["all"]
    d.set("lora_targets", ("all-linear",) if targets == ["all"] else tuple(targets),
          "lora_target" if "lora_target" in d.data else "lora_target (default)")
    saved = d.names("additional_target")  # PEFT modules_to_save: fully trained copies
    if saved:
        d.set("modules_to_save", tuple(saved), "additional_target")
    d.know("additional_target")


def precision(d: Draft, method: str | None, run: Run, bits: int | None) -> None:
    """The dtype (and LoRA adapters' dtype) from fp8, bf16/fp16/pure_bf16 and LLaMA-Factory's fp32 upcast rule."""
    # fp8_enable_fsdp_float8_all_gather is only logged (train/fp8_utils.py lines 95-100): the rowwise config it
    # builds cannot all-gather in float8
    d.know("fp8", "fp8_backend", "fp8_enable_fsdp_float8_all_gather")
    backend = (d.text("fp8_backend") or "auto").strip().lower()
    if d.boolean("fp8") and method == "full" and backend in FP8_BACKENDS:
        d.set("dtype", FP8_BACKENDS[backend], "fp8_backend" if "fp8_backend" in d.data else "fp8_backend (default)")
        if backend == "te":
            d.set("fp8_amax_history_len", FP8_TE_AMAX_HISTORY, "fp8_backend")
        return
    if d.boolean("fp8"):
        d.unmodelled("fp8")
    if d.boolean("pure_bf16"):
        d.set("dtype", "bf16-pure", "pure_bf16")
        if method in {"lora", "qlora", "dora", "oft"}:
            d.set("adapter_dtype", "compute", "pure_bf16")
        return
    upcast = not (d.boolean("use_badam") or (run.zero3 and bits is None))
    trained_fp32 = upcast and method == "full"
    autocast = run.autocast
    source = "deepspeed" if d.values.get("sharding", "").startswith("zero") else "bf16" if "bf16" in d.data else "fp16"
    d.set("dtype", trainer_dtype(method, autocast, "fp32" if trained_fp32 else "16", run.engine), source)
    if method in {"lora", "qlora", "dora", "oft"} and not upcast:
        d.set("adapter_dtype", "compute", "deepspeed")
