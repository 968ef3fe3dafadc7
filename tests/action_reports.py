"""Real reports for the Action's tests, built once each: what the Action renders (comment, JSON, HTML page) without
a build per model."""

from __future__ import annotations

import copy
import functools
from typing import Any

from hfmem.constants import DEFAULT_SEQ_LEN
from hfmem.hardware.gpus import resolve_gpus
from hfmem.hub.client import HubSettings
from hfmem.hub.modelref import parse_model_ref
from hfmem.memory.settings import TrainingSettings
from hfmem.reporting.plan import Plan, build_report


@functools.cache
def _qlora_on_4090(example: str) -> dict[str, Any]:
    # rank 0 reads the checkpoint (as a QLoRA run across GPUs would): the 70B's suggestion, 3 GPUs, then holds in a
    # desktop's host RAM (hfmem gpus: 192 GiB), where three ranks each reading the whole bf16 checkpoint would not
    training = TrainingSettings(method="qlora", seq_len=DEFAULT_SEQ_LEN, model_loading="rank0").validated()
    plan = Plan(training=training, methods=("qlora",), gpus=resolve_gpus(["RTX 4090"]))
    return build_report(parse_model_ref(f"example:{example}"), HubSettings.from_env(), plan)


def qlora_on_4090(example: str, name: str) -> dict[str, Any]:
    """A real report of QLoRA on one RTX 4090 at 2,048 tokens, named `name`: example Meta-Llama-3-8B fits,
    Llama-2-70b-hf does not."""
    report = copy.deepcopy(_qlora_on_4090(example))
    report["model"] = name
    return report
