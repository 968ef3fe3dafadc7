"""One GPU of a serving deployment: what the engine reserves, what is left for the KV cache, and what that holds:
the capacity in tokens, the largest concurrency at a context length, the longest context at a concurrency, and
whether the model fits at all. Each term carries its explanation, as the training breakdown does."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from hfmem.errors import InvalidInputError
from hfmem.model.architecture import Architecture
from hfmem.serving.engines import LLAMA_CPP, MIB, VLLM, engine, sglang_buckets, sglang_memory_fraction
from hfmem.serving.kv import KvLayout
from hfmem.units import GIB

ACTIVATION_BYTES = 2
"""Engines run 16-bit activations (a float32 config is served in bfloat16, serving.kv.serving_dtype)."""

SAMPLER_FP32_COPIES = 3
"""vLLM's dummy sampler run over max_num_seqs rows: the logits cast to fp32, the softmax probabilities and the
log-probabilities it computes beside them (vllm/v1/sample/sampler.py Sampler.forward), on the logits in the
model's dtype."""


@dataclass(frozen=True)
class ServingSettings:
    """What the user chose for a deployment; None: the engine's own default."""

    engine: str = "vllm"
    context: int = 4096
    concurrency: int = 1
    tp: int = 1
    pp: int = 1
    kv_cache_dtype: str = "auto"
    quantization: str | None = None
    memory_fraction: float | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    cuda_context_gib: float = 0.5
    """Memory outside torch's allocator per GPU: the CUDA context, cuBLAS workspaces (the training estimate's
    CUDA context default)."""
    gpu_layers: int | None = None
    """llama.cpp's -ngl: decoder layers offloaded to the GPU (None: all); the rest, and their KV cells, stay in host
    memory."""

    def __post_init__(self) -> None:
        engine(self.engine)
        for name in ("context", "concurrency", "tp", "pp"):
            if getattr(self, name) < 1:
                raise InvalidInputError(f"--{name} must be at least 1; got {getattr(self, name)}.")
        if self.gpu_layers is not None and (self.gpu_layers < 0 or self.engine != "llama.cpp"):
            raise InvalidInputError("--n-gpu-layers is llama.cpp's -ngl: give --engine llama.cpp and 0 or more layers.")
        if self.memory_fraction is not None and not 0 < self.memory_fraction <= 1:
            raise InvalidInputError(f"--memory-fraction must be in (0, 1]; got {self.memory_fraction}.")


@dataclass(frozen=True)
class Term:
    """One line of the breakdown: bytes, why, and its kind ("weights", "activation" or "overhead")."""

    name: str
    bytes: float
    why: str
    kind: str = "overhead"


@dataclass
class ServingEstimate:
    """The answer for one GPU of a tp x pp deployment."""

    gpu_bytes: int
    budget_bytes: float
    """What the engine lets itself use of the card."""
    terms: list[Term] = field(default_factory=list)
    """What it reserves before the KV cache."""
    kv_bytes: float = 0.0
    kv_tokens: int = 0
    concurrency_at_context: float = 0.0
    context_at_concurrency: int = 0
    notes: list[str] = field(default_factory=list)
    window_kept: int | None = None
    """Tokens a sliding-window layer holds per sequence under this engine (None: the window itself)."""

    @property
    def fits(self) -> bool:
        """The weights fit and one sequence of the requested context does."""
        return self.kv_bytes > 0 and self.concurrency_at_context >= 1

    def to_dict(self) -> dict[str, Any]:
        return {"gpu_bytes": self.gpu_bytes, "budget_bytes": round(self.budget_bytes), "fits": self.fits,
                "terms": [{"name": t.name, "kind": t.kind, "bytes": round(t.bytes), "why": t.why} for t in self.terms],
                "kv_bytes": round(self.kv_bytes), "kv_tokens": self.kv_tokens,
                "concurrency_at_context": round(self.concurrency_at_context, 2),
                "context_at_concurrency": self.context_at_concurrency, "notes": list(self.notes)}


def estimate(arch: Architecture, weights_per_gpu: int, layout: KvLayout, gpu_bytes: int,
             settings: ServingSettings, gpu_name: str = "", marlin_padding: int = 0) -> ServingEstimate:
    """The engine's arithmetic for one GPU with `gpu_bytes` of memory (`gpu_name`: the device name, which vLLM's
    batch defaults read; `marlin_padding`: what vLLM's MXFP4 Marlin experts add there, weights.mxfp4_marlin_padding)."""
    rule: dict[str, Callable[..., ServingEstimate]] = {
        "vllm": partial(_vllm, name=gpu_name, marlin=marlin_padding), "sglang": _sglang, "llama.cpp": _llama_cpp,
        "transformers": _transformers}
    result = rule[settings.engine](arch, weights_per_gpu, layout, gpu_bytes, settings)
    result.kv_bytes = max(0.0, result.budget_bytes - sum(t.bytes for t in result.terms))
    block = int(VLLM.default("block_size")) if settings.engine == "vllm" else 1
    if layout.bytes_per_token:
        result.kv_tokens = _tokens(result.kv_bytes, layout, block)
    if layout.window and result.window_kept:
        layout = replace(layout, window=result.window_kept)
    result.concurrency_at_context = _sequences(result.kv_bytes, layout, settings.context, block)
    result.context_at_concurrency = _longest(result.kv_bytes, layout, settings.concurrency, block)
    return result


def _tokens(kv_bytes: float, layout: KvLayout, block: int) -> int:
    """The capacity in tokens as engines log it: whole blocks of every attention layer's cache (vLLM's 'GPU KV
    cache size': full and windowed layers share one page size, kv_cache_utils.get_num_blocks), times the block."""
    return int(kv_bytes // (block * layout.bytes_per_token)) * block


def _sequences(kv_bytes: float, layout: KvLayout, context: int, block: int) -> float:
    """How many sequences of `context` tokens the cache holds (each rounded up to whole blocks)."""
    need = layout.sequence_bytes(math.ceil(context / block) * block)
    return kv_bytes / need if need else math.inf


def _longest(kv_bytes: float, layout: KvLayout, concurrency: int, block: int) -> int:
    """The longest context each of `concurrency` sequences can reach."""
    share = kv_bytes / concurrency - layout.state_bytes_per_sequence
    if share <= 0:
        return 0
    if layout.full_bytes_per_token == 0:
        return 10**9 if share >= layout.window_bytes_per_token * (layout.window or 0) else 0
    within = share / layout.bytes_per_token
    if layout.window and within > layout.window:
        within = (share - layout.window_bytes_per_token * layout.window) / layout.full_bytes_per_token
    return int(within // block) * block


def _weights(weights: int) -> Term:
    """The weights term every engine starts from."""
    return Term("weights", weights, "this GPU's share of the checkpoint's tensors", "weights")


def _vllm(arch: Architecture, weights: int, layout: KvLayout, gpu: int, s: ServingSettings,
          name: str = "", marlin: int = 0) -> ServingEstimate:
    """vLLM's determine_available_memory: a fraction of the card, less the weights and the RoPE cache loaded beside
    them, the profiling run's peak and memory outside torch."""
    large = vllm_large_batch_defaults(gpu, name)
    fraction = s.memory_fraction or VLLM.default("memory_fraction")
    tokens = s.max_num_batched_tokens or int(VLLM.default("max_num_batched_tokens" if large else
                                                          "max_num_batched_tokens_small"))
    seqs = min(s.max_num_seqs or int(VLLM.default("max_num_seqs" if large else "max_num_seqs_small")), tokens)
    p = ACTIVATION_BYTES
    forward = _forward_peak(arch, tokens, s.tp, p)
    # the first rank gathers every rank's vocabulary slice and samples; it has the least left, and vLLM sizes every
    # rank's cache by the smallest
    sampler = seqs * arch.vocab_size * (p + 4 * SAMPLER_FP32_COPIES) + tokens * arch.hidden_size * p
    result = ServingEstimate(gpu_bytes=gpu, budget_bytes=gpu * fraction)
    result.terms = [_weights(weights)]
    if marlin:
        result.terms.append(Term("MXFP4 Marlin padding", marlin, "the experts as vLLM's Marlin kernel allocates them "
                                 "on this chip: intermediate size per rank to a multiple of 128, hidden to 256",
                                 "weights"))
    if rope := rope_cache_bytes(arch):
        result.terms.append(Term("RoPE cache", rope, f"the cos/sin table of {arch.max_position_embeddings:,} "
                                                     "positions every layer shares, built with the model",
                                 "weights"))
    result.terms += [
        Term("activation peak", max(forward, sampler),
             f"the larger of the profiling forward over max_num_batched_tokens={tokens:,} (the MLP's gate/up and "
             f"activation outputs beside the residual stream) and the dummy sampler over max_num_seqs={seqs:,} rows "
             f"of {arch.vocab_size:,} logits", "activation"),
        Term("outside torch", s.cuda_context_gib * GIB, "CUDA context and library workspaces (--cuda-context-gib)"),
    ]
    result.notes.append(f"vLLM takes gpu_memory_utilization={fraction:g} of the card; CUDA graphs are captured "
                        "from the rest")
    if layout.window:
        # SlidingWindowSpec.max_memory_usage_bytes: the last window - 1 tokens and a chunk of new ones, and a block
        # more as the window need not start at a block boundary (vllm/v1/kv_cache_interface.py)
        block = int(VLLM.default("block_size"))
        result.window_kept = (math.ceil(min(layout.window - 1 + tokens, s.context) / block) + 1) * block
    return result


def vllm_large_batch_defaults(gpu_bytes: int, name: str) -> bool:
    """Whether vLLM picks its large-card batch defaults: 70 GiB or more and not an A100
    (EngineArgs.get_batch_defaults: `device_memory >= 70 * GiB_bytes and "a100" not in device_name`)."""
    return gpu_bytes >= 70 * GIB and "a100" not in name.lower()


def rope_cache_bytes(arch: Architecture) -> int:
    """vLLM's RoPE cos/sin table, [max_position_embeddings, rotary_dim] in the model dtype, registered as a buffer
    when the model is built and shared by every layer (get_rope keeps one instance per configuration), so part of
    what 'Model loading took' counts: Llama-3.1-8B (131,072 positions) logs 0.0293 GiB more than Llama-3-8B
    (8,192), exactly (131,072 - 8,192) x 128 x 2 bytes (vllm#10517, vllm#12330)."""
    if arch.position_embedding != "rope" or not arch.max_position_embeddings:
        return 0
    rotary = arch.mla.qk_rope_head_dim if arch.mla else int(arch.head_dim * arch.partial_rotary_factor)
    return arch.max_position_embeddings * rotary * ACTIVATION_BYTES


def _forward_peak(arch: Architecture, tokens: int, tp: int, p: int) -> float:
    """One layer's working set in the profiling forward over `tokens` tokens: the residual and hidden states,
    the MLP's fused gate/up output and its activation (MoE: for each routed copy of a token), split by TP."""
    if arch.is_moe:
        width = (arch.moe_intermediate_size or arch.intermediate_size) * arch.experts_per_token
    else:
        width = arch.intermediate_size
    gated = 3 if arch.gated_mlp else 2
    return tokens * p * (gated * width / tp + 3 * arch.hidden_size)


def _sglang(arch: Architecture, weights: int, layout: KvLayout, gpu: int, s: ServingSettings) -> ServingEstimate:
    """SGLang's profile_max_num_token: mem_fraction_static of the memory free at start, less the weights."""
    gpu_mib = gpu / MIB
    chunked, graphs = sglang_buckets(gpu_mib, s.tp)
    chunked = s.max_num_batched_tokens or chunked
    fraction = s.memory_fraction or sglang_memory_fraction(gpu_mib, chunked, graphs, s.tp, s.pp)
    free = gpu - s.cuda_context_gib * GIB
    result = ServingEstimate(gpu_bytes=gpu, budget_bytes=free * fraction)
    result.terms = [_weights(weights)]
    result.notes.append(f"SGLang's mem_fraction_static={fraction:g} of the {free / GIB:.1f} GiB free at start "
                        f"(chunked_prefill_size={chunked:,}, cuda_graph_max_bs={graphs}); activations and CUDA "
                        "graphs use the rest")
    return result


def _llama_cpp(arch: Architecture, weights: int, layout: KvLayout, gpu: int, s: ServingSettings) -> ServingEstimate:
    """llama.cpp with every layer offloaded: the card less the weights, the compute buffer and the context."""
    ubatch = s.max_num_batched_tokens or int(LLAMA_CPP.default("n_ubatch"))
    ctx = s.context * s.concurrency
    compute = ubatch * arch.vocab_size * 4 + ubatch * ctx * arch.num_attention_heads * 4 / s.tp
    result = ServingEstimate(gpu_bytes=gpu, budget_bytes=gpu)
    if layout.window:
        result.window_kept = llama_cpp_swa_cells(layout.window, s.context, ubatch)
    result.terms = [
        _weights(weights),
        Term("compute buffer", compute, f"one ubatch of {ubatch} tokens: fp32 logits and the attention scores "
                                        f"over n_ctx={ctx:,} (without flash attention)", "activation"),
        Term("outside torch", s.cuda_context_gib * GIB, "CUDA context (--cuda-context-gib)"),
    ]
    return result


def llama_cpp_swa_cells(window: int, n_ctx_seq: int, ubatch: int) -> int:
    """Cells a sliding-window layer keeps per sequence in llama.cpp: `std::min(size_base, GGML_PAD(hparams.n_swa *
    (unified ? n_seq_max : 1) + n_ubatch, n_pad))` (src/llama-kv-cache-iswa.cpp, one stream per sequence as
    kv_unified = false builds it), n_pad = 32 without flash attention (llama_kv_cache::get_padding: `flash_attn ?
    256u : 32u`), unless --swa-full."""
    pad = int(LLAMA_CPP.default("n_pad"))
    return min(n_ctx_seq, math.ceil((window + ubatch) / pad) * pad)


def _transformers(arch: Architecture, weights: int, layout: KvLayout, gpu: int,
                  s: ServingSettings) -> ServingEstimate:
    """model.generate: no pool; the cache grows per sequence beside the weights and one step's logits."""
    logits = s.concurrency * arch.vocab_size * (2 + 4 + 4)
    result = ServingEstimate(gpu_bytes=gpu, budget_bytes=gpu)
    result.terms = [
        _weights(weights),
        Term("logits", logits, "one step's logits in the compute dtype and the fp32 copy and scores the logits "
                               "processors read, per sequence", "activation"),
        Term("outside torch", s.cuda_context_gib * GIB, "CUDA context (--cuda-context-gib)"),
    ]
    return result

