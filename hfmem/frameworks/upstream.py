"""Defaults several profiles inherit from the libraries under them (transformers' Trainer, PEFT), stated once.

hf-trainer, TRL, axolotl and LLaMA-Factory train through transformers.Trainer and (for adapters) PEFT; where a
framework leaves a value to those libraries, its profile reuses the Default here rather than citing it again.
"""

from __future__ import annotations

from hfmem.frameworks.profile import Default, github

TRANSFORMERS = github("huggingface/transformers", "00349ae87eddc872ffa21a8a54f264375a0056a8") + "src/transformers/"
"""transformers at a main commit between v5.3.0 and v5.4.0 whose training_args.py matches v5.4.0 line for line
up to the lines cited."""
TRANSFORMERS_LOSS = github("huggingface/transformers", "0114da07ec0e101b420a923dedeb6032b6ac3a44") + "src/transformers/"
"""transformers at the commit whose loss/loss_utils.py puts the upcast on line 55, as v4.57 and v5.0-5.4 do."""
PEFT = github("huggingface/peft", "5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40") + "src/peft/"
"""PEFT main (0.20.1.dev0)."""
ACCELERATE = github("huggingface/accelerate", "16cb6eb80dd9aa8b4df1a63ef57863e455d53b83")
"""Accelerate main (1.15.0.dev0)."""

TRAINER_OPTIMIZER = Default(
    "optimizer", "adamw", TRANSFORMERS + "training_args.py#L802",
    "TrainingArguments.optim is adamw_torch_fused on torch >= 2.8 (adamw_torch before): fused AdamW, no extra "
    "state-sized buffer in the step")
TRAINER_NO_CHECKPOINTING = Default(
    "gradient_checkpointing", "off", TRANSFORMERS + "training_args.py#L898",
    "TrainingArguments.gradient_checkpointing defaults to False: every layer's activations are kept for backward")
ACCELERATE_NO_SYNC = Default(
    "sync_each_batch", False, ACCELERATE + "src/accelerate/utils/dataclasses.py#L1024",
    "GradientAccumulationPlugin.sync_each_batch defaults to False: accumulating micro-batches run under no_sync "
    "(accumulate(), and the Trainer's loop), so under FSDP every rank keeps its units' unsharded gradients")
TRANSFORMERS_LOSS_UPCAST = Default(
    "loss_upcast", True, TRANSFORMERS_LOSS + "loss/loss_utils.py#L55",
    "ForCausalLMLoss casts the logits to fp32 before the cross-entropy: an fp32 (b·s, V) copy of the logits")

PEFT_RANK = Default(
    "lora_rank", 8, PEFT + "tuners/lora/config.py#L613",
    "LoraConfig.r defaults to 8: r·(in + out) adapter parameters per adapted layer")
PEFT_DROPOUT = Default(
    "lora_dropout", 0.0, PEFT + "tuners/lora/config.py#L634",
    "LoraConfig.lora_dropout defaults to 0.0: no dropout mask or dropped input kept per adapted layer")
PEFT_TARGETS = Default(
    "lora_targets", ("q_proj", "v_proj"), PEFT + "utils/constants.py#L85",
    "LoraConfig.target_modules=None takes the per-model table: q_proj and v_proj for llama (and most llama-like "
    "types), not every linear layer")
PEFT_ADAPTER_FP32 = Default(
    "adapter_dtype", "fp32", PEFT + "mapping_func.py#L110",
    "get_peft_model(autocast_adapter_dtype=True) upcasts 16-bit adapter weights to fp32: 4-byte adapters, "
    "gradients and AdamW states")
PEFT_KBIT_CHECKPOINTING = Default(
    "gradient_checkpointing", "full", PEFT + "utils/other.py#L159",
    "prepare_model_for_kbit_training, PEFT's QLoRA preparation, enables gradient checkpointing unless "
    "use_gradient_checkpointing=False: each layer recomputed in backward")

PEFT_KBIT_UPCAST = Default(
    "kbit_upcast", True, PEFT + "utils/other.py#L209",
    "prepare_model_for_kbit_training casts every 16-bit parameter that is not quantised (embeddings, norms, "
    "lm_head) to fp32: fp32 embeddings make the residual stream, the activations and the logits fp32 too")
