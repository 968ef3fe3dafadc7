"""Pieces every renderer shares: the architecture rows, the method titles, the verdict marks and their legend, the
one-line settings summary, the napkin-rule contrast, and untrusted text made visible on one line."""

from __future__ import annotations

import re
from typing import Any

from hfmem.memory.advice import fit_grid, short_gib
from hfmem.units import count

# Control, zero-width and bidi-override characters: they could hide or reorder what a reader sees.
_INVISIBLE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")

ARCH_ROWS = [
    ("model_type", "model type"), ("model_class", "class"), ("num_layers", "layers"), ("hidden_size", "hidden"),
    ("num_attention_heads", "heads"), ("num_key_value_heads", "KV heads"), ("head_dim", "head dim"),
    ("attention_kind", "attention"), ("intermediate_size", "intermediate"), ("vocab_size", "vocab"),
    ("num_experts", "experts"), ("experts_per_token", "experts / token"), ("moe_intermediate_size", "expert width"),
    ("max_position_embeddings", "max positions"), ("sliding_window", "sliding window"), ("dtype", "stored dtype"),
]
METHOD_TITLES = {"full": "full fine-tune", "lora": "LoRA", "qlora": "QLoRA"}
MARKS = {"fits": "✓", "change": "⚠", "gpus": "✗", "none": "✗"}
"""A verdict's mark in the terminal and in markdown (memory.advice.VERDICTS)."""
EMOJI = {"fits": "✅", "change": "⚠️", "gpus": "❌", "none": "❌"}
"""The same marks as GitHub renders them, for the pull-request comment."""


def visible(text: Any) -> str:
    """Untrusted text on one line, its invisible characters turned into spaces (every renderer escapes from this)."""
    return " ".join(_INVISIBLE.sub(" ", str(text)).split())


def parameter_count(params: dict[str, Any]) -> str:
    """The parameter total, marked "≈ … approximate" when it is one (the reason is in the notes and the JSON)."""
    text = count(params["total"])
    if not params.get("approximate"):
        return text
    return f"≈{text[:-1]}, approximate)" if text.endswith(")") else f"≈{text} (approximate)"


def legend(marks: dict[str, str] = MARKS, batch: bool = True) -> str:
    """The one legend shown under every fit table, in that table's marks (`batch`: its cells show b≤N)."""
    fits = f"{marks['fits']} fits" + (", b≤N: largest micro-batch" if batch else "")
    return f"{fits} · {marks['change']} fits with the change · {marks['gpus']} needs N GPUs"


def settings_line(report: dict[str, Any]) -> str:
    """The assumptions every cell shares, in one line."""
    a = report["estimates"][0]["assumptions"]
    overhead = a["overhead"]
    lora = a.get("lora") or {}
    lora_text = f" · LoRA r={lora['rank']} on {','.join(lora['targets'])}" if lora else ""
    return (f"{a['dtype']} · {a['optimizer']} · seq {a['seq_len']:,} · micro-batch {a['micro_batch_size']} · "
            f"checkpointing {a['gradient_checkpointing']} · {a['attention_kernel_used']} · "
            f"+{overhead['cuda_context_gib']} GiB CUDA context, +{overhead['fragmentation']:.0%} fragmentation"
            f"{lora_text}")


def napkin_line(report: dict[str, Any]) -> str:
    """The napkin rule as a contrast, in the table's unit, beside each method's figure from the table's own cells."""
    napkin = report["estimates"][0]["rule_of_thumb"]["napkin_gib"]
    methods, rows = fit_grid(report)
    cells = rows[0][2] if rows else {}
    figures = ", ".join(f"{METHOD_TITLES.get(m, m).removesuffix(' fine-tune')} "
                        f"{short_gib(cells[m]['single_gpu']['total_bytes'])}"
                        for m in methods if m in cells)
    return f"\"6 × params(B) GB\" napkin: {napkin:,.1f} GiB · hfmem: {figures} GiB"
