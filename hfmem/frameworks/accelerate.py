"""A plain training loop under Hugging Face Accelerate, as its shipped examples write it (Accelerator, AdamW,
outputs.loss)."""

from __future__ import annotations

from hfmem.frameworks import upstream
from hfmem.frameworks.profile import Default, Profile
from hfmem.frameworks.upstream import ACCELERATE

PROFILE = Profile(
    name="accelerate",
    title="Accelerate training loop",
    versions="accelerate 1.15.0.dev0 (16cb6eb)",
    defaults=(
        Default("optimizer", "adamw_foreach", ACCELERATE + "examples/nlp_example.py#L140",
                "the example loop builds torch.optim.AdamW with no fused/foreach argument: the multi-tensor foreach "
                "step on CUDA, which allocates one more state-sized buffer"),
        upstream.ACCELERATE_NO_SYNC,
    ),
)

NOT_MODELLED: tuple[str, ...] = ()
