"""The evaluation phase: what a no-grad forward at the eval batch allocates over the state that stays resident.

Under torch.no_grad nothing is saved for backward, so the forward's peak is one place where the most tensors
are alive at once: the output end (the logits, the fp32 copy the loss upcasts them to and log_softmax's output,
beside the final hidden state; Cut Cross-Entropy builds no logits, Liger's fused loss does in eval), or, for a
small vocabulary, one MLP (its activation's output, the up projection and their product; a MoE's routed copies
of each token at once). The resident state is counted by breakdown.combine.
"""

from __future__ import annotations

from hfmem.memory.activation_functions import activation_saves
from hfmem.memory.activations.families import family_traits
from hfmem.memory.settings import TrainingSettings
from hfmem.model.architecture import Architecture

HIDDEN_ALIVE = 4
"""Hidden-size tensors alive while a decoder layer runs under no_grad: the model's input embeddings (its forward
keeps the name), the layer's input, the attention sum (a parallel block: the attention output) and the normed
input the MLP reads."""


def eval_forward_bytes(arch: Architecture, settings: TrainingSettings, seq_len: int) -> int:
    """Peak bytes of one evaluation forward over the resident state (0 when the settings evaluate nothing)."""
    if settings.eval_batch_size is None:
        return 0
    p = settings.precision.compute_bytes
    tokens = settings.eval_batch_size * seq_len
    logits = tokens * arch.vocab_size
    chunks = max(1, min(int(settings.loss_chunks), seq_len))
    if settings.compile_loss:
        loss = 8.0 * tokens  # one fused kernel: fp32 row statistics
    elif settings.loss_upcast:
        loss = ((4 if p < 4 else 0) + 4) * logits / chunks  # the fp32 copy (none of fp32 logits), log_softmax's
    else:
        loss = p * logits / chunks  # log_softmax's output in the compute dtype
    softcap = p * logits if family_traits(arch.model_type).softcap else 0  # tanh's output beside its input
    head = p * logits + max(loss, softcap) + p * tokens * arch.hidden_size  # beside the final norm's output alone
    if settings.fused_loss == "cce":  # its patched forward skips the logits whenever labels are given, eval too
        head = p * tokens * arch.hidden_size + 16 * tokens
    return round(max(head, no_grad_mlp_bytes(arch, settings, tokens)))


def no_grad_mlp_bytes(arch: Architecture, settings: TrainingSettings, tokens: int) -> float:
    """Bytes alive while one MLP runs under no_grad over `tokens` tokens: the hidden-size tensors a decoder layer
    keeps (HIDDEN_ALIVE) and the intermediate-width ones; a MoE (transformers' grouped_mm experts) per routed copy
    of a token the larger of two moments: its gathered input, fused gate_up, the activation and the product, or,
    back at hidden width, its input, the down projection's output, that output times the routing weight (fp32 where
    the router keeps its weights in fp32) and its copy back in token order."""
    p = settings.precision.compute_bytes
    h = arch.hidden_size
    if arch.experts_per_token:
        weight = p if family_traits(arch.model_type).routing_weights_in_compute_dtype else 4
        up = p * (4 * (arch.moe_intermediate_size or arch.intermediate_size) + h)
        per_token = arch.experts_per_token * max(up, h * (2 * p + 2 * weight))
    else:
        per_token = p * arch.intermediate_size * mlp_widths(arch, settings)
    return tokens * (per_token + p * HIDDEN_ALIVE * h)


def mlp_widths(arch: Architecture, settings: TrainingSettings) -> int:
    """Intermediate-width tensors alive at once in a no-grad MLP: a gated one holds act(gate), up and their product;
    an ungated one its fc output and the activation's output, or, for an activation written as several eager ops
    (gelu_new: pow, mul, add, tanh...), the fc output and the temporaries one of its expressions holds."""
    if arch.gated_mlp:
        return 3
    saves = activation_saves(settings.activation_fn or arch.hidden_act)
    return max(2, len(saves) if "t" in saves else len(saves) + 1)
