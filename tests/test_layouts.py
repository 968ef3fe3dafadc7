"""The layout search (hfmem.memory.layouts): the fewest GPUs, the usual order of preference among the layouts of
that many, each dimension within the model's limits, and the search wired to hfmem's own per-rank estimate."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tiny_models import reference_model

from hfmem.hardware.gpus import find_gpu
from hfmem.memory.estimate import Context, estimate_in
from hfmem.memory.layouts import (
    Candidate,
    Limits,
    attention_bound,
    candidates,
    layout_settings,
    per_rank_required,
    search,
)
from hfmem.memory.settings import TrainingSettings

LIMITS = Limits(heads=32, kv_heads=8, layers=32, seq_len=8192, tp_domain=8)


def test_candidates_respect_each_dimensions_limit_and_fill_the_rest_with_dp() -> None:
    for n in (1, 2, 8, 64):
        found = candidates(n, LIMITS)
        assert found[0] == Candidate(dp=n)  # plain FSDP first
        assert len(set(found)) == len(found)
        assert all(c.num_gpus == n and c.tp <= 8 and c.pp <= 32 for c in found)
    few_kv = Limits(heads=32, kv_heads=4, layers=2, seq_len=1000, tp_domain=8)
    found = candidates(64, few_kv)
    assert max(c.tp for c in found) == 4 and max(c.pp for c in found) == 2
    assert {c.cp for c in found} == {1, 2, 4, 8}  # the divisors of 1000 among the powers of two


def test_the_order_is_tp_before_pp_before_cp() -> None:
    order = [(c.cp, c.pp, c.tp) for c in candidates(16, LIMITS)]
    assert order == sorted(order)


def _toy(state: float, act: float, sequence_bound: bool = False):
    """A rank's bytes: the model state split by every rank, activations by TP and CP (PP keeps pp micro-batches of
    1/pp of the layers: the same)."""
    def bytes_of(c: Candidate) -> int:
        return round(state / c.num_gpus + act / (c.cp if sequence_bound else c.tp * c.cp))
    return bytes_of


def test_search_finds_the_fewest_gpus_and_the_first_layout_there() -> None:
    # state needs 16 GPUs' worth of memory with 10 spare for activations of 80: only TP 8 or CP 8 brings them down
    found = search(_toy(16 * 60, 80), 70, LIMITS)
    assert found is not None
    assert found.layout == Candidate(tp=8, dp=2)
    assert not any(_toy(16 * 60, 80)(c) <= 70 for c in candidates(8, LIMITS))
    assert "TP 8 inside a node" in found.reason and "FSDP over 2" in found.reason
    sequence = search(_toy(16 * 60, 80, sequence_bound=True), 70, LIMITS)
    assert sequence is not None and sequence.layout.cp == 8 and "8,192-token sequence" in sequence.reason
    assert search(_toy(1, 1000), 10, LIMITS, max_gpus=64) is None


def test_search_over_hfmem_estimates_lays_out_a_70b_pretraining() -> None:
    arch, inventory = reference_model("meta-llama/Llama-2-70b-hf")
    ctx = Context(arch, inventory)
    s = TrainingSettings(seq_len=4096, gradient_checkpointing="selective")
    required = per_rank_required(lambda t: estimate_in(ctx, t).per_gpu_bytes.required, s)
    usable = find_gpu("h100").usable_bytes
    found = search(required, usable, Limits.of(arch, 4096, 8))
    assert found is not None and found.per_rank_bytes <= usable
    n = found.layout.num_gpus
    assert all((required(c) or usable + 1) > usable for c in candidates(n // 2, Limits.of(arch, 4096, 8)))
    assert found.layout.tp == 8  # TP fills a node before any other dimension
    chosen = estimate_in(ctx, layout_settings(s, found.layout))
    assert chosen.per_gpu_bytes.required == found.per_rank_bytes
    assert chosen.assumptions["parallel"]["layout"].startswith("TP8+SP")


def test_a_layout_the_model_cannot_take_is_skipped() -> None:
    arch, inventory = reference_model("meta-llama/Llama-2-70b-hf")
    ctx = Context(arch, inventory)
    required = per_rank_required(lambda t: estimate_in(ctx, t).per_gpu_bytes.required, TrainingSettings(seq_len=4096))
    assert required(Candidate(cp=3)) is None  # 4096 tokens do not split in 3
    assert required(replace(Candidate(), pp=2)) is not None


@pytest.mark.parametrize("layout", [Candidate(tp=8, pp=2), Candidate(dp=2, cp=4), Candidate(dp=8)])
def test_layouts_describe_themselves_as_the_issue_writes_them(layout: Candidate) -> None:
    assert layout.describe() == {16: "TP8·PP2", 8: "FSDP2·CP4" if layout.cp > 1 else "FSDP8"}[layout.num_gpus]


@pytest.mark.parametrize(("model", "seq", "bound"), [("meta-llama/Meta-Llama-3-8B", 131072, True),
                                                      ("meta-llama/Meta-Llama-3-8B", 8192, False),
                                                      ("meta-llama/Llama-2-70b-hf", 65536, False)])
def test_a_sequence_is_attention_bound_past_the_layers_linear_work(model: str, seq: int, bound: bool) -> None:
    """Llama 3 8B: 218M linear weights a layer against 4,096 x seq attention multiply-adds a token, so past 53K
    tokens; Llama 2 70B (856M a layer over 8,192) past 104K."""
    arch, inventory = reference_model(model)
    assert attention_bound(arch, inventory, seq) is bound
    order = [(c.tp, c.pp, c.cp) for c in candidates(16, Limits.of(arch, seq, 8, inventory))]
    assert order == sorted(order) if bound else order == sorted(order, key=lambda k: (k[2], k[1], k[0]))


def test_a_128k_llama_3_8b_is_laid_out_with_context_parallelism() -> None:
    """The issue's case: full fine-tuning at 131,072 tokens with full checkpointing on H100s gets a CP layout on one
    node, with the reason CP was chosen over TP."""
    arch, inventory = reference_model("meta-llama/Meta-Llama-3-8B")
    ctx = Context(arch, inventory)
    s = TrainingSettings(seq_len=131072, gradient_checkpointing="full")
    required = per_rank_required(lambda t: estimate_in(ctx, t).per_gpu_bytes.required, s)
    found = search(required, find_gpu("h100").usable_bytes, Limits.of(arch, 131072, 8, inventory))
    assert found is not None and found.layout.cp > 1 and found.layout.tp == 1 and found.layout.num_gpus <= 8
    assert "whose attention outweighs the linear layers" in found.reason
