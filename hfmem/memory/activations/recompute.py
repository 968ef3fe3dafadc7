"""Which decoder layers full checkpointing recomputes, and what per-op selective checkpointing saves in a layer.

Full checkpointing's layer methods follow Megatron-LM's checkpointed_forward (megatron/core/recompute.py:157-181 at
d98e8a6, run per model chunk of a pipeline stage): uniform wraps groups of recompute_num_layers layers, each keeping
its input; block wraps the first recompute_num_layers layers one by one and leaves the rest whole. torchtitan's
layer-selective option (torchtitan/distributed/activation_checkpoint.py:27-49 at 238fa99) wraps the layers whose
1-based count on the rank is a multiple of selective_ac_option. Its per-op option (L52-137 there) saves, in every
layer, the outputs of the ops of `_op_sac_save_list` (torchtitan/models/llama3/infra/parallelize.py:36-52: aten.mm,
the SDPA kernels, reduce_scatter, max, flex attention) except every second aten.mm, and recomputes the rest.
"""

from __future__ import annotations

from math import ceil
from typing import NamedTuple

from hfmem.memory.activations.result import ActivationEstimate
from hfmem.memory.activations.structure import LayerModules, layer_plan
from hfmem.model.architecture import Architecture


class Coverage(NamedTuple):
    """How full checkpointing covers a stage's layers, per micro-batch."""

    units: int
    """Checkpointed regions, each keeping its input for the recompute."""
    covered: int
    """Layers inside a checkpointed region: their activations are recomputed, not saved."""
    group: int
    """Layers one region recomputes at once in backward."""


def coverage(method: str, n: int, layers: int, chunks: int = 1) -> Coverage:
    """Full checkpointing's regions over `layers` decoder layers split into `chunks` model chunks (a pipeline
    stage's virtual stages; each chunk is checkpointed on its own, as Megatron's TransformerBlock is)."""
    if layers <= 0:
        return Coverage(0, 0, 0)
    chunks = max(1, min(chunks, layers))
    per_chunk = [layers // chunks + (1 if i < layers % chunks else 0) for i in range(chunks)]
    if method == "uniform":
        return Coverage(sum(ceil(c / n) for c in per_chunk), layers, min(n, max(per_chunk)))
    if method == "block":
        covered = sum(min(n, c) for c in per_chunk)
        return Coverage(covered, covered, 1)
    if method == "every":
        return Coverage(layers // n, layers // n, 1)
    raise ValueError(f"unknown checkpoint method {method!r}")


def _forward_matmuls(mods: LayerModules) -> list[tuple[int, int, bool]]:
    """(in, out, row-parallel) of a layer's aten.mm calls, in the order of its attention inputs, MLA's
    up-projections, attention output, then the MLP's (or the shared experts') inputs and outputs: the forward order
    of Llama-like layers, not of MLA's (q_a, q_b, kv_a, kv_b). Row-parallel: the attention output and MLP output
    projections (torchtitan's and Megatron's TP plans split them by rows). Routed experts run grouped matmuls (not
    aten.mm) and the router is force-recomputed (per_op_sac_force_recompute_mm_shapes_by_fqns, job_config.py:661 at
    238fa99): neither counts. Biased linears run aten.addmm, off the save list, which is not modelled (torchtitan's
    models have no biases)."""
    roles = ((mods.attn_in, False), (mods.q_b, False), (mods.kv_b, False), (mods.attn_out, True),
             (mods.shared_in, False), (mods.mlp_in, False), (mods.shared_out, True), (mods.mlp_out, True))
    return [(m.in_features, m.out_features, row) for group, row in roles for m in group
            for _ in range(max(1, round(m.per_layer)))]


def op_saved_matmul_flops(mods: LayerModules) -> float:
    """Forward FLOPs per token of the matmuls per-op checkpointing saves in a layer (the 1st, 3rd, ...)."""
    return sum(2 * i * o for n, (i, o, _) in enumerate(_forward_matmuls(mods)) if n % 2 == 0)


def op_saved_per_token(mods: LayerModules, *, p: int, r: int, hidden: int, attention_out: float,
                       attention_saved: bool) -> float:
    """Bytes per token one layer keeps under per-op selective checkpointing: its input (`r`-byte residual), the
    outputs of the 1st, 3rd, ... of its matmuls (`_forward_matmuls`) and, when the attention kernel is one of the
    saved SDPA ops, its output and logsumexp (`attention_out` bytes per token)."""
    saved = sum(o for n, (_, o, _) in enumerate(_forward_matmuls(mods)) if n % 2 == 0)
    return r * hidden + p * saved + (attention_out if attention_saved else 0)


def op_row_parallel_per_token(mods: LayerModules, *, p: int, hidden: int) -> tuple[float, float]:
    """Under TP with sequence parallelism, per token of a layer: the bytes of the row-parallel matmul outputs
    per-op checkpointing saves (each rank's is the whole sequence's partial sum, before the reduce-scatter), and
    those of the reduce-scatters' outputs, which torchtitan's save list keeps as well (whole, before the split)."""
    matmuls = _forward_matmuls(mods)
    saved = sum(o for n, (_, o, row) in enumerate(matmuls) if row and n % 2 == 0)
    return p * saved, p * hidden * sum(1 for _, _, row in matmuls if row)


def stage_checkpointing(act: ActivationEstimate, layers: int, own: int, chunks: int, *, tp: int = 1,
                        sequence_parallel: bool = False, cp: int = 1) -> tuple[float, float, float, float]:
    """For a pipeline stage holding `own` of the `layers` decoder layers in `chunks` model chunks: one micro-batch's
    checkpointed bytes on it (before the split of the residual stream), the share of its layers saved whole, its
    recompute against the whole model's (Megatron's block method recomputes the first layers of every stage, so a
    stage's share is not own / layers), and, under per-op checkpointing with TP and sequence parallelism, the
    bytes its rank keeps beyond that split (`op_row_parallel_per_token`), per micro-batch."""
    if act.gradient_checkpointing != "full" or layers <= 0:
        share = own / max(1, layers)
        extra = 0.0
        if act.gradient_checkpointing == "op" and tp > 1 and sequence_parallel:
            extra = (act.op_row_saved * (1 - 1 / tp) + act.op_row_outputs / tp) / cp * share
        return act.checkpoint_inputs * share, act.kept_share, 1.0, extra
    whole = coverage(act.checkpoint_method, act.checkpoint_layers, layers)
    stage = coverage(act.checkpoint_method, act.checkpoint_layers, own, chunks)
    per_unit = act.checkpoint_inputs / whole.units if whole.units else 0.0
    kept = 1 - stage.covered / own if own else 0.0
    return per_unit * stage.units, kept, stage.group / whole.group if whole.group else 1.0, 0.0


def recomputed_share(arch: Architecture, modules: tuple[LayerModules, LayerModules], *, mode: str, method: str,
                     n: int, kernel: str, in_layers: float, attention: float) -> float:
    """The share of the layers' forward FLOPs (`in_layers` per token, `attention` of them the attention core) that
    checkpointing recomputes: full, the layers inside its regions; per-op, all but the saved matmuls and, under
    SDPA, the attention kernel."""
    plan = layer_plan(arch)
    if mode == "full":
        layers = sum(count for _, _, count in plan)
        return coverage(method, n, layers).covered / layers if layers else 1.0
    if mode == "op" and in_layers > 0:
        dense, moe = modules
        saved = sum(count * op_saved_matmul_flops(moe if mlp_kind == "moe" else dense)
                    for kind, mlp_kind, count in plan if kind != "mamba")
        return max(0.0, 1 - (saved + (attention if kernel == "sdpa" else 0)) / in_layers)
    return 1.0


def tensor_parallel_notes(act: ActivationEstimate, tp: int, sequence_parallel: bool) -> tuple[str, ...]:
    """What per-op checkpointing's saved outputs leave out under tensor parallelism without sequence parallelism
    (not measured)."""
    if act.gradient_checkpointing != "op" or tp <= 1 or sequence_parallel:
        return ()
    return ("per-op checkpointing under TP without sequence parallelism: its saved outputs are counted whole on "
            "every rank, the column-parallel matmuls' shards and the row-parallel ones' whole-sequence partial sums "
            "alike (measured with sequence parallelism only)",)
