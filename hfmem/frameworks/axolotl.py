"""axolotl's YAML config schema and loaders, for the keys a config leaves out."""

from __future__ import annotations

from hfmem.frameworks import upstream
from hfmem.frameworks.profile import Default, Profile, github

AXOLOTL = github("axolotl-ai-cloud/axolotl", "067b021c8b87a9e5e380b9173c704cf7340e30f5") + "src/axolotl/"
"""axolotl main (0.18.0)."""
BF16 = AXOLOTL + "utils/config/__init__.py#L192"

PROFILE = Profile(
    name="axolotl",
    title="axolotl",
    versions="axolotl 0.18.0 (067b021), peft 0.20.1.dev0 (adapter dtype)",
    defaults=(
        upstream.ACCELERATE_NO_SYNC,
        Default("optimizer", "adamw", AXOLOTL + "utils/schemas/training.py#L123",
                "optimizer defaults to adamw_torch_fused: fused AdamW, no extra state-sized buffer in the step"),
        Default("gradient_checkpointing", "off", AXOLOTL + "utils/schemas/config.py#L601",
                "gradient_checkpointing defaults to false: every layer's activations are kept for backward"),
        Default("activation_offloading", False, AXOLOTL + "utils/schemas/config.py#L625",
                "activation_offloading defaults to false: saved activations stay on the GPU"),
        Default("lora_dropout", 0.0, AXOLOTL + "utils/schemas/peft.py#L80",
                "lora_dropout defaults to 0.0: no dropout mask or dropped input kept per adapted layer"),
        upstream.PEFT_ADAPTER_FP32,
    ),
    method_defaults={
        "full": (
            Default("dtype", "bf16-pure", BF16,
                    "bf16: auto turns bf16 on for a bf16 GPU and the model is loaded in torch.bfloat16: bf16 "
                    "weights, gradients and AdamW states, no fp32 master copy"),
        ),
        "lora": (
            Default("dtype", "bf16", BF16,
                    "bf16: auto loads the base in torch.bfloat16 and trains under the Trainer's bf16 autocast"),
        ),
        "qlora": (
            Default("dtype", "bf16", BF16,
                    "bf16: auto makes torch.bfloat16 the compute dtype of the 4-bit layers and of every "
                    "unquantised weight, under the Trainer's bf16 autocast"),
            Default("qlora_double_quant", True, AXOLOTL + "loaders/model.py#L718",
                    "load_in_4bit builds BitsAndBytesConfig with bnb_4bit_use_double_quant=True: an 8-bit absmax "
                    "per 64 weights"),
            Default("kbit_upcast", False, AXOLOTL + "loaders/model.py#L458",
                    "QLoRA runs PEFT's prepare_model_for_kbit_training (L1021), then converts the norms, embeddings "
                    "and lm_head back to the torch_dtype for flash-attn: the residual stream stays 16-bit"),
        ),
    },
)

NOT_MODELLED: tuple[str, ...] = ()
