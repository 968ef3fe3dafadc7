"""Hugging Face Trainer with PEFT adapters, as transformers and PEFT set it up when the user says nothing."""

from __future__ import annotations

from hfmem.frameworks import upstream
from hfmem.frameworks.profile import Profile

PROFILE = Profile(
    name="hf-trainer",
    title="Hugging Face Trainer + PEFT",
    versions="transformers 5.4 (training_args.py at 00349ae8; loss_utils.py as in 4.57-5.4), "
             "peft 0.20.1.dev0 (5d602fd)",
    defaults=(
        upstream.ACCELERATE_NO_SYNC,
        upstream.TRAINER_OPTIMIZER,
        upstream.TRANSFORMERS_LOSS_UPCAST,
        upstream.PEFT_RANK,
        upstream.PEFT_DROPOUT,
        upstream.PEFT_TARGETS,
        upstream.PEFT_ADAPTER_FP32,
    ),
    method_defaults={
        "full": (upstream.TRAINER_NO_CHECKPOINTING,),
        "lora": (upstream.TRAINER_NO_CHECKPOINTING,),
        "qlora": (upstream.PEFT_KBIT_CHECKPOINTING, upstream.PEFT_KBIT_UPCAST),
    },
)

NOT_MODELLED: tuple[str, ...] = ()
