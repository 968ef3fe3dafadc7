"""What the embeddings save: token ids for the embedding gradient, positions, dropout mask, RoPE tables, a norm."""

from __future__ import annotations

from hfmem.memory.activations.norms import norm
from hfmem.memory.activations.ops import mask_bytes
from hfmem.memory.activations.saved import Saved
from hfmem.memory.activations.spec import ActivationSpec
from hfmem.model.architecture import Architecture


def embedding_bytes(spec: ActivationSpec, s: int, tokens: int) -> float:
    """Bytes saved at the embedding for b·s `tokens` of length s."""
    arch, trained = spec.arch, spec.trained
    embedding = 0.0
    if trained.full or trained.weight("embed_tokens"):
        embedding += 8 * tokens  # token ids for the embedding gradient
    if arch.position_embedding == "learned" and trained.full:
        embedding += 8 * s
    if arch.embedding_dropout > 0:
        embedding += mask_bytes(spec.mask_bytes, spec.p) * arch.hidden_size * tokens
    if arch.position_embedding == "rope":  # cos and sin for (1, s) positions (the residual's dtype), for all layers
        embedding += 2 * s * rope_dims(arch) * spec.r
    if spec.traits.embedding_norm:
        emb = Saved()
        norm(emb, "embedding_norm", spec, arch.hidden_size, residual=True)
        embedding += emb.total * tokens
    return embedding


def rope_dims(arch: Architecture) -> int:
    """Dimensions of a head that RoPE rotates (its cos and sin tables' width): MLA's RoPE part, or the rotary share
    of the head; 0 for a model without RoPE."""
    if arch.position_embedding != "rope":
        return 0
    return arch.mla.qk_rope_head_dim if arch.mla else int(arch.head_dim * arch.partial_rotary_factor)
