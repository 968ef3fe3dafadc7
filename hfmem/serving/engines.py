"""Each serving engine's memory rules and the defaults it picks when the user says nothing, each citing the
source that sets it, as hfmem/frameworks/ does for training. Pure data."""

from __future__ import annotations

from dataclasses import dataclass

from hfmem.errors import InvalidInputError

MIB = 1 << 20


@dataclass(frozen=True)
class Default:
    """One engine default and where the engine sets it."""

    value: float
    source: str


@dataclass(frozen=True)
class Engine:
    """An engine's name, the version its rules and defaults were read from, and what it reserves."""

    name: str
    version: str
    rule: str
    """How it sizes its KV cache, in words, with the function that does it."""
    defaults: dict[str, Default]
    not_modelled: tuple[str, ...] = ()

    def default(self, key: str) -> float:
        return self.defaults[key].value


VLLM = Engine(
    name="vllm", version="0.9-0.11 (V1 engine)",
    rule=("KV memory = total x gpu_memory_utilization - (weights + the RoPE cos/sin table built with them + the peak "
          "of the profiling forward over max_num_batched_tokens and the sampler's dummy run over max_num_seqs + "
          "memory outside torch); "
          "blocks = KV memory // (block_size x bytes per token of every layer); "
          "'GPU KV cache size' = blocks x block_size (vllm/v1/worker/gpu_worker.py Worker.determine_available_memory "
          "at commit 0012cf69; vllm/v1/core/kv_cache_utils.py get_num_blocks, get_max_concurrency_for_kv_cache_config "
          "at commit 001cabc1)."),
    defaults={
        "memory_fraction": Default(0.9, "vllm/config/cache.py CacheConfig.gpu_memory_utilization = 0.9 "
                                        "(vllm/engine/arg_utils.py EngineArgs.gpu_memory_utilization: float = 0.90)"),
        "block_size": Default(16, "vllm/engine/arg_utils.py EngineArgs.block_size = 16 (CUDA)"),
        "max_num_batched_tokens": Default(8192, "vllm/engine/arg_utils.py EngineArgs.get_batch_defaults: "
                                                "OPENAI_API_SERVER 8192 on GPUs of 70 GiB or more other than A100, "
                                                "2048 below"),
        "max_num_batched_tokens_small": Default(2048, "the same table, GPUs under 70 GiB or A100"),
        "max_num_seqs": Default(1024, "EngineArgs.get_batch_defaults: 1024 on GPUs of 70 GiB or more other than "
                                      "A100"),
        "max_num_seqs_small": Default(256, "the same table, GPUs under 70 GiB or A100"),
    },
    not_modelled=("CUDA graph memory: captured after the KV cache is sized, so it comes out of the 1 - "
                  "gpu_memory_utilization headroom (0.11+ can count it first: "
                  "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS)",
                  "NCCL and custom all-reduce buffers under TP (inside 'outside torch' only as --cuda-context-gib "
                  "says)",
                  "which MXFP4 MoE backend a Hopper or Blackwell card takes (FlashInfer or Triton, as installed) "
                  "and its padding; Ampere and Ada take Marlin, whose padding is modelled",
                  "the total torch.cuda.mem_get_info reports, which gpu_memory_utilization multiplies, is below the "
                  "catalogue's (nvidia-smi's) figure by up to 0.8 GiB; name the card as NAME=GiB to give it"),
)

SGLANG = Engine(
    name="sglang", version="0.5.x",
    rule=("mem_fraction_static = (GPU MiB - reserve) / GPU MiB, reserve = 512 + 1.5 x max(chunked_prefill_size, 2048) "
          "+ 2 x cuda_graph_max_bs + 1024 x tp x pp / 8 MiB, at least 10 GiB on cards over 60 GiB "
          "(python/sglang/srt/server_args.py ServerArgs._handle_gpu_memory_settings, the rule of sglang PR #10975, "
          "v0.5.4); KV tokens = (free memory after "
          "the weights - free memory at start x (1 - mem_fraction_static)) // cell size "
          "(python/sglang/srt/model_executor/model_runner.py ModelRunner.profile_max_num_token)."),
    defaults={
        "chunked_prefill_size": Default(8192, "server_args.py _handle_gpu_memory_settings: 8192 for 60-160 GiB cards "
                                              "(H100, A100-80G, H200); 2048 under 35 GiB, 4096 under 60, 16384 above"),
        "cuda_graph_max_bs": Default(256, "the same buckets: 256 at tp < 4 (512 at tp >= 4) for 60-160 GiB cards; "
                                          "24/80 under 35 GiB, 32/160 under 60 GiB, 512 above"),
        "block_size": Default(1, "server_args.py page_size = 1 (token-granular pool)"),
    },
    not_modelled=("the multimodal adjustment adjust_mem_fraction_for_vlm", "DP attention and speculative decoding "
                  "reserves", "the free memory at start is the card less the CUDA context and, under TP, the NCCL "
                  "communicators: 0.8-1.2 GiB under the catalogue's figure on the bench's logs that print it, where "
                  "--cuda-context-gib assumes 0.5"),
)

LLAMA_CPP = Engine(
    name="llama.cpp", version="b5000-b6000",
    rule=("KV = n_ctx x layers x (n_embd_k_gqa + n_embd_v_gqa) x the cache type's bytes, for the layers offloaded "
          "by -ngl (src/llama-kv-cache.cpp, logged as 'KV self size' / 'llama_kv_cache: size'); a sliding-window "
          "layer keeps min(n_ctx, window + n_ubatch padded to n_pad) cells per sequence unless --swa-full "
          "(src/llama-kv-cache-iswa.cpp); the compute buffer holds one ubatch's logits and attention scores."),
    defaults={
        "n_ctx": Default(4096, "common/common.h common_params.n_ctx = 4096 (llama.cpp PR #10136, November 2024; "
                               "builds from 2025 on default to 0, the trained context)"),
        "n_ubatch": Default(512, "common/common.h common_params.n_ubatch = 512 (commit de93b991)"),
        "cache_type": Default(2, "common/common.h cache_type_k = cache_type_v = GGML_TYPE_F16"),
        "n_pad": Default(32, "src/llama-kv-cache.cpp llama_kv_cache::get_padding: `return cparams.flash_attn ? 256u : "
                             "32u;` (flash attention off; 256 with -fa)"),
    },
    not_modelled=("the CUDA backend's own pools beyond the compute buffer estimate",),
)

TRANSFORMERS = Engine(
    name="transformers", version="4.5x",
    rule=("model.generate with a DynamicCache: the weights, the cache of every sequence at its full length "
          "(a sliding-window layer's at its window) and one step's logits; no pool is reserved ahead."),
    defaults={},
)

ENGINES = {e.name: e for e in (VLLM, SGLANG, LLAMA_CPP, TRANSFORMERS)}


def engine(name: str) -> Engine:
    """The profile named `name`, or a one-line error listing the known ones."""
    if name not in ENGINES:
        raise InvalidInputError(f"--engine must be one of {', '.join(ENGINES)}; got {name!r}.")
    return ENGINES[name]


def sglang_memory_fraction(gpu_mib: float, chunked_prefill: int, cuda_graph_max_bs: int, tp: int, pp: int) -> float:
    """SGLang's default mem_fraction_static (server_args.py _handle_gpu_memory_settings, no DP attention, no
    speculative decoding)."""
    reserved = 512 + max(chunked_prefill, 2048) * 1.5 + cuda_graph_max_bs * 2 + tp * pp / 8 * 1024
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3)


def sglang_buckets(gpu_mib: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) by the card's memory, as _handle_gpu_memory_settings picks them."""
    small_tp = tp < 4
    if gpu_mib < 35 * 1024:
        return 2048, 24 if small_tp else 80
    if gpu_mib < 60 * 1024:
        return 4096, 32 if small_tp else 160
    if gpu_mib < 160 * 1024:
        return 8192, 256 if small_tp else 512
    return 16384, 512
