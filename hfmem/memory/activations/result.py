"""The activation estimate as data: per-layer figures, model-level terms, and what is stored, transient, the peak."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LayerActivation:
    """Saved bytes of one layer of a kind, with the named terms that make it up."""

    kind: str
    count: int
    bytes: int
    terms: dict[str, int]
    attention_core_bytes: int
    """The a·s² part (attention matrix, its dropout mask): what selective checkpointing recomputes."""
    backward_working: int = 0
    """What the layer's backward allocates at once on top of its saved tensors (its intermediates' gradients)."""

    def to_dict(self) -> dict[str, Any]:
        """The layer's figures as JSON-ready data."""
        return {"kind": self.kind, "count": self.count, "bytes": self.bytes, "terms": self.terms,
                "attention_core_bytes": self.attention_core_bytes, "backward_working": self.backward_working}


def body_bytes(layers: Sequence[LayerActivation], gradient_checkpointing: str, checkpoint_inputs: int,
               kept_share: float = 0.0) -> int:
    """What the decoder layers keep saved through the forward: with full checkpointing the checkpointed regions'
    inputs and the whole activations of the `kept_share` of layers outside them; with per-op checkpointing what
    each layer keeps (its input and the saved op outputs); all but the attention core with selective
    checkpointing; every layer's activations otherwise."""
    if gradient_checkpointing in ("full", "op"):
        whole = sum(layer.bytes * layer.count for layer in layers)
        return checkpoint_inputs + round(kept_share * whole)
    if gradient_checkpointing == "selective":
        return sum((layer.bytes - layer.attention_core_bytes) * layer.count for layer in layers)
    return sum(layer.bytes * layer.count for layer in layers)


@dataclass(frozen=True)
class ActivationEstimate:
    """Activation memory for one micro-batch: per-layer figures, the model-level terms and the peak."""

    micro_batch_size: int
    seq_len: int
    attention: str
    """The attention kernel the estimate assumes."""
    gradient_checkpointing: str
    layers: tuple[LayerActivation, ...]
    embedding: int
    """Saved at the embedding: token ids (if trained), embedding dropout mask, RoPE cos/sin tables."""
    checkpoint_inputs: int
    """With full checkpointing: every checkpointed region's input (the embedding output for layer 0); with
    per-op checkpointing: every layer's input and the op outputs it keeps."""
    final: int
    """Final norm and the LM head's input."""
    loss: int
    """Saved by the loss: log_softmax's fp32 output over the vocabulary, the shifted labels."""
    loss_peak: int
    """Transient at the start of backward: two more fp32 (b·s, V) buffers (nll and log_softmax grads)."""
    recompute: int
    """Transient with checkpointing: one layer's activations recomputed during backward."""
    adjustments: int
    """Corrections to the per-layer sum (layer 0 saves less when its input needs no grad)."""
    notes: tuple[str, ...] = ()
    kept_share: float = 0.0
    """With full checkpointing: the share of decoder layers outside every checkpointed region, saved whole."""
    checkpoint_method: str = "uniform"
    """Which layers full checkpointing recomputes (TrainingSettings.checkpoint_method)."""
    checkpoint_layers: int = 1
    """The count checkpoint_method reads (TrainingSettings.checkpoint_layers)."""
    op_row_saved: int = 0
    """Per-op checkpointing: the saved row-parallel matmul outputs (in checkpoint_inputs), which under TP with
    sequence parallelism every rank keeps whole (partial sums before the reduce-scatter)."""
    op_row_outputs: int = 0
    """Per-op checkpointing: the row-parallel projections' outputs (hidden-sized), whose reduce-scatter outputs
    torchtitan's save list keeps under TP with sequence parallelism."""
    offloaded: int = 0
    """With activation offloading: saved bytes held in CPU pinned memory instead of on the GPU."""
    retained: int = 0
    """The previous step's layer inputs still held as ctx attributes at the end of this forward (see
    ActivationSettings.retained_inputs): on the GPU on top of `stored` until the loop drops that step."""
    dequant_workspace: int = 0
    """QLoRA: the largest weight dequantised to the compute dtype, alive while its layer computes."""
    released: int = 0
    """Saved bytes the loss and the head free before any decoder layer's backward runs (the loss's saved
    tensors, the final norm's and the head's inputs, as far as they are on the GPU)."""

    @property
    def backward_working(self) -> int:
        """The largest layer's backward working set (its intermediates' gradients)."""
        return max((layer.backward_working for layer in self.layers), default=0)

    @property
    def saved(self) -> int:
        """Bytes saved for backward at the end of the forward pass (what saved_tensors_hooks see),
        wherever they live (with activation offloading most of them are in CPU memory)."""
        body = body_bytes(self.layers, self.gradient_checkpointing, self.checkpoint_inputs, self.kept_share)
        return max(0, self.embedding + body + self.final + self.loss + self.adjustments)

    @property
    def stored(self) -> int:
        """Saved bytes that stay on the GPU through the backward pass (`saved` less what is offloaded)."""
        return max(0, self.saved - self.offloaded)

    @property
    def layer_backward(self) -> int:
        """A decoder layer's backward on top of `stored`: its recompute (with checkpointing) and its working set,
        less what the loss and the head have freed by then (negative when that moment is below `stored`)."""
        return self.recompute + self.backward_working - self.released

    @property
    def first_layer_backward(self) -> int:
        """The first decoder layer's backward, the last to run (every later gradient exists by then): its saved
        tensors or recompute, its layer input with full checkpointing, its working set and the embedding's."""
        layer = max((layer.bytes for layer in self.layers), default=0) + self.dequant_workspace
        layers = max(1, sum(x.count for x in self.layers))
        layer_input = self.checkpoint_inputs // layers  # 0 without full checkpointing
        return layer + layer_input + self.backward_working + self.embedding

    @property
    def transient(self) -> int:
        """The largest transient on top of `stored` during the step: the loss backward, a layer's backward (its
        recompute and working set), or the previous step's retained inputs at the end of the forward, while the
        last 4-bit weight is dequantised."""
        end_of_forward = self.retained + self.dequant_workspace if self.retained else 0
        return max(self.loss_peak, self.layer_backward, end_of_forward)

    @property
    def peak(self) -> int:
        """The activation peak: what stays stored plus the largest transient."""
        return self.stored + self.transient

    def per_layer(self) -> dict[str, int]:
        """Saved bytes of one layer, by layer kind."""
        return {layer.kind: layer.bytes for layer in self.layers}

    def to_dict(self) -> dict[str, Any]:
        """The estimate as JSON-ready data, derived figures included."""
        return {"micro_batch_size": self.micro_batch_size, "seq_len": self.seq_len, "attention": self.attention,
                "gradient_checkpointing": self.gradient_checkpointing, "checkpoint_method": self.checkpoint_method,
                "checkpoint_layers": self.checkpoint_layers, "kept_share": self.kept_share,
                "per_layer": [layer.to_dict() for layer in self.layers],
                **{name: getattr(self, name) for name in FIGURES}, "notes": list(self.notes)}


FIGURES = ("embedding", "checkpoint_inputs", "final", "loss", "loss_peak", "recompute", "backward_working",
           "released", "first_layer_backward", "adjustments", "saved", "offloaded", "retained", "dequant_workspace",
           "stored", "transient", "peak")
"""The byte figures of an activation estimate's data (`ActivationEstimate.to_dict`), stored and derived."""
