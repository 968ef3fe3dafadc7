"""NeMo 2's LLM recipes (nemo/collections/llm/recipes): Megatron-core under NeMo's MegatronStrategy, with the
precision plugin and the optimizer every recipe shares (bf16_mixed, distributed_fused_adam_with_cosine_annealing).

The layout (TP, PP, CP, SP) is each recipe's own choice for its model and is left to the flags or a recipe YAML.
"""

from __future__ import annotations

from hfmem.frameworks.megatron import PROFILE as MEGATRON_PROFILE
from hfmem.frameworks.profile import Default, Profile, github

NEMO = github("NVIDIA/NeMo", "8cfedd7203462cb251a914e700e5605444277561") + "nemo/collections/llm/"
"""NeMo main (2.5 development, September 2025)."""
RECIPES = NEMO + "recipes/"
LORA = NEMO + "peft/lora.py"
MEGATRON_CORE = {d.field: d for d in MEGATRON_PROFILE.defaults}
"""The megatron profile's defaults, cited there once: NeMo 2 builds Megatron-core's model, attention, loss and MoE
layers unchanged, and trains at its utilisation."""

PROFILE = Profile(
    name="nemo",
    title="NeMo 2 LLM recipes",
    versions="NeMo main (8cfedd7); Megatron-core as in the megatron profile (d98e8a6)",
    defaults=(
        Default("dtype", "bf16", RECIPES + "precision/mixed_precision.py#L31",
                "bf16_mixed: precision bf16-mixed with params_dtype bfloat16 and no autocast: bf16 weights, fp32 "
                "main params and Adam moments in Megatron's optimizer"),
        Default("grad_dtype", "fp32", RECIPES + "precision/mixed_precision.py#L35",
                "grad_reduce_in_fp32=True (and the recipes' DistributedDataParallelConfig, llama3_8b.py L118): "
                "gradients accumulate and are reduced in an fp32 buffer"),
        Default("grad_bucket_view", True, RECIPES + "llama3_8b.py#L112",
                "MegatronStrategy(gradient_as_bucket_view=True) over Megatron-core's DDP, whose param.main_grad is a "
                "view into its gradient buffer: no second gradient copy"),
        Default("sharding", "zero1", RECIPES + "optim/adam.py#L47",
                "distributed_fused_adam_with_cosine_annealing sets use_distributed_optimizer=True: fp32 main params "
                "and Adam moments sharded over data parallelism (ZeRO-1), the gradient buffer kept whole"),
        Default("optimizer", "adamw", RECIPES + "optim/adam.py#L39",
                "optimizer adam: Megatron-core's FusedAdam (decoupled weight decay), no extra state-sized buffer"),
        *(MEGATRON_CORE[field] for field in ("attention", "loss_upcast", "loss_in_place", "moe_probs_in_activation",
                                             "hfu_stack")),
        Default("compile_layers", True, NEMO + "gpt/model/base.py#L216",
                "GPTConfig's default layer spec is Transformer Engine's when it is installed (transformer_engine_layer_"
                "spec): fused layers that keep what fused kernels keep, which compile_layers counts"),
        Default("fused_softmax", True, NEMO + "gpt/model/base.py#L302",
                "GPTConfig sets masked_softmax_fusion True: the fused softmax keeps only its output"),
        Default("pp_buffers", "transfer", NEMO + "gpt/model/base.py#L305",
                "GPTConfig sets deallocate_pipeline_outputs True over Megatron-core's per-transfer receives: each "
                "sent output freed, each receive allocated when it arrives"),
    ),
    method_defaults={
        "lora": (
            Default("lora_rank", 32, LORA + "#L677", "LoRA dim defaults to 32"),
            Default("lora_targets", ("all-linear",), LORA + "#L675",
                    "target_modules default to linear_qkv, linear_proj, linear_fc1 and linear_fc2: every linear "
                    "layer of the decoder, not the output layer"),
            Default("lora_dropout", 0.0, LORA + "#L679", "dropout 0.0: no dropout mask or dropped input kept"),
        ),
    },
)

NOT_MODELLED: tuple[str, ...] = (
    "LoRA on Megatron's fused linear_qkv and linear_fc1 is one adapter per fused matrix (one A for q, k and v), where "
    "hfmem counts one per Hugging Face projection: " + LORA + "#L634",
    "each recipe picks its own TP, PP, CP and sequence parallelism (llama3_8b: CP 2); pass them as flags or in a "
    "recipe YAML: " + RECIPES + "llama3_8b.py#L65",
)
