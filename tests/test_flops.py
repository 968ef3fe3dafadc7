"""hfmem's FLOPs per token against torch's FlopCounterMode on real (tiny) transformers models, one per fixture family.

Each model is a fixture config shrunk by tests/tiny_models.py, built on CPU in fp32 and run forward (and backward)
under torch.utils.flop_counter.FlopCounterMode (tests/flop_counts.py); hfmem counts the same step from the config
alone, within 2%.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).parent))

from flop_counts import (
    RANK,
    SEQ,
    adapted,
    build,
    counted,
    families,
    fixture_types,
    prepare,
    tiny,
)

from hfmem.compute.flops import (
    CHECKPOINTING,
    METHODS,
    attention_pairs,
    forward_flops,
    training_flops,
)
from hfmem.errors import InvalidInputError
from hfmem.memory.settings import CHECKPOINTING as SETTING_CHECKPOINTING
from hfmem.memory.settings import METHODS as SETTING_METHODS

TOLERANCE = 0.02
FAMILIES = families()


def test_every_fixture_family_is_covered() -> None:
    assert fixture_types() == set(FAMILIES), f"families without a tiny model: {sorted(fixture_types() - set(FAMILIES))}"


def test_the_switches_are_the_settings_values() -> None:
    assert CHECKPOINTING == SETTING_CHECKPOINTING and METHODS == SETTING_METHODS


def _close(hfmem: float, measured: float) -> None:
    assert abs(hfmem - measured) <= TOLERANCE * measured, f"hfmem {hfmem:,.0f} vs FlopCounterMode {measured:,.0f} per token"


@pytest.mark.parametrize("model_id", FAMILIES.values(), ids=FAMILIES.keys())
def test_forward_and_full_training(model_id: str) -> None:
    config, arch, inventory = tiny(model_id)
    fwd = forward_flops(arch, inventory, SEQ)
    model = build(config)
    _close(fwd.total, counted(model, backward=False))
    _close(training_flops(arch, fwd).hardware, counted(model, backward=True))


@pytest.mark.parametrize("model_id", FAMILIES.values(), ids=FAMILIES.keys())
def test_full_checkpointing_recomputes_every_layer(model_id: str) -> None:
    """transformers' gradient checkpointing, reentrant: each layer's forward runs again in backward."""
    config, arch, inventory = tiny(model_id)
    model = prepare(build(config), checkpointing=True)
    _close(training_flops(arch, forward_flops(arch, inventory, SEQ), checkpointing="full").hardware,
           counted(model, backward=True))


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointed"])
@pytest.mark.parametrize("model_id", FAMILIES.values(), ids=FAMILIES.keys())
def test_lora_with_peft(model_id: str, checkpointing: bool) -> None:
    """PEFT LoRA on every nn.Linear but the head: the frozen base computes input gradients only."""
    config, arch, inventory = tiny(model_id)
    groups, names = adapted(arch, inventory)
    model = prepare(build(config), checkpointing=checkpointing, lora_names=names)
    expected = training_flops(arch, forward_flops(arch, inventory, SEQ), method="lora", adapters=groups, rank=RANK,
                              checkpointing="full" if checkpointing else "off")
    _close(expected.hardware, counted(model, backward=True))


def test_selective_checkpointing_recomputes_the_attention_core() -> None:
    """Eager attention under torch.utils.checkpoint (Megatron's selective recomputation): the core runs twice."""
    import transformers
    from torch.utils.checkpoint import checkpoint
    from transformers.models.llama.modeling_llama import eager_attention_forward

    def checkpointed(module, query, key, value, attention_mask, **kwargs):
        return checkpoint(lambda q, k, v: eager_attention_forward(module, q, k, v, attention_mask, **kwargs),
                          query, key, value, use_reentrant=False)

    transformers.AttentionInterface.register("hfmem_checkpointed_eager", checkpointed)
    config, arch, inventory = tiny("meta-llama/Meta-Llama-3-8B")
    model = build(config)
    model.config._attn_implementation = "hfmem_checkpointed_eager"
    fwd = forward_flops(arch, inventory, SEQ)
    expected = training_flops(arch, fwd, checkpointing="selective")
    assert expected.recompute == fwd.attention > 0
    _close(expected.hardware, counted(model, backward=True))


def test_multipliers_are_the_textbook_ones() -> None:
    """3 forwards for full training; about 2 for LoRA; one more (of the layers) with full checkpointing."""
    _, arch, inventory = tiny("meta-llama/Meta-Llama-3-8B")
    fwd = forward_flops(arch, inventory, SEQ)
    assert training_flops(arch, fwd).multiplier == pytest.approx(3.0)
    assert training_flops(arch, fwd, checkpointing="full").multiplier == pytest.approx(3.0 + fwd.in_layers / fwd.total)
    lora = training_flops(arch, fwd, method="lora", adapters=adapted(arch, inventory)[0], rank=RANK)
    assert 2.0 < lora.multiplier < 2.2 and lora.backward_weight < 0.05 * fwd.total


@pytest.mark.parametrize("seq, window", [(64, None), (64, 16), (7, 16), (33, 1)])
def test_masked_pairs_are_the_mask_entries(seq: int, window: int | None) -> None:
    """skip_masked counts the (query, key) pairs a causal (sliding-window) mask keeps, counted from the mask itself."""
    rows, cols = torch.arange(seq)[:, None], torch.arange(seq)[None, :]
    keep = (cols <= rows) & ((rows - cols) < (window or seq))
    assert attention_pairs(seq, causal=True, window=window, skip_masked=True) == int(keep.sum())
    assert attention_pairs(seq, causal=True, window=window, skip_masked=False) == seq * seq
    assert attention_pairs(seq, causal=False, window=window, skip_masked=True) == seq * seq


def test_skipping_masked_blocks_halves_causal_attention_only() -> None:
    _, arch, inventory = tiny("meta-llama/Meta-Llama-3-8B")
    full, causal = forward_flops(arch, inventory, 1024), forward_flops(arch, inventory, 1024, skip_masked=True)
    assert causal.attention == pytest.approx(full.attention * (1024 + 1) / 2048) and causal.linear == full.linear
    _, bert, bert_inventory = tiny("google-bert/bert-large-uncased")
    assert forward_flops(bert, bert_inventory, 512, skip_masked=True).attention == forward_flops(bert, bert_inventory, 512).attention


def test_moe_counts_the_active_experts_only() -> None:
    """Mixtral's routed experts: top-2 of 8 per token; the router's h x E logits on top."""
    _, arch, inventory = tiny("mistralai/Mixtral-8x7B-v0.1")
    fwd = forward_flops(arch, inventory, SEQ)
    every_expert = sum(2 * g.in_features * g.out_features * g.count for g in inventory.linears if g.component == "experts")
    assert fwd.linears["experts"] == pytest.approx(every_expert * 2 / 8)
    assert fwd.linears["router"] == 2 * arch.hidden_size * arch.num_experts * arch.num_layers


@pytest.mark.parametrize("kwargs", [{"method": "dora"}, {"checkpointing": "partial"}, {"method": "lora", "rank": 0}])
def test_bad_switches_are_one_line_errors(kwargs: dict[str, Any]) -> None:
    _, arch, inventory = tiny("meta-llama/Meta-Llama-3-8B")
    fwd = forward_flops(arch, inventory, SEQ)
    with pytest.raises(InvalidInputError) as err:
        training_flops(arch, fwd, adapters=adapted(arch, inventory)[0], **kwargs)
    assert "\n" not in str(err.value)
    with pytest.raises(InvalidInputError):
        forward_flops(arch, inventory, 0)
