"""LLaMA-Factory's model, fine-tuning and training arguments, for the keys a config leaves out."""

from __future__ import annotations

from hfmem.frameworks import upstream
from hfmem.frameworks.profile import Default, Profile, github

LLAMA_FACTORY = github("hiyouga/LLaMA-Factory", "ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30") + "src/llamafactory/"
"""LLaMA-Factory main (0.9.6.dev0)."""
FINETUNING = LLAMA_FACTORY + "hparams/finetuning_args.py"

PROFILE = Profile(
    name="llama-factory",
    title="LLaMA-Factory",
    versions="llamafactory 0.9.6.dev0 (ff6d4d1), transformers 5.4 (TrainingArguments.optim)",
    defaults=(
        upstream.ACCELERATE_NO_SYNC,
        upstream.TRAINER_OPTIMIZER,
        Default("gradient_checkpointing", "full", LLAMA_FACTORY + "model/model_utils/checkpointing.py#L184",
                "gradient checkpointing is enabled unless disable_gradient_checkpointing (default False): each "
                "layer recomputed in backward"),
        Default("lora_rank", 8, FINETUNING + "#L78", "lora_rank defaults to 8"),
        Default("lora_dropout", 0.0, FINETUNING + "#L74",
                "lora_dropout defaults to 0.0: no dropout mask or dropped input kept per adapted layer"),
        Default("lora_targets", ("all-linear",), FINETUNING + "#L82",
                "lora_target defaults to all: every linear layer but the output head"),
        Default("adapter_dtype", "fp32", LLAMA_FACTORY + "model/adapter.py#L281",
                "outside pure_bf16 (and ZeRO-3 without quantisation) get_peft_model gets autocast_adapter_dtype="
                "True: fp32 adapters, gradients and AdamW states"),
    ),
    method_defaults={
        "full": (
            Default("dtype", "amp-bf16", LLAMA_FACTORY + "model/adapter.py#L52",
                    "outside pure_bf16 and ZeRO-3 every trainable weight is upcast to fp32; with bf16: true, as "
                    "every shipped example sets, the forward runs under bf16 autocast"),
        ),
        "qlora": (
            Default("qlora_double_quant", True, LLAMA_FACTORY + "hparams/model_args.py#L292",
                    "double_quantization defaults to True: an 8-bit absmax per 64 weights"),
        ),
    },
)

NOT_MODELLED: tuple[str, ...] = ()
