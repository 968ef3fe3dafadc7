"""The single-GPU changes that cut memory, least intrusive first, and their words: a description follows from the
change's name and settings alone, so a record keeps the settings and reads the words back (hfmem.memory.record)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hfmem.memory.model_state import saves_full
from hfmem.memory.settings import TrainingSettings


@dataclass(frozen=True)
class Mitigation:
    """One change that cuts memory: its name (the JSON's), its words ({setting} filled in from its changes), its
    short label in the tables, and whether it keeps the method (a same-method change is preferred to more GPUs,
    another method or offload comes after them)."""

    name: str
    words: str
    label: str
    same_method: bool


REGISTRY: dict[str, Mitigation] = {m.name: m for m in (
    Mitigation("sharded_checkpoints", "save sharded checkpoints (SHARDED_STATE_DICT; DeepSpeed's per-rank files): "
               "rank 0's host no longer gathers the whole model and optimizer state", "sharded save", True),
    Mitigation("smaller_eval_batch", "evaluate one sequence at a time (per_device_eval_batch_size 1): the evaluation "
               "forward's logits and loss buffers shrink with it", "eval b=1", True),
    Mitigation("layerwise_generation_gather", "ZeRO-3 gathers each layer as generate reaches it instead of the whole "
               "model (TRL ds3_gather_for_generation false; slower generation)", "gen layer gather", True),
    Mitigation("smaller_generation_batch", "a generation batch of {generation_batch_size} per GPU (TRL "
               "steps_per_generation 1, or a smaller generation_batch_size): the KV cache and prefill shrink with it",
               "gen b={generation_batch_size}", True),
    Mitigation("gradient_checkpointing", "turn on full gradient checkpointing (recompute each layer in backward)",
               "+ckpt", True),
    Mitigation("smaller_micro_batch", "micro-batch 1 with gradient accumulation {gradient_accumulation_steps} (same "
               "effective batch)", "b=1+accum", True),
    Mitigation("checkpointing_and_smaller_micro_batch", "gradient checkpointing and micro-batch 1 with gradient "
               "accumulation {gradient_accumulation_steps}", "+ckpt b=1", True),
    Mitigation("8bit_optimizer", "8-bit paged AdamW (bitsandbytes) and gradient checkpointing", "8-bit+ckpt", True),
    Mitigation("lora", "LoRA instead of a full fine-tune, with checkpointing", "LoRA+ckpt", False),
    Mitigation("qlora", "QLoRA (4-bit NF4 base, paged 8-bit AdamW) with checkpointing", "QLoRA+ckpt", False),
    Mitigation("zero3_offload", "DeepSpeed ZeRO-3 with optimizer offload to CPU (ZeRO-Offload) and checkpointing",
               "offload", False),
    Mitigation("zero3_offload_params", "DeepSpeed ZeRO-3 with optimizer and parameter offload (ZeRO-Infinity, "
               "slowest) and checkpointing", "ZeRO-Inf.", False),
    Mitigation("zero3_nvme", "DeepSpeed ZeRO-3 with optimizer and parameter offload to NVMe (ZeRO-Infinity: the states "
               "on the node's NVMe, host RAM holding the swap buffers; slower still) and checkpointing",
               "NVMe offload", False),
)}
"""Every mitigation by name, in the order of preference within its kind (same method first, then the others)."""
EVAL_ONE = "smaller_eval_batch"
"""The change that evaluates one sequence at a time; every later training-side change does too where the run
evaluates several (the training-side changes leave the evaluation forward as it is)."""


def label(name: str, changes: dict[str, Any]) -> str:
    """A change's short name ("gen b=2": the generation batch it sets); one that also evaluates a sequence at a time
    says so ("+ckpt eval b=1")."""
    text = REGISTRY[name].label.format(**changes)
    return f"{text} eval b=1" if name != EVAL_ONE and changes.get("eval_batch_size") == 1 else text


def describe(name: str, changes: dict[str, Any]) -> str:
    """A change's description in words, from its name and settings changes."""
    text = REGISTRY[name].words.format(**changes)
    return f"{text}, evaluating one sequence at a time" if name != EVAL_ONE and "eval_batch_size" in changes else text


def candidates(base: TrainingSettings) -> list[tuple[str, dict[str, Any]]]:
    """The changes of `base` that cut memory on the same GPUs, cheapest (least intrusive) first, as (name, settings
    changes)."""
    out: list[tuple[str, dict[str, Any]]] = []
    b, ga = base.micro_batch_size, base.gradient_accumulation_steps
    gc = {"gradient_checkpointing": "full"}
    if base.gradient_checkpointing == "off":
        out.append(("gradient_checkpointing", gc))
    if b > 1:
        out.append(("smaller_micro_batch", {"micro_batch_size": 1, "gradient_accumulation_steps": b * ga}))
        if base.gradient_checkpointing == "off":
            out.append(("checkpointing_and_smaller_micro_batch",
                        gc | {"micro_batch_size": 1, "gradient_accumulation_steps": b * ga}))
    if base.method == "full" and base.resolved_optimizer in {"adamw", "paged_adamw"}:
        out.append(("8bit_optimizer", {"optimizer": "paged_adamw_8bit"} | gc))
    cpu = {"offload_device": "cpu"} if base.offload_device != "cpu" else {}  # the CPU offloads say so where asked
    out.append(("zero3_offload", {"sharding": "zero3", "offload_optimizer": True} | cpu | gc))
    if base.method == "full":
        out.append(("lora", {"method": "lora"} | gc))
    if base.method != "qlora":
        out.append(("qlora", {"method": "qlora", "optimizer": None} | gc))
    out.append(("zero3_offload_params", {"sharding": "zero3", "offload_optimizer": True, "offload_params": True}
                | cpu | gc))
    if base.offload_device == "nvme":  # asked for: slow, and untimed without the drives' bandwidth
        out.append(("zero3_nvme", {"sharding": "zero3", "offload_optimizer": True, "offload_params": True,
                                   "offload_device": "nvme"} | gc))
    if (base.eval_batch_size or 1) > 1:
        out = [(EVAL_ONE, {"eval_batch_size": 1})] + [(name, changes | {"eval_batch_size": 1}) for name, changes in out]
    if base.generation_batch_size is not None:  # the generation phase's own changes, before the training side's
        generating: list[tuple[str, dict[str, Any]]] = []
        if base.resolved_sharding == "zero3" and base.generation_gathers_weights:
            generating.append(("layerwise_generation_gather", {"generation_gathers_weights": False}))
        if base.generation_batch_size > base.micro_batch_size:
            generating.append(("smaller_generation_batch", {"generation_batch_size": base.micro_batch_size}))
        out[:0] = generating
    if saves_full(base):
        out.insert(0, ("sharded_checkpoints", {"state_dict_type": "sharded"}))
    return out
