"""Where an answer stops meaning anything: warnings shown above the fit matrix and kept in the JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hfmem.memory.fit import Fit
from hfmem.memory.settings import TrainingSettings
from hfmem.model.architecture import Architecture, text_config


def context_limit(arch: Architecture, config: dict[str, Any]) -> int | None:
    """The longest sequence the model is made for: max_position_embeddings, times a RoPE scaling factor when the
    config scales an original window up (a config that states original_max_position_embeddings is already scaled)."""
    if not arch.max_position_embeddings:
        return None
    cfg, _ = text_config(config)
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    factor = rope.get("factor") if isinstance(rope, dict) else None
    if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 1 \
            and isinstance(rope, dict) and "original_max_position_embeddings" not in rope:
        return int(arch.max_position_embeddings * factor)
    return arch.max_position_embeddings


def warnings_for(arch: Architecture, config: dict[str, Any], training: TrainingSettings, fits: list[Fit]) -> list[str]:
    """One line per condition that makes the estimate moot: a sequence past the model's context, a micro-batch
    no GPU of the matrix holds."""
    found = []
    limit = context_limit(arch, config)
    if training.seq_len is not None and limit and training.seq_len > limit:
        found.append(f"--seq-len {training.seq_len:,} is past the model's context of {limit:,} tokens: the model was "
                     "not trained on such sequences (the memory figures are still computed for it)")
    if training.micro_batch_size > 1:
        for method in dict.fromkeys(f.method for f in fits):
            cells = [f for f in fits if f.method == method]
            if cells and all(f.max_micro_batch_size < training.micro_batch_size for f in cells):
                best = max(f.max_micro_batch_size for f in cells)
                found.append(f"micro-batch {training.micro_batch_size} fits no GPU of the matrix with {method} "
                             f"(the largest that fits one is {best})")
    return found


def shape_disagreements(arch: Architecture, declared: Mapping[str, int], source: str) -> list[str]:
    """One line per model dimension a config file states (Megatron's --num-layers, --hidden-size, ...) that the
    model does not have: the file was written for another model, and the model's own dimensions are counted."""
    return [f"{source} states {name} {value:,} where the model has {getattr(arch, name):,}: the model's is counted"
            for name, value in declared.items() if getattr(arch, name, value) != value]
