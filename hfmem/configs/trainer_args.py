"""HF TrainingArguments and TRL SFTConfig/ModelConfig files (JSON or YAML), as `trl sft --config` and the
alignment-handbook recipes write them: TrainingArguments keys, plus TRL's sequence, PEFT and quantisation keys.

A file with any TRL-only key is TRL's, and TRL's defaults apply where it is silent (trl at f2cd5771:
trainer/base_config.py gradient_checkpointing=True and bf16 on unless fp16; sft_config.py max_length=1024;
model_config.py lora_r=16, lora_dropout=0.05, use_bnb_nested_quant=False, dtype "float32"). TRL casts QLoRA's
adapters to bf16, and under ZeRO-3 keeps LoRA's adapters in the base dtype (sft_trainer.py lines 1078-1096 and
1122-1130). A plain TrainingArguments file names no load dtype: the model is taken as loaded in fp32
(from_pretrained's default before transformers v5, and TRL's), the cautious reading.
"""

from __future__ import annotations

from hfmem.configs.draft import Draft, Linked
from hfmem.configs.hf import choice, training_arguments
from hfmem.configs.trainer_precision import WEIGHT_DTYPES, trainer_dtype

TRL_KEYS = frozenset({
    "max_seq_length", "max_length", "packing", "dataset_text_field", "use_peft", "lora_r", "lora_alpha",
    "lora_dropout", "lora_target_modules", "dataset_name", "dataset_num_proc", "dataset_mixture",
    "completion_only_loss", "assistant_only_loss", "model_init_kwargs", "padding_free", "chat_template_path",
    "activation_offloading", "use_bnb_nested_quant", "load_in_4bit", "load_in_8bit", "dataset_kwargs",
    "dataset_config", "packing_strategy",
})
"""Keys of TRL's SFTConfig, ModelConfig and ScriptArguments that TrainingArguments does not have."""

GRPO_KEYS = frozenset({
    "num_generations", "max_prompt_length", "max_completion_length", "use_vllm", "ds3_gather_for_generation",
    "generation_batch_size", "steps_per_generation",
})
"""Keys of TRL's GRPOConfig for the completions it generates between steps."""

GRPO_PROMPT, GRPO_COMPLETION = 512, 256
"""TRL GRPOConfig's max_prompt_length and max_completion_length defaults."""

TRL_MAX_LENGTH = 1024

IGNORED = (
    "model_revision", "trust_remote_code", "dataset_name", "dataset_config", "dataset_train_split",
    "dataset_test_split", "dataset_text_field", "dataset_kwargs", "dataset_num_proc", "dataset_mixture",
    "dataset_streaming", "chat_template", "chat_template_path", "eos_token", "pad_token", "truncation_mode",
    "shuffle_dataset", "completion_only_loss", "assistant_only_loss", "loss_type", "packing_strategy",
    "pad_to_multiple_of", "eval_packing", "router_aux_loss_coef", "lora_alpha", "lora_task_type", "use_rslora",
    "bnb_4bit_quant_type", "bnb_4bit_quant_storage", "env", "ignore_bias_buffers", "tokenizer_name_or_path",
    "model_name_or_path", "use_peft", "load_in_4bit",
)
"""TRL and ModelConfig keys that do not change training memory (or that are read below)."""

UNMODELLED = ("packing", "padding_free", "lora_modules_to_save", "lora_target_parameters",
              "load_in_8bit")
"""Packing, PEFT's trained extra modules, DoRA and 8-bit base weights: hfmem has no setting for them."""


def attention(d: Draft, path: str) -> None:
    """An attn_implementation hfmem models; another kernel (flex, a Hub kernel) is unmodelled."""
    choice(d, path, "attention")


def load_dtype(d: Draft) -> str:
    """"16" or "fp32": the dtype the model is loaded in (torch_dtype / dtype, top level or model_init_kwargs)."""
    named = [(path, d.text(path)) for path in ("torch_dtype", "dtype", "model_init_kwargs.torch_dtype",
                                               "model_init_kwargs.dtype")]
    for path, name in named:
        if name is not None:
            key = name.strip().lower().removeprefix("torch.")
            if key not in WEIGHT_DTYPES:
                raise d.fail(path, f"one of {', '.join(WEIGHT_DTYPES)}", name)
            return WEIGHT_DTYPES[key]
    return "fp32"


def read(d: Draft, linked: Linked | None) -> tuple[str, str | None]:
    """Map trainer arguments into `d`; return the framework ("trl" or "hf-trainer") and the model named."""
    trl = bool((TRL_KEYS | GRPO_KEYS) & d.data.keys())
    d.know(*IGNORED)
    run = training_arguments(d, linked, bf16_default=trl)
    if trl:
        d.default("gradient_checkpointing", "full", "gradient_checkpointing")
    for path in ("max_length", "max_seq_length"):
        if d.raw(path) is not None:
            d.set("seq_len", d.integer(path), path)
    if trl and "max_length" not in d.data and "max_seq_length" not in d.data:
        d.default("seq_len", TRL_MAX_LENGTH, "max_length")
    if GRPO_KEYS & d.data.keys():
        generation(d)
    method = method_of(d)
    d.unmodelled_if_active(*UNMODELLED)
    if method == "full":
        d.know("lora_r", "lora_dropout", "lora_target_modules", "use_bnb_nested_quant")
    else:
        lora(d, trl)
    for path in ("attn_implementation", "model_init_kwargs.attn_implementation"):
        attention(d, path)
    if d.boolean("activation_offloading"):
        d.set("activation_offloading", True, "activation_offloading")
    keys = [k for k in ("bf16", "fp16", "torch_dtype", "dtype", "fsdp", "deepspeed") if d.data.get(k) is not None]
    d.set("dtype", trainer_dtype(method, run.autocast, load_dtype(d), run.engine), ", ".join(keys) or "bf16 (default)")
    if trl and (method == "qlora" or (method == "lora" and run.zero3)):
        d.set("adapter_dtype", "compute", "load_in_4bit" if method == "qlora" else "deepspeed")
    return ("trl" if trl else "hf-trainer"), d.text("model_name_or_path")


def generation(d: Draft) -> None:
    """GRPO generates each step's completions with model.generate: per GPU, its share of generation_batch_size
    (global), else per_device_train_batch_size x steps_per_generation (gradient_accumulation_steps by default);
    sequences of prompt + completion. With use_vllm, vLLM generates (its memory is not modelled)."""
    d.know("num_generations")
    prompt = d.integer("max_prompt_length") or GRPO_PROMPT
    completion = d.integer("max_completion_length") or GRPO_COMPLETION
    d.set("seq_len", prompt + completion, "max_prompt_length + max_completion_length")
    d.set("generation_tokens", completion, "max_completion_length")
    gathers = d.boolean("ds3_gather_for_generation")
    if gathers is not None:
        d.set("generation_gathers_weights", gathers, "ds3_gather_for_generation")
    if d.boolean("use_vllm"):
        d.unmodelled("use_vllm")
        return
    total = d.integer("generation_batch_size")
    if total is not None:
        d.set("generation_batch_size", -(-total // d.values.get("num_gpus", 1)), "generation_batch_size")
        return
    steps = d.integer("steps_per_generation") or d.values.get("gradient_accumulation_steps", 1)
    d.set("generation_batch_size", d.values["micro_batch_size"] * steps,
          "per_device_train_batch_size x steps_per_generation")


def method_of(d: Draft) -> str:
    """full, lora (use_peft) or qlora (load_in_4bit, with TRL's nested-quantisation switch)."""
    d.know("use_dora")
    if d.boolean("load_in_4bit"):
        if d.boolean("use_peft") and d.boolean("use_dora"):  # DoRA on a 4-bit base
            d.set("base_quantization", "nf4", "load_in_4bit")
            d.set("method", "dora", "use_dora")
            return "dora"
        d.set("method", "qlora", "load_in_4bit")
        nested = d.boolean("use_bnb_nested_quant")
        if nested is None:
            d.default("qlora_double_quant", False, "use_bnb_nested_quant")
        else:
            d.set("qlora_double_quant", nested, "use_bnb_nested_quant")
        return "qlora"
    if d.boolean("use_peft"):
        if d.boolean("use_dora"):  # TRL's ModelConfig.use_dora -> LoraConfig(use_dora=True)
            d.set("method", "dora", "use_dora")
            return "dora"
        d.set("method", "lora", "use_peft")
        return "lora"
    d.default("method", "full", "use_peft")
    return "full"


def lora(d: Draft, trl: bool) -> None:
    """ModelConfig's LoRA keys, with TRL's defaults where the file is silent."""
    rank = d.integer("lora_r")
    if rank is not None:
        d.set("lora_rank", rank, "lora_r")
    elif trl:
        d.default("lora_rank", 16, "lora_r")
    dropout = d.number("lora_dropout")
    if dropout is not None:
        d.set("lora_dropout", dropout, "lora_dropout")
    elif trl:
        d.default("lora_dropout", 0.05, "lora_dropout")
    targets = d.names("lora_target_modules")
    if targets:
        d.set("lora_targets", tuple(targets), "lora_target_modules")
    else:
        d.unmodelled("lora_target_modules")  # PEFT then picks per-architecture defaults (q_proj, v_proj for Llama)
