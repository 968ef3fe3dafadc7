"""What the output end saves: the final norm, an MLM head transform, the LM head's input, and the loss."""

from __future__ import annotations

from typing import NamedTuple

from hfmem.memory.activations.linears import lora_adapters
from hfmem.memory.activations.norms import norm
from hfmem.memory.activations.saved import Saved
from hfmem.memory.activations.spec import ActivationSettings, ActivationSpec
from hfmem.memory.activations.structure import Module


class Loss(NamedTuple):
    """What the loss saves, and the transient its backward needs at first."""

    saved: float
    peak: float


def head_keeps_input(spec: ActivationSpec) -> bool:
    """Whether the LM head keeps its input for its weight gradient."""
    return spec.trained.needs_input("lm_head")


def final_saved(spec: ActivationSpec) -> Saved:
    """Per token: the MLM head transform, the final norm, the LM head's input and its LoRA adapter."""
    arch, trained, p = spec.arch, spec.trained, spec.p
    h = arch.hidden_size
    final = Saved()
    if spec.traits.mlm_head:
        final.add("head_transform.input", p * h if trained.full else 0)
        final.add("head_transform.act", p * h)  # the activation's input; its output feeds the LayerNorm
    norm(final, "final_norm", spec, h, residual=True)  # BERT: the head's LayerNorm
    if head_keeps_input(spec):
        final.add("lm_head.input", p * h)  # one cast copy under autocast too
    lora_adapters(final, "lm_head", spec, (Module("lm_head", h, arch.vocab_size, 1),))
    return final


def loss(spec: ActivationSpec, settings: ActivationSettings, tokens: int, notes: list[str]) -> Loss:
    """The cross-entropy over the vocabulary: eager with or without the fp32 upcast, compiled, chunked."""
    p, v = spec.p, spec.arch.vocab_size
    compiled, upcast = settings.compiled_loss, settings.loss_upcast
    if compiled:
        saved = p * tokens * v + 8 * tokens + 8 * tokens + 4  # logits (compute dtype), 2 fp32 row stats, labels
    elif upcast:
        saved = 4 * tokens * v + 8 * tokens + 4  # log_softmax's fp32 output, labels, the scalar
    else:
        saved = 2 * p * tokens * v + 8 * tokens + 4  # the held logits and log_softmax's output, labels, the scalar
    if spec.traits.softcap:
        saved += p * tokens * v  # final logit soft-capping keeps tanh's output
    chunks = max(1, min(int(settings.loss_chunks), settings.seq_len))
    # The loss backward, a chunk at a time: eager cross-entropy needs two buffers of the logits' size
    # (log_softmax's incoming gradient and its result), fp32 with the upcast; compiled, inductor fuses it
    # into one kernel that writes the logits' gradient in the compute dtype.
    peak = (p if compiled else 8 if upcast else 2 * p) * tokens * v / chunks
    if not upcast and not compiled:
        notes.append("cross-entropy on the compute-dtype logits (no fp32 upcast): the loop holds the logits, "
                     "log_softmax keeps its output and its backward two more buffers in that dtype")
    if chunks > 1:
        notes.append(f"chunked cross-entropy ({chunks} chunks): the loss backward's fp32 buffers exist one chunk "
                     "at a time")
    if compiled:
        eager_layers = "" if spec.compiled else ("; the decoder layers are counted as eager (set compile_layers if "
                                                 "they are compiled)")
        notes.append("compiled loss: saves the compute-dtype logits and fp32 row statistics, not log_softmax's fp32 "
                     "output; its fused backward allocates only the logits' gradient" + eager_layers)
    return Loss(saved, peak)
