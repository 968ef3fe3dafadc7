"""The DeepSpeed engine used directly (deepspeed.initialize) with a config that leaves a key out."""

from __future__ import annotations

from hfmem.frameworks.profile import Default, Profile, github

DEEPSPEED = github("deepspeedai/DeepSpeed", "edaa7221267243c7be7fb49c5d5f5c4fb97b4641") + "deepspeed/runtime/"
"""DeepSpeed master (0.19.6)."""

PROFILE = Profile(
    name="deepspeed",
    title="DeepSpeed engine",
    versions="deepspeed 0.19.6 (edaa722)",
    defaults=(
        Default("sharding", "ddp", DEEPSPEED + "zero/config.py#L95",
                "zero_optimization.stage defaults to 0 (ZeRO disabled): every GPU holds the whole weights, "
                "gradients and optimizer states and all-reduces the gradients"),
        Default("optimizer", "adamw", DEEPSPEED + "engine.py#L2096",
                "an \"AdamW\" (or \"Adam\") optimizer in the config is DeepSpeed's FusedAdam unless torch_adam: "
                "a fused multi-tensor step, no extra state-sized buffer"),
        Default("offload_optimizer", False, DEEPSPEED + "zero/config.py#L164",
                "zero_optimization.offload_optimizer defaults to none: optimizer states stay on the GPU"),
        Default("prefetch_bucket_size", 5e7, DEEPSPEED + "zero/config.py#L215",
                "stage3_prefetch_bucket_size defaults to 5e7 elements (Hugging Face's \"auto\", 0.9 x hidden², "
                "applies only through its integration)"),
    ),
)

NOT_MODELLED: tuple[str, ...] = (
    "stage 0 all-reduces gradients through DeepSpeed's own buckets (allreduce_bucket_size), not DDP's reducer, "
    "whose flat buckets hfmem's ddp counts as a second gradient copy: " + DEEPSPEED + "zero/config.py#L95",
)
