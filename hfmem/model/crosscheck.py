"""Compare the meta-model parameter count with the checkpoint headers and explain any difference in words."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from hfmem.hub.safetensors import DTYPE_BYTES, Checkpoint
from hfmem.model.inventory import Inventory

# Tensor names that hold quantization metadata rather than parameters (GPTQ, AWQ, bnb, FP8, MXFP4).
_QUANT_AUX = re.compile(
    r"(scale_inv|weight_scale|input_scale|[._]scales?$|qzeros|g_idx|absmax|quant_map|quant_state|nested_|\.SCB$)"
)
_PACKED = re.compile(r"(qweight|_blocks$|\.weight_packed$)")
_LAYER = re.compile(r"\.layers\.(\d+)\.")


@dataclass
class CrossCheck:
    """status: "exact", "explained", "unexplained" or "unavailable"; difference = checkpoint - meta."""

    status: str
    meta_total: int | None
    checkpoint_total: int | None
    difference: int = 0
    explanations: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cross_check(inventory: Inventory | None, checkpoint: Checkpoint | None, config: dict[str, Any],
                num_layers: int) -> CrossCheck:
    if inventory is None or checkpoint is None:
        missing = "no safetensors checkpoint" if checkpoint is None else "no meta model"
        return CrossCheck("unavailable", inventory.total if inventory else None,
                          checkpoint.total if checkpoint else None, explanations=[f"{missing}: nothing to compare."])
    difference = checkpoint.total - inventory.total
    if difference == 0:
        return CrossCheck("exact", inventory.total, checkpoint.total)
    explained, words = 0, []
    for amount, text in _reasons(inventory, checkpoint, config, num_layers):
        if amount:
            explained += amount
            words.append(text)
    remaining = difference - explained
    if remaining:
        words.append(f"{remaining:+,} elements remain unexplained.")
    return CrossCheck("explained" if remaining == 0 else "unexplained", inventory.total, checkpoint.total,
                      difference, words)


def _reasons(inventory: Inventory, checkpoint: Checkpoint, config: dict[str, Any], num_layers: int):
    """Yield (elements, sentence) for each known cause of a difference."""
    tensors = checkpoint.tensors
    aux = sum(t.elements for n, t in tensors.items() if _QUANT_AUX.search(n))
    yield aux, f"{aux:,} elements are quantization scales/metadata, not parameters."

    mtp = int(config.get("num_nextn_predict_layers") or 0)
    extra_names = [n for n in tensors if _in_extra_layer(n, num_layers) and not _QUANT_AUX.search(n)]
    extra_layers = sorted({int(m.group(1)) for n in extra_names if (m := _LAYER.search(n))})
    extra = sum(tensors[n].elements for n in extra_names)
    reason = f"{mtp} multi-token-prediction layer(s) (num_nextn_predict_layers)" if mtp else "extra layer(s)"
    yield extra, (f"{extra:,} parameters are in {reason} {extra_layers} stored in the checkpoint "
                  "that transformers does not build.")

    stored_twice = sum(tensors[a].elements for a, b in inventory.tied if a in tensors and b in tensors)
    yield stored_twice, (f"{stored_twice:,} parameters are a tied weight stored twice "
                         "(the model ties them, so they count once).")

    buffers = sum(t.elements for n, t in tensors.items()
                  if n.rsplit(".", 1)[-1] in inventory.buffers and not _in_extra_layer(n, num_layers))
    yield buffers, f"{buffers:,} elements are buffers (not parameters) stored in the checkpoint."

    packed = [n for n, t in tensors.items() if _PACKED.search(n) and t.dtype in {"U8", "I32", "U32"}]
    if packed:
        bits = int((config.get("quantization_config") or {}).get("bits") or 4)
        stored = sum(tensors[n].elements for n in packed)
        logical = sum(tensors[n].elements * DTYPE_BYTES[tensors[n].dtype] * 8 // bits for n in packed)
        yield stored - logical, (f"{logical:,} parameters are packed {bits}-bit into {stored:,} stored elements of "
                                 f"{len(packed)} quantized tensors (e.g. {packed[0]}).")


def _in_extra_layer(name: str, num_layers: int) -> bool:
    match = _LAYER.search(name)
    return match is not None and int(match.group(1)) >= num_layers
