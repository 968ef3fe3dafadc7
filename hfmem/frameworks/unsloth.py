"""Unsloth's FastLanguageModel.from_pretrained and get_peft_model, with the arguments left at their defaults."""

from __future__ import annotations

from hfmem.frameworks.profile import Default, Profile, github

UNSLOTH = github("unslothai/unsloth", "015bdef0d94a241bcd94eec7a405b1700632180d") + "unsloth/"
"""Unsloth main (2026.8.19)."""
LLAMA = UNSLOTH + "models/llama.py"

PROFILE = Profile(
    name="unsloth",
    title="Unsloth",
    versions="unsloth 2026.8.19 (015bdef)",
    defaults=(
        Default("lora_rank", 16, LLAMA + "#L3063", "get_peft_model(r=16)"),
        Default("lora_targets", ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
                LLAMA + "#L3064",
                "get_peft_model targets every attention and MLP projection by default, not the output head"),
        Default("lora_dropout", 0.0, LLAMA + "#L3074",
                "lora_dropout=0.0: no dropout mask or dropped input kept per adapted layer"),
    ),
    method_defaults={
        "qlora": (
            Default("qlora_double_quant", True, LLAMA + "#L2622",
                    "load_in_4bit builds BitsAndBytesConfig with bnb_4bit_use_double_quant=True: an 8-bit absmax "
                    "per 64 weights"),
        ),
    },
)

NOT_MODELLED: tuple[str, ...] = (
    "from_pretrained defaults to load_in_4bit=True, so QLoRA is the method when the user names none: "
    + UNSLOTH + "models/loader.py#L414",
    "use_gradient_checkpointing defaults to \"unsloth\": checkpointed layer inputs are offloaded to CPU memory "
    "(not gradient_checkpointing=full, which keeps them on the GPU): " + LLAMA + "#L3079",
    "the loss is unsloth_fused_ce_loss, a chunked fused lm_head + cross-entropy that never materialises the "
    "whole logits: " + LLAMA + "#L1497",
    "LoRA MLP/QKV/O run as fused autograd Functions that save fewer tensors than the modules they replace: "
    + UNSLOTH + "kernels/fast_lora.py#L28",
)
