"""Which layers full checkpointing covers (Megatron's uniform and block methods, torchtitan's every n-th layer), per
pipeline stage, and torchtitan's per-op policy against a real checkpointed forward (bench/checkpoint_granularity.py
prints the whole table)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tiny_models import tiny_config

from hfmem.memory.activations import ActivationSettings, estimate_activations
from hfmem.memory.activations.recompute import Coverage, coverage
from hfmem.memory.parallel import Layout, rank_activations
from hfmem.model.architecture import read_architecture
from hfmem.model.meta import build_inventory

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

CONFIG = tiny_config("meta-llama/Meta-Llama-3-8B", 8)
ARCH, INVENTORY = read_architecture(CONFIG), build_inventory(CONFIG)


@pytest.mark.parametrize(("method", "n", "layers", "chunks", "expected"), [
    ("uniform", 1, 8, 1, Coverage(8, 8, 1)),
    ("uniform", 3, 8, 1, Coverage(3, 8, 3)),  # groups of 3, 3, 2 (recompute.py:157-166's while loop)
    ("uniform", 3, 8, 2, Coverage(4, 8, 3)),  # per chunk of 4: groups of 3 and 1
    ("block", 2, 8, 1, Coverage(2, 2, 1)),
    ("block", 2, 8, 2, Coverage(4, 4, 1)),  # the first 2 of each chunk
    ("block", 9, 8, 1, Coverage(8, 8, 1)),
    ("every", 2, 8, 1, Coverage(4, 4, 1)),  # layers 2, 4, 6, 8 (1-based count % 2 == 0)
    ("every", 3, 8, 1, Coverage(2, 2, 1)),
])
def test_coverage(method: str, n: int, layers: int, chunks: int, expected: Coverage) -> None:
    assert coverage(method, n, layers, chunks) == expected


def _estimate(gc: str, method: str = "uniform", n: int = 1):
    return estimate_activations(ARCH, INVENTORY, ActivationSettings(
        micro_batch_size=2, seq_len=128, attention="sdpa", gradient_checkpointing=gc, checkpoint_method=method,
        checkpoint_layers=n))


def test_block_counts_per_pipeline_stage() -> None:
    """Megatron's block method recomputes the first N layers of every stage: with 8 layers, PP 2 and N = 2, each
    stage keeps 2 of its 4 layers whole, where the unsplit model keeps 6 of 8."""
    whole, off, full = _estimate("full", "block", 2), _estimate("off"), _estimate("full")
    layer, per_input = off.layers[0].bytes, full.checkpoint_inputs // 8
    assert whole.kept_share == 6 / 8 and whole.checkpoint_inputs == 2 * per_input
    layout = Layout(pp=2, micro_batches=4)
    for stage in (0, 1):
        rank = rank_activations(whole, ARCH, layout, stage)
        flight = 2 - stage  # 1F1B: pp - stage micro-batches in flight
        assert rank.kept_share == 2 / 4 and rank.checkpoint_inputs == 2 * per_input * flight
        layers_whole = rank.saved - rank.embedding - rank.final - rank.loss - rank.adjustments - rank.checkpoint_inputs
        assert layers_whole == 2 * layer * flight
    uniform = rank_activations(_estimate("full", "uniform", 2), ARCH, Layout(pp=2, vpp=2, micro_batches=4), 0)
    assert uniform.recompute == 2 * layer  # a group of 2 recomputed at once, per chunk of 2 layers


def test_layer_and_op_checkpointing_against_a_real_forward() -> None:
    """torchtitan's every-2nd-layer and per-op policies on a 2-layer tiny Llama, measured (torch.utils.checkpoint,
    non-reentrant, with torchtitan's selective-checkpoint policy) within 5% of hfmem's saved bytes, and the per-op
    step's matmul FLOPs (what it recomputes included) within 1%."""
    pytest.importorskip("transformers")
    from checkpoint_granularity import layers_of, measured, predicted, step_flops
    from saved_activations import build_model

    for gc, method, n in (("full", "every", 2), ("op", "uniform", 1)):
        model = build_model(tiny_config("meta-llama/Meta-Llama-3-8B", 2), "sdpa")
        got = measured(model, layers_of(method, n, 2), op_level=gc == "op")
        assert predicted(gc, method, n, layers=2) == pytest.approx(got, rel=0.05)
    expected_flops, counted_flops = step_flops("op", "uniform", 1)  # what the backward recomputes, FlopCounterMode
    assert expected_flops == pytest.approx(counted_flops, rel=0.01)
