"""The generation phase: what model.generate allocates over the resident state to sample between steps.

Two moments can be the peak. The prefill: one no-grad forward over the prompts (seq_len minus the new tokens),
whose MLP working set sits beside the KV cache it has just filled, the ids, attention mask and position ids, and
the RoPE tables generate makes per sequence (its positions come from the mask); transformers asks for the last
position's logits only. The last decoding step: the cache at seq_len tokens (a sliding-window layer's at the
window: it keeps a view of the last concatenation's final window tokens), the half of one layer's cache that
torch.cat holds twice while it appends the key (then the value; a sliding-window layer concatenates both before it
drops either, so the whole of its window), that step's logits in the compute dtype and the fp32 copy the logits
processors read (and their output), and the token ids. The resident state is counted by breakdown.combine.
Under multi-head latent attention (DeepSeek) the cache holds the compressed latent and the shared RoPE key, and
each layer up-projects all of it to every head's keys and values to attend: that transient is beside the cache in
both moments (in the prefill, instead of the MLP's working set). Checked against real generate calls on CPU
(tests/test_generation_phase.py).
"""

from __future__ import annotations

from hfmem.memory.activations.embedding import rope_dims
from hfmem.memory.evaluation import no_grad_mlp_bytes
from hfmem.memory.kvcache import (
    cached_layers,
    expanded_bytes_per_token,
    kv_bytes_per_token,
    larger_half,
    windowed_layers,
)
from hfmem.memory.settings import TrainingSettings
from hfmem.model.architecture import Architecture

ID_BYTES = 8
"""Token ids are int64."""


def generation_bytes(arch: Architecture, settings: TrainingSettings, seq_len: int) -> int:
    """Peak bytes of one model.generate call over the resident state (0 when the settings generate nothing)."""
    if settings.generation_batch_size is None:
        return 0
    b = settings.generation_batch_size
    p = settings.precision.compute_bytes
    prompt = max(1, seq_len - settings.generation_tokens)
    per_token = kv_bytes_per_token(arch, p)
    expanded = expanded_bytes_per_token(arch, p)
    layers = cached_layers(arch)
    inputs = 2 * b * prompt * rope_dims(arch) * p + 3 * b * prompt * ID_BYTES
    prefill = (layers * b * prompt * per_token + inputs
               + max(no_grad_mlp_bytes(arch, settings, b * prompt), b * prompt * expanded))
    windowed = windowed_layers(arch)
    kept = min(seq_len, arch.sliding_window or seq_len)
    appending = max(seq_len * larger_half(arch, p) if layers > windowed else 0, kept * per_token if windowed else 0)
    decode = (b * per_token * ((layers - windowed) * seq_len + windowed * kept) + b * max(appending, seq_len * expanded)
              + b * arch.vocab_size * (p + 4 + 4) + b * seq_len * ID_BYTES)
    return round(max(prefill, decode))
