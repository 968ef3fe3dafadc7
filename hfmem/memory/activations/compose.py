"""The whole model's activation estimate, step by step: the layers, the embedding and head, the loss, the schedule."""

from __future__ import annotations

from hfmem.memory.activations.embedding import embedding_bytes
from hfmem.memory.activations.head import final_saved, head_keeps_input, loss
from hfmem.memory.activations.result import ActivationEstimate
from hfmem.memory.activations.schedule import (
    checkpointing,
    first_layer_adjustment,
    offloaded_bytes,
    retained_bytes,
)
from hfmem.memory.activations.spec import ActivationSettings, activation_spec
from hfmem.memory.activations.stack import compiled_layer_notes, stack
from hfmem.memory.activations.structure import LayerModules
from hfmem.model.architecture import Architecture
from hfmem.model.inventory import Inventory


def estimate_activations(arch: Architecture, inventory: Inventory, settings: ActivationSettings, *,
                         modules: tuple[LayerModules, LayerModules] | None = None,
                         cache: dict | None = None) -> ActivationEstimate:
    """Activation bytes for a micro-batch: per-layer figures, model-level terms, transients.

    `modules`: the result of layer_modules(arch, inventory), when the caller has it already;
    `cache`: a dict the caller keeps per model, so repeated calls reuse the per-layer forms.
    """
    spec = activation_spec(arch, inventory, settings, modules)
    cache = {} if cache is None else cache
    b, s = settings.micro_batch_size, settings.seq_len
    tokens = b * s
    notes: list[str] = []
    layers = stack(spec, s, tokens, cache, notes)
    embedding = embedding_bytes(spec, s, tokens)
    final = final_saved(spec).total * tokens
    step_loss = loss(spec, settings, tokens, notes)
    notes += compiled_layer_notes(spec, layers)
    adjustments = first_layer_adjustment(spec, settings, cache, notes)
    ckpt = checkpointing(spec, settings, layers, notes)
    embedding += ckpt.closure
    offloaded = offloaded_bytes(spec, settings, layers, embedding=embedding, final=final, adjustments=adjustments,
                                checkpoint_inputs=ckpt.inputs, kept_share=ckpt.kept_share, notes=notes)
    retained = retained_bytes(spec, settings, notes)
    # the final norm's saved tensors are offloaded with the decoder's; the head's input stays on the GPU
    head_input = spec.p * arch.hidden_size * tokens if head_keeps_input(spec) else 0
    released = step_loss.saved + (head_input if settings.activation_offloading else final)
    return ActivationEstimate(
        micro_batch_size=b,
        seq_len=s,
        attention=spec.kernel,
        gradient_checkpointing=settings.gradient_checkpointing,
        layers=tuple(layers),
        embedding=round(embedding),
        checkpoint_inputs=round(ckpt.inputs),
        final=round(final),
        loss=round(step_loss.saved),
        loss_peak=round(max(step_loss.peak, settings.dequant_workspace)),
        recompute=round(ckpt.recompute),
        adjustments=adjustments,
        notes=tuple(dict.fromkeys(notes)),
        kept_share=ckpt.kept_share,
        checkpoint_method=settings.checkpoint_method,
        checkpoint_layers=settings.checkpoint_layers,
        op_row_saved=ckpt.row_parallel[0],
        op_row_outputs=ckpt.row_parallel[1],
        offloaded=offloaded,
        retained=retained,
        dequant_workspace=settings.dequant_workspace,
        released=round(released),
    )
