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
    """Whether the LM head, an nn.Linear, keeps its input for its weight gradient (a fused loss keeps its own)."""
    return spec.fused_loss == "none" and spec.trained.needs_input("lm_head")


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
    """The cross-entropy over the vocabulary: eager with or without the fp32 upcast, compiled, chunked, or fused
    with the output projection."""
    if spec.fused_loss == "cce":
        return cut_cross_entropy(spec, tokens, notes)
    if spec.fused_loss == "liger":
        return liger_cross_entropy(spec, tokens, notes)
    p, v = spec.p, spec.arch.vocab_size
    compiled, upcast = settings.compiled_loss, settings.loss_upcast
    if settings.loss_in_place and not compiled:
        return in_place_cross_entropy(spec, tokens, notes)
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


def in_place_cross_entropy(spec: ActivationSpec, tokens: int, notes: list[str]) -> Loss:
    """Megatron-core's vocab_parallel_cross_entropy (megatron/core/tensor_parallel/cross_entropy.py:25-116 at
    d98e8a6): the logits cast to fp32 once, exp, normalised and saved as the softmax in that one buffer, the
    gradient written into it in backward; autograd's cast of that fp32 gradient back to the logits' dtype is the
    one new buffer. With TP the vocabulary is split (the caller divides)."""
    v = spec.arch.vocab_size
    notes.append("in-place cross-entropy (Megatron-core's vocab_parallel_cross_entropy): keeps the fp32 softmax "
                 "and writes its gradient into it; backward allocates only the logits' gradient")
    return Loss(4 * tokens * v + 16 * tokens + 4, spec.p * tokens * v)


def cut_cross_entropy(spec: ActivationSpec, tokens: int, notes: list[str]) -> Loss:
    """Cut Cross-Entropy (axolotl's ml-cross-entropy fork at 48b5169, cut_cross_entropy/cce.py#L130): it saves the
    head's input, an fp32 log-sum-exp and int64 indices per token and an fp32 average logit per vocabulary entry;
    the logits exist only as tiles in registers. Its backward allocates the input's gradient (cce_backward.py#L355;
    a trained head's weight gradient is the usual parameter gradient) and a vocabulary ordering (cce.py#L141)."""
    h, v = spec.arch.hidden_size, spec.arch.vocab_size
    saved = spec.p * tokens * h + 16 * tokens + 4 * v
    notes.append("Cut Cross-Entropy: no (tokens x vocab) logits; it keeps the head's input and an fp32 log-sum-exp "
                 "per token, and its backward allocates the input's gradient")
    return Loss(saved, spec.p * tokens * h + 12 * v)


def liger_chunk_rows(tokens: int, hidden: int, vocab: int) -> int:
    """Rows of one logits chunk in Liger's fused linear cross-entropy: the next power of two of tokens / ceil(V/H)
    (liger_kernel/ops/fused_linear_cross_entropy.py#L47-L49 at v0.6.3), at most every token."""
    per = -(-tokens // -(-vocab // hidden))
    return min(tokens, 1 << (per - 1).bit_length())


def liger_cross_entropy(spec: ActivationSpec, tokens: int, notes: list[str]) -> Loss:
    """Liger's fused linear cross-entropy (v0.6.3, fused_linear_cross_entropy.py): the forward computes the gradients
    chunk by chunk and saves the input's gradient, and a trained head's weight gradient in the weight's dtype
    (#L318-L322); each chunk holds its logits in the compute dtype (#L88) and, for a trained head, the chunk's weight
    gradient in that dtype and in fp32 (#L182). Its backward only rescales them in place."""
    p, h, v = spec.p, spec.arch.hidden_size, spec.arch.vocab_size
    trained_head = spec.trained.needs_input("lm_head")
    saved = p * tokens * h + (spec.w * v * h if trained_head else 0)
    rows = liger_chunk_rows(tokens, h, v)
    peak = p * rows * v + max(p * rows * h, (p + 4) * v * h if trained_head else 0) + 21 * tokens
    notes.append(f"Liger fused linear cross-entropy: no (tokens x vocab) logits; {rows:,}-token chunks, the input's "
                 "gradient computed in the forward and kept until backward")
    return Loss(saved, peak)
