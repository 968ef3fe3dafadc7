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


def _forward_matmuls(mods: LayerModules) -> list[tuple[int, int]]:
    """(in, out) features of a layer's aten.mm calls, in the order of its attention inputs, MLA's up-projections,
    attention output, then the MLP's (or the shared experts') inputs and outputs: the forward order of Llama-like
    layers, not of MLA's (q_a, q_b, kv_a, kv_b). Routed experts run grouped matmuls (not aten.mm) and the router is
    force-recomputed (per_op_sac_force_recompute_mm_shapes_by_fqns, job_config.py:661 at 238fa99): neither counts.
    Biased linears run aten.addmm, off the save list, which is not modelled (torchtitan's models have no biases)."""
    order = (*mods.attn_in, *mods.q_b, *mods.kv_b, *mods.attn_out, *mods.shared_in, *mods.mlp_in,
             *mods.shared_out, *mods.mlp_out)
    return [(m.in_features, m.out_features) for m in order for _ in range(max(1, round(m.per_layer)))]


def op_saved_matmul_flops(mods: LayerModules) -> float:
    """Forward FLOPs per token of the matmuls per-op checkpointing saves in a layer (the 1st, 3rd, ...)."""
    return sum(2 * i * o for n, (i, o) in enumerate(_forward_matmuls(mods)) if n % 2 == 0)


def op_saved_per_token(mods: LayerModules, *, p: int, r: int, hidden: int, attention_out: float,
                       attention_saved: bool) -> float:
    """Bytes per token one layer keeps under per-op selective checkpointing: its input (`r`-byte residual), the
    outputs of the 1st, 3rd, ... of its matmuls (`_forward_matmuls`) and, when the attention kernel is one of the
    saved SDPA ops, its output and logsumexp (`attention_out` bytes per token)."""
    saved = sum(o for n, (_, o) in enumerate(_forward_matmuls(mods)) if n % 2 == 0)
    return r * hidden + p * saved + (attention_out if attention_saved else 0)


def stage_checkpointing(act: ActivationEstimate, layers: int, own: int, chunks: int) -> tuple[float, float, float]:
    """For a pipeline stage holding `own` of the `layers` decoder layers in `chunks` model chunks: one micro-batch's
    checkpointed bytes on it, the share of its layers saved whole, and its recompute against the whole model's
    (Megatron's block method recomputes the first layers of every stage, so a stage's share is not own / layers)."""
    if act.gradient_checkpointing != "full" or layers <= 0:
        return act.checkpoint_inputs * own / max(1, layers), act.kept_share, 1.0
    whole = coverage(act.checkpoint_method, act.checkpoint_layers, layers)
    stage = coverage(act.checkpoint_method, act.checkpoint_layers, own, chunks)
    per_unit = act.checkpoint_inputs / whole.units if whole.units else 0.0
    kept = 1 - stage.covered / own if own else 0.0
    return per_unit * stage.units, kept, stage.group / whole.group if whole.group else 1.0


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


def tensor_parallel_notes(act: ActivationEstimate, tp: int) -> tuple[str, ...]:
    """What per-op checkpointing's saved outputs leave out under tensor parallelism (not measured on CPU yet)."""
    if act.gradient_checkpointing != "op" or tp <= 1:
        return ()
    return ("per-op checkpointing under TP: its saved outputs are split as the residual stream is; a row-parallel "
            "matmul's saved output is the whole sequence's partial sum before its reduce-scatter (whose output the "
            "policy saves too), which is not counted",)
