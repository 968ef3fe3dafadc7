"""The KV cache of one GPU, per token and per sequence, as a serving engine lays it out: full-attention layers
grow with every token, sliding-window layers stop at their window, multi-head latent attention caches its
compressed latent and RoPE key, and a hybrid's Mamba layers keep a fixed state per sequence. Tensor parallelism
splits K/V heads across ranks (a head is replicated when there are fewer heads than ranks; MLA's latent is whole
on every rank); pipeline parallelism gives each stage its share of the layers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hfmem.errors import InvalidInputError
from hfmem.memory.kvcache import cached_layers, kv_bytes_per_token, windowed_layers
from hfmem.model.architecture import Architecture

KV_DTYPE_BYTES: dict[str, float | None] = {
    "auto": None, "bfloat16": 2, "float16": 2, "float32": 4, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
    "q8_0": 34 / 32, "q4_0": 18 / 32,
}
"""Bytes per cached element by --kv-cache-dtype; "auto" is the model's dtype (vLLM's and SGLang's default), the
GGUF block types are llama.cpp's --cache-type-k/-v (q8_0: 32 int8 and an fp16 scale per block)."""

MODEL_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class KvLayout:
    """One GPU's cache: bytes per token of the layers that keep every token and of the windowed layers, the
    window, and the fixed state per sequence."""

    full_bytes_per_token: float
    """Full-attention (and MLA) layers on this rank, all together: what each token of context adds."""
    window_bytes_per_token: float
    """Sliding-window layers on this rank, all together, up to `window` tokens."""
    window: int | None
    state_bytes_per_sequence: float
    """Mamba / linear-attention layers' conv and SSM state on this rank, per sequence whatever its length."""
    full_layers: int
    window_layers: int
    state_layers: int
    element_bytes: float

    @property
    def bytes_per_token(self) -> float:
        """What a token adds while the context is within the window (every attention layer caches it)."""
        return self.full_bytes_per_token + self.window_bytes_per_token

    def sequence_bytes(self, tokens: int) -> float:
        """The cache of one sequence of `tokens` tokens on this rank."""
        kept = min(tokens, self.window) if self.window else tokens
        return self.full_bytes_per_token * tokens + self.window_bytes_per_token * kept + self.state_bytes_per_sequence


def serving_dtype(model_dtype: str, engine: str) -> str:
    """The dtype an engine runs a model in under dtype "auto": a float32 config in bfloat16 (vLLM's
    ModelConfig._get_and_verify_dtype, "following common practice" for float32 models; SGLang's model_config
    reuses it), the config's dtype otherwise; transformers keeps what from_pretrained loads."""
    return "bfloat16" if model_dtype == "float32" and engine != "transformers" else model_dtype


def kv_element_bytes(kv_cache_dtype: str, model_dtype: str) -> float:
    """Bytes per cached element: the model's (serving) dtype under "auto", else the dtype named."""
    if kv_cache_dtype not in KV_DTYPE_BYTES:
        raise InvalidInputError(f"--kv-cache-dtype must be one of {', '.join(KV_DTYPE_BYTES)}; got {kv_cache_dtype!r}.")
    return KV_DTYPE_BYTES[kv_cache_dtype] or MODEL_DTYPE_BYTES.get(model_dtype, 2)


def kv_heads_per_rank(arch: Architecture, tp: int) -> int:
    """K/V heads each tensor-parallel rank holds: split evenly, one replicated head each when fewer than tp
    (vLLM's `ModelConfig.get_num_kv_heads`: max(1, total // tp))."""
    return max(1, arch.num_key_value_heads // tp)


def kv_layout(arch: Architecture, config: dict[str, Any], element_bytes: float, tp: int = 1, pp: int = 1) -> KvLayout:
    """The cache of one GPU of a tp x pp deployment, from the architecture and the config's Mamba dimensions."""
    state_layers = arch.layer_types.get("mamba", 0) + arch.layer_types.get("linear_attention", 0)
    if arch.model_type in {"mamba", "mamba2"}:
        state_layers, attention = arch.num_layers, 0
    else:
        attention = cached_layers(arch)
    windowed = windowed_layers(arch) if attention else 0
    per_layer = kv_bytes_per_token(arch, 1) * element_bytes
    if not arch.mla and arch.num_key_value_heads:
        per_layer = per_layer * kv_heads_per_rank(arch, tp) / arch.num_key_value_heads
    full, windowed = _stage(attention - windowed, pp), _stage(windowed, pp)
    mamba = _stage(state_layers, pp)
    return KvLayout(full_bytes_per_token=full * per_layer, window_bytes_per_token=windowed * per_layer,
                    window=arch.sliding_window if windowed else None,
                    state_bytes_per_sequence=mamba * mamba_state_bytes(arch, config, tp),
                    full_layers=full, window_layers=windowed, state_layers=mamba, element_bytes=element_bytes)


def _stage(layers: int, pp: int) -> int:
    """Layers of the largest pipeline stage (vLLM's get_pp_indices splits evenly, the remainder to the last)."""
    return math.ceil(layers / pp) if pp > 1 else layers


def mamba_state_bytes(arch: Architecture, config: dict[str, Any], tp: int = 1) -> float:
    """One Mamba layer's state per sequence, as transformers' caches allocate it in the model's dtype: Mamba-1's
    conv (intermediate, conv_kernel) and SSM (intermediate, state_size) (MambaCache); Mamba-2's conv (intermediate
    + 2 n_groups state_size, conv_kernel) and SSM (heads, head_dim, state_size) (Mamba2Cache, Nemotron-H's hybrid
    cache). Tensor parallelism splits the channels and heads."""
    p = MODEL_DTYPE_BYTES.get(arch.dtype, 2)
    kernel = int(config.get("conv_kernel") or config.get("mamba_d_conv") or 4)
    state = int(config.get("ssm_state_size") or config.get("state_size") or config.get("mamba_d_state") or 16)
    inner = int(config.get("mamba_expand", config.get("expand", 2)) * arch.hidden_size)
    heads = config.get("mamba_num_heads") or config.get("mamba_n_heads")
    if heads:
        head_dim = int(config.get("mamba_head_dim") or config.get("mamba_d_head") or inner // heads)
        inner = int(heads) * head_dim
        groups = int(config.get("n_groups") or config.get("mamba_n_groups") or 1)
        conv = (inner + 2 * groups * state) * kernel
        return p * (conv + inner * state) / tp
    inner = int(config.get("intermediate_size") or inner) if arch.model_type == "mamba" else inner
    return p * (inner * kernel + inner * state) / tp
