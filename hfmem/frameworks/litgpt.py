"""LitGPT's finetune scripts (litgpt finetune full / lora, lora with --quantize bnb.*) and its GPT model code."""

from __future__ import annotations

from hfmem.frameworks.profile import Default, Profile, github

LITGPT = github("Lightning-AI/litgpt", "26857050fe3ff627cd714fe92f5838f51a3d5efa") + "litgpt/"
"""LitGPT main (0.5.13)."""
LORA = LITGPT + "finetune/lora.py"
FULL = LITGPT + "finetune/full.py"

PROFILE = Profile(
    name="litgpt",
    title="LitGPT finetune",
    versions="litgpt 0.5.13 (2685705)",
    defaults=(
        Default("attention", "sdpa", LITGPT + "model.py#L593",
                "CausalSelfAttention calls F.scaled_dot_product_attention (is_causal when no mask), which "
                "dispatches to its flash or memory-efficient kernel"),
        Default("repeat_kv", True, LITGPT + "model.py#L538",
                "grouped K/V are repeat_interleave'd to every query head before SDPA: K/V saved at the query "
                "heads' count"),
        Default("sync_each_batch", False, LORA + "#L354",
                "fit() runs each accumulating micro-batch under fabric.no_backward_sync, FSDP's no_sync (full.py too): "
                "every rank keeps its units' unsharded gradients until the step"),
        Default("lora_rank", 8, LORA + "#L56", "lora_r defaults to 8"),
        Default("lora_dropout", 0.05, LORA + "#L58",
                "lora_dropout defaults to 0.05: each adapted layer keeps a dropout mask and its dropped input"),
        Default("lora_targets", ("q_proj", "v_proj"), LORA + "#L59",
                "lora_query and lora_value (L61) default to True, key, projection, MLP and head to False: the "
                "query and value parts of the fused qkv"),
    ),
    method_defaults={
        "full": (
            Default("dtype", "amp-bf16", FULL + "#L97",
                    "precision defaults to bf16-mixed on a bf16 GPU (utils.get_default_supported_precision with "
                    "training=True): bf16 autocast over fp32 weights, gradients and AdamW states"),
            Default("optimizer", "adamw_foreach", FULL + "#L63",
                    "optimizer \"AdamW\" is torch.optim.AdamW with no fused argument: the foreach step, one more "
                    "state-sized buffer"),
            Default("previous_step_alive", True, FULL + "#L282",
                    "fit() keeps `logits` from the previous step until the next forward returns, so that step's "
                    "graph is not freed yet"),
        ),
        "lora": (
            Default("dtype", "amp-bf16", LORA + "#L131",
                    "precision defaults to bf16-mixed on a bf16 GPU: bf16 autocast over fp32 weights"),
            Default("adapter_dtype", "fp32", LORA + "#L131",
                    "bf16-mixed keeps every parameter, LoRA's A and B included, in fp32"),
            Default("optimizer", "adamw_foreach", LORA + "#L78",
                    "optimizer \"AdamW\" is torch.optim.AdamW with no fused argument: the foreach step, one more "
                    "state-sized buffer"),
            Default("previous_step_alive", True, LORA + "#L355",
                    "fit() keeps `logits` from the previous step until the next forward returns, so that step's "
                    "graph is not freed yet"),
        ),
        "qlora": (
            Default("optimizer", "paged_adamw", LITGPT + "utils.py#L628",
                    "with a bitsandbytes plugin the script replaces AdamW by bnb.optim.PagedAdamW: 32-bit states in "
                    "CUDA managed memory"),
            Default("quantize_head", True, LORA + "#L149",
                    "lightning's BitsandbytesPrecision replaces every nn.Linear, the lm_head included, with a 4-bit "
                    "linear"),
            Default("adapter_dtype", "compute", LORA + "#L149",
                    "BitsandbytesPrecision(mode, dtype) sets the true precision's dtype for every parameter left "
                    "unquantised, the adapters included"),
            Default("previous_step_alive", True, LORA + "#L355",
                    "fit() keeps `logits` from the previous step until the next forward returns; with a 4-bit layer "
                    "that keeps its input as a ctx attribute, the previous step's inputs are still alive"),
            Default("loss_upcast", False, LITGPT + "utils.py#L326",
                    "chunked_cross_entropy runs F.cross_entropy on the logit chunks as they come: bf16 under the "
                    "bf16-true precision quantisation requires"),
        ),
    },
)

NOT_MODELLED: tuple[str, ...] = (
    "quantisation refuses the default bf16-mixed precision, so a QLoRA run must name a *-true precision and has no "
    "default dtype: " + LORA + "#L143",
    "the loss is chunked_cross_entropy over 128-token chunks (LoRA: the head itself runs per 128 positions, "
    "lm_head_chunk_size=128), a chunk count that follows the sequence length: " + LITGPT + "utils.py#L305",
    "GELU MLPs call F.gelu(approximate=config.gelu_approximate) instead of the checkpoint's activation module: "
    + LITGPT + "model.py#L814",
    "with a bitsandbytes plugin the token embedding is swapped for bitsandbytes' StableEmbedding (fp32 layer norm "
    "after the lookup): " + LORA + "#L224",
)
