"""A plain training loop under Hugging Face Accelerate, as its shipped examples write it (Accelerator, AdamW, outputs.loss)."""

from __future__ import annotations

from hfmem.frameworks.profile import Default, Profile, github

ACCELERATE = github("huggingface/accelerate", "16cb6eb80dd9aa8b4df1a63ef57863e455d53b83")
"""Accelerate main (1.15.0.dev0)."""

PROFILE = Profile(
    name="accelerate",
    title="Accelerate training loop",
    versions="accelerate 1.15.0.dev0 (16cb6eb)",
    defaults=(
        Default("optimizer", "adamw_foreach", ACCELERATE + "examples/nlp_example.py#L140",
                "the example loop builds torch.optim.AdamW with no fused/foreach argument: the multi-tensor foreach "
                "step on CUDA, which allocates one more state-sized buffer"),
    ),
)

NOT_MODELLED: tuple[str, ...] = ()
