"""TRL's SFTTrainer with its SFTConfig, given a model id and (for adapters) a PEFT LoraConfig."""

from __future__ import annotations

from hfmem.frameworks import upstream
from hfmem.frameworks.profile import Default, Profile, github

TRL = github("huggingface/trl", "f2cd57710ae345ea6428ae95363267fcf38a3dc8") + "trl/trainer/"
"""TRL main (1.10.0.dev0)."""

PROFILE = Profile(
    name="trl",
    title="TRL SFTTrainer (SFTConfig)",
    versions="trl 1.10.0.dev0 (f2cd577), transformers 5.4 (TrainingArguments), peft 0.20.1.dev0 (LoraConfig)",
    defaults=(
        upstream.ACCELERATE_NO_SYNC,
        Default("dtype", "amp-bf16", TRL + "utils.py#L1144",
                "a model id is loaded in float32 unless model_init_kwargs sets dtype, and SFTConfig turns bf16 on "
                "unless fp16 (base_config.py L105): bf16 autocast over fp32 weights, gradients and AdamW states"),
        Default("gradient_checkpointing", "full", TRL + "base_config.py#L62",
                "SFTConfig overrides TrainingArguments: gradient_checkpointing defaults to True, each layer "
                "recomputed in backward"),
        upstream.TRAINER_OPTIMIZER,
        upstream.PEFT_RANK,
        upstream.PEFT_DROPOUT,
        upstream.PEFT_TARGETS,
    ),
    method_defaults={
        "lora": (upstream.PEFT_ADAPTER_FP32,),
        "qlora": (
            Default("adapter_dtype", "compute", TRL + "sft_trainer.py#L1130",
                    "on a quantised model SFTTrainer casts every trainable (adapter) parameter to bf16: 2-byte "
                    "adapters, gradients and AdamW states"),
        ),
    },
)

NOT_MODELLED: tuple[str, ...] = (
    "loss_type defaults to chunked_nll: the lm_head runs on non-ignored tokens only, in checkpointed chunks of "
    "tokens, so the (b·s, V) logits never exist whole: " + TRL + "sft_config.py#L336",
    "the chunked loss itself (lm_head matmul and cross-entropy recomputed per chunk in backward): "
    + TRL + "sft_trainer.py#L117",
)
