"""The architecture summary: the dimensions that decide memory, read from a config.json dict.

Pure functions over plain dicts (no torch), so they also serve models transformers cannot build.
Nested configs (vision-language `text_config`, encoder-decoder pairs) are resolved to the part that
dominates training memory: the language model's decoder stack.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, overload

from hfmem.errors import AbsurdConfigError, MalformedConfigError

# Names that different model families use for the same dimension (first match wins).
_ALIASES: dict[str, tuple[str, ...]] = {
    "hidden_size": ("hidden_size", "n_embd", "n_embed", "d_model", "dim", "model_dim"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers"),
    "num_attention_heads": (
        "num_attention_heads", "n_head", "num_heads", "n_heads", "decoder_attention_heads",
    ),
    "num_key_value_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num"),
    "intermediate_size": ("intermediate_size", "n_inner", "ffn_dim", "d_ff", "decoder_ffn_dim", "ffn_hidden_size"),
    "vocab_size": ("vocab_size", "padded_vocab_size", "n_vocab"),
    "max_position_embeddings": (
        "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_target_positions",
    ),
    "num_experts": ("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts"),
    "experts_per_token": ("num_experts_per_tok", "experts_per_token", "moe_top_k", "top_k"),
    "num_shared_experts": ("n_shared_experts", "num_shared_experts", "shared_expert_count"),
    "moe_intermediate_size": ("moe_intermediate_size", "expert_intermediate_size"),
}

# Refuse configs beyond these before building anything: no real model is near them, and a meta
# build of such a config would exhaust time or memory.
LIMITS = {
    "hidden_size": 1 << 17,
    "num_layers": 2048,
    "num_attention_heads": 4096,
    "num_key_value_heads": 4096,
    "intermediate_size": 1 << 20,
    "vocab_size": 1 << 23,
    "num_experts": 4096,
    "max_position_embeddings": 1 << 27,
}
MAX_PARAMETERS = 20 * 10**12  # 20T: above any published checkpoint

_TEXT_CONFIG_KEYS = ("text_config", "language_config", "llm_config", "decoder")


@dataclass(frozen=True)
class MlaDims:
    """Multi-head latent attention (DeepSeek-V2/V3) projection ranks."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class StoredQuantization:
    """The format a checkpoint's linear weights are stored in, from config.json's `quantization_config`."""

    format: str
    """"nf4" (bitsandbytes load_in_4bit), "int8" (load_in_8bit), "gptq" or "awq"."""
    bits: int = 4
    group_size: int = 128
    """Input rows sharing one scale and zero (GPTQ/AWQ); 0: one group over the whole input (group_size -1)."""


@dataclass(frozen=True)
class Architecture:
    """What a memory estimate needs to know about a model, for its language/decoder stack."""

    model_type: str
    architecture: str | None
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    """Dense MLP width; in Mixtral-style MoE configs without `moe_intermediate_size`, the expert width."""
    vocab_size: int
    max_position_embeddings: int | None = None
    sliding_window: int | None = None
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int | None = None
    num_shared_experts: int = 0
    num_dense_layers: int = 0
    """Layers whose MLP is dense in a MoE model (DeepSeek `first_k_dense_replace`, Llama-4 interleave)."""
    gated_mlp: bool = True
    mla: MlaDims | None = None
    layer_types: dict[str, int] = field(default_factory=dict)
    """Counts of decoder layer kinds, e.g. {"full_attention": 12, "sliding_attention": 12, "mamba": 0}."""
    is_encoder_decoder: bool = False
    encoder_layers: int = 0
    tie_word_embeddings: bool = False
    dtype: str = "bfloat16"
    """Dtype the checkpoint is stored in, per the config (`torch_dtype`/`dtype`)."""
    nested: tuple[str, ...] = ()
    """Sub-configs present besides the text model (e.g. "vision_config")."""
    hidden_act: str = "silu"
    """The MLP activation as transformers names it (ACT2FN key); decides what the MLP saves for backward."""
    norm: str = "rmsnorm"
    """"rmsnorm" or "layernorm"."""
    parallel_block: bool = False
    """Attention and MLP read the same layer input (GPT-J, Falcon, Phi, GPT-NeoX parallel residual)."""
    parallel_mlp_norm: bool = False
    """A parallel block whose MLP has its own norm of that input (GPT-NeoX's post_attention_layernorm,
    Falcon's ln_mlp with new_decoder_architecture); otherwise both read one normed input."""
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0
    """Dropout on the attention and MLP outputs (GPT-2 resid_pdrop, Phi resid_pdrop, Falcon hidden_dropout)."""
    embedding_dropout: float = 0.0
    partial_rotary_factor: float = 1.0
    qk_norm: bool = False
    """Per-head RMSNorm on queries and keys (Qwen3, OLMo-2, Gemma-3)."""
    position_embedding: str = "rope"
    """"rope", "learned", "alibi", "relative" (T5) or "none"."""
    quantization: StoredQuantization | None = None
    """The checkpoint's own weight format when it is stored quantized in a format hfmem models (None otherwise:
    16-bit, or formats such as fp8 and mxfp4 that LoRA estimates do not read)."""

    @property
    def attention_kind(self) -> str:
        if self.mla is not None:
            return "mla"
        if not any("attention" in kind for kind in self.layer_types):
            return "none"
        if self.num_key_value_heads == 1 and self.num_attention_heads > 1:
            return "mqa"
        if self.num_key_value_heads < self.num_attention_heads:
            return "gqa"
        return "mha"

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["attention_kind"] = self.attention_kind
        return data


def _first(config: dict[str, Any], key: str) -> Any:
    for name in _ALIASES.get(key, (key,)):
        value = config.get(name)
        if value is not None:
            return value
    return None


@overload
def _int(config: dict[str, Any], key: str, default: int, *, required: bool = False) -> int: ...
@overload
def _int(config: dict[str, Any], key: str, default: None = None, *, required: Literal[True]) -> int: ...
@overload
def _int(config: dict[str, Any], key: str, default: None = None, *, required: bool = False) -> int | None: ...
def _int(config: dict[str, Any], key: str, default: int | None = None, *, required: bool = False) -> int | None:
    """Read an integer dimension, rejecting strings, floats with fractions, negatives and booleans."""
    value = _first(config, key)
    if value is None:
        if required:
            raise MalformedConfigError(f"config.json has no `{key}` (or an alias of it).")
        return default
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or (isinstance(value, float) and not value.is_integer())):
        raise MalformedConfigError(f"config.json `{key}` must be an integer, got {value!r}.")
    value = int(value)
    if value < 0 or (required and value == 0):
        raise MalformedConfigError(f"config.json `{key}` must be positive, got {value}.")
    limit = LIMITS.get(key)
    if limit is not None and value > limit:
        raise AbsurdConfigError(f"config.json `{key}` = {value:,} exceeds {limit:,}; refusing to build it.")
    return value


def text_config(config: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Return the language-model part of a (possibly nested) config and the names of the other parts."""
    if not isinstance(config, dict):
        raise MalformedConfigError("config.json must be a JSON object.")
    nested = tuple(k for k, v in config.items() if k.endswith("_config") and isinstance(v, dict))
    for key in _TEXT_CONFIG_KEYS:
        inner = config.get(key)
        if isinstance(inner, dict) and _first(inner, "hidden_size") is not None:
            merged = {k: v for k, v in config.items() if k not in nested}
            merged.update(inner)
            return merged, tuple(k for k in nested if k != key)
    return config, nested


def _layer_types(cfg: dict[str, Any], num_layers: int) -> dict[str, int]:
    """Count layer kinds from `layer_types`, hybrid patterns, or the single-kind default."""
    types = cfg.get("layer_types") or cfg.get("layers_block_type")
    if isinstance(types, list) and types:
        # Nemotron-H calls its Mamba-2 mixers "linear_attention"
        rename = {"linear_attention": "mamba"} if cfg.get("model_type") == "nemotron_h" else {}
        counts: dict[str, int] = {}
        for kind in map(str, types):
            counts[rename.get(kind, kind)] = counts.get(rename.get(kind, kind), 0) + 1
        return counts
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        names = {"M": "mamba", "*": "full_attention", "-": "mlp", "E": "moe"}
        counts = {}
        for ch in pattern:
            counts[names.get(ch, ch)] = counts.get(names.get(ch, ch), 0) + 1
        return counts
    if cfg.get("model_type") in {"mamba", "mamba2"}:
        return {"mamba": num_layers}
    return {"full_attention": num_layers}


def _dense_layers(cfg: dict[str, Any], num_layers: int, num_experts: int) -> int:
    if num_experts <= 1:
        return num_layers
    dense = _int(cfg, "first_k_dense_replace", 0) or 0
    only = cfg.get("mlp_only_layers")
    if isinstance(only, list):
        dense += len(only)
    step = cfg.get("interleave_moe_layer_step") or cfg.get("decoder_sparse_step") or 1
    if isinstance(step, int) and step > 1:
        dense += num_layers - num_layers // step
    return min(dense, num_layers)


def _sliding_window(cfg: dict[str, Any]) -> int | None:
    if cfg.get("use_sliding_window") is False:
        return None
    window = cfg.get("sliding_window")
    return int(window) if isinstance(window, int) and window > 0 else None


def _dtype(cfg: dict[str, Any]) -> str:
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "float32"
    return str(dtype).removeprefix("torch.")


def read_architecture(config: dict[str, Any]) -> Architecture:
    """Summarise a config.json dict; raises MalformedConfigError / AbsurdConfigError on bad values."""
    cfg, nested = text_config(config)
    model_type = cfg.get("model_type") or config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise MalformedConfigError("config.json has no `model_type`.")
    hidden = _int(cfg, "hidden_size", required=True)
    if _first(cfg, "num_layers") is None and isinstance(cfg.get("layers_block_type"), list):
        cfg = cfg | {"num_hidden_layers": len(cfg["layers_block_type"])}  # Nemotron-H derives it from the list
    layers = _int(cfg, "num_layers", required=True)
    heads, kv_heads = _heads(cfg, model_type)
    head_dim = _int(cfg, "head_dim", None) or _int(cfg, "d_kv", None) or (hidden // heads if heads else 0)
    intermediate = _int(cfg, "intermediate_size", None) or 4 * hidden
    vocab = _int(cfg, "vocab_size", required=True)
    experts = _int(cfg, "num_experts", 0) or 0
    per_token = (_int(cfg, "experts_per_token", 0) or 0) if experts else 0
    if per_token > experts:
        name = next(n for n in _ALIASES["experts_per_token"] if cfg.get(n) is not None)
        raise MalformedConfigError(f"config.json `{name}` ({per_token:,}) exceeds the number of experts ({experts:,}).")
    mla = _mla(cfg, head_dim)
    names = config.get("architectures")
    if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise MalformedConfigError(f"config.json `architectures` must be a list of class names, got {names!r}.")
    arch = Architecture(
        model_type=model_type,
        architecture=(names or [None])[0],
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=vocab,
        max_position_embeddings=_int(cfg, "max_position_embeddings", None),
        sliding_window=_sliding_window(cfg),
        num_experts=experts,
        experts_per_token=per_token,
        moe_intermediate_size=_int(cfg, "moe_intermediate_size", None) if experts else None,
        num_shared_experts=(_int(cfg, "num_shared_experts", 0) or 0) if experts else 0,
        num_dense_layers=_dense_layers(cfg, layers, experts),
        gated_mlp=_is_gated(cfg),
        mla=mla,
        layer_types=_layer_types(cfg, layers),
        is_encoder_decoder=bool(config.get("is_encoder_decoder")),
        encoder_layers=_int(cfg, "encoder_layers", None)
        or ((_int({"n": cfg.get("num_layers")}, "n", 0) or 0) if config.get("is_encoder_decoder") else 0),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", cfg.get("tie_word_embeddings", True))),
        dtype=_dtype(config if ("torch_dtype" in config or "dtype" in config) else cfg),
        nested=nested,
        quantization=stored_quantization(config),
        **_layer_details(cfg),
    )
    check_plausible(arch)
    return arch


_GROUPED_FORMATS = {"gptq": (2, 3, 4, 8), "awq": (4,)}


def stored_quantization(config: dict[str, Any]) -> StoredQuantization | None:
    """The weight format of a checkpoint quantized with bitsandbytes (4- or 8-bit), GPTQ or AWQ, per its
    quantization_config (transformers' BitsAndBytesConfig, GPTQConfig, AwqConfig); None for any other config."""
    q = config.get("quantization_config")
    if not isinstance(q, dict):
        return None
    method = str(q.get("quant_method", "")).lower()
    if method == "bitsandbytes":
        if q.get("load_in_4bit") is True:
            return StoredQuantization("nf4")
        return StoredQuantization("int8", bits=8) if q.get("load_in_8bit") is True else None
    if method not in _GROUPED_FORMATS:
        return None
    bits, group = q.get("bits", 4), q.get("group_size", 128)
    if isinstance(bits, bool) or bits not in _GROUPED_FORMATS[method]:
        raise MalformedConfigError(f"config.json quantization_config: {method} bits must be one of "
                                   f"{', '.join(map(str, _GROUPED_FORMATS[method]))}; got {bits!r}.")
    if isinstance(group, bool) or not isinstance(group, int) or not (group == -1 or 0 < group <= LIMITS["hidden_size"]):
        raise MalformedConfigError(f"config.json quantization_config: group_size must be -1 or a positive integer; "
                                   f"got {group!r}.")
    return StoredQuantization(method, bits=int(bits), group_size=max(0, group))


def _heads(cfg: dict[str, Any], model_type: str) -> tuple[int, int]:
    """(query heads, K/V heads), refusing counts that cannot be grouped."""
    heads = _int(cfg, "num_attention_heads", 0) or 0
    if model_type not in {"mamba", "mamba2"} and heads == 0:
        raise MalformedConfigError("config.json has no `num_attention_heads`.")
    if cfg.get("multi_query") and not cfg.get("new_decoder_architecture"):
        kv_heads = 1  # Falcon-7B style multi-query: one shared K/V head whatever num_kv_heads says
    else:
        kv_heads = _int(cfg, "num_key_value_heads", None) or heads
    if heads and (kv_heads == 0 or heads % kv_heads):
        raise MalformedConfigError(
            f"num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv_heads}).")
    return heads, kv_heads


def _mla(cfg: dict[str, Any], head_dim: int) -> MlaDims | None:
    """Multi-head latent attention's ranks (DeepSeek-V2/V3), None for other attention."""
    if not _int(cfg, "kv_lora_rank", None):
        return None
    return MlaDims(
        q_lora_rank=_int(cfg, "q_lora_rank", None),
        kv_lora_rank=_int(cfg, "kv_lora_rank", required=True),
        qk_rope_head_dim=_int(cfg, "qk_rope_head_dim", 0) or 0,
        qk_nope_head_dim=_int(cfg, "qk_nope_head_dim", 0) or 0,
        v_head_dim=_int(cfg, "v_head_dim", None) or head_dim,
    )


_ACT_KEYS = ("hidden_activation", "hidden_act", "activation_function", "activation", "hidden_activation_fn",
             "dense_act_fn")
_LAYERNORM_TYPES = {"gpt2", "gptj", "gpt_neox", "bert", "falcon", "phi", "bloom", "opt", "openai-gpt", "roberta",
                    "starcoder2", "mpt", "gpt_bigcode", "whisper", "bart", "codegen", "stablelm", "persimmon", "xglm",
                    "gpt_neo", "cohere", "olmo", "mamba", "electra", "distilbert", "albert", "xlm-roberta", "deberta",
                    "deberta-v2"}


def _float(cfg: dict[str, Any], *keys: str) -> float:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return 0.0


def _layer_details(cfg: dict[str, Any]) -> dict[str, Any]:
    """The per-layer details that decide activation memory: activation, norm, dropout, parallel block, RoPE share."""
    model_type = cfg.get("model_type")
    act = next((cfg[k] for k in _ACT_KEYS if isinstance(cfg.get(k), str)), "silu")
    if model_type == "gemma" and isinstance(cfg.get("hidden_activation"), str):
        act = cfg["hidden_activation"]
    if isinstance(cfg.get("feed_forward_proj"), str):  # T5: "gated-gelu" -> gelu_new, "relu" -> relu
        act = "gelu_new" if "gelu" in cfg["feed_forward_proj"] else cfg["feed_forward_proj"].removeprefix("gated-")
    rope = found if isinstance(found := cfg.get("rope_parameters"), dict) else {}
    partial = rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", cfg.get("rotary_pct", 1.0)))
    if model_type in {"gpt2", "opt", "gpt_bigcode", "bert", "roberta", "openai-gpt", "whisper", "bart", "gpt_neo",
                      "xglm"}:
        position = "learned"
    elif model_type in {"bloom", "mpt"} or cfg.get("alibi"):
        position = "alibi"
    elif model_type in {"t5", "mt5", "umt5", "longt5"}:
        position = "relative"
    elif model_type in {"mamba", "mamba2"}:
        position = "none"
    else:
        position = "rope"
    parallel = (bool(cfg.get("parallel_attn") or cfg.get("use_parallel_residual"))
                or model_type in {"phi", "gptj", "cohere", "codegen"})
    if model_type == "falcon" and cfg.get("parallel_attn") is False:
        parallel = False
    falcon_two_norms = (model_type == "falcon" and bool(cfg.get("new_decoder_architecture"))
                        and cfg.get("num_ln_in_parallel_attn") in (None, 2))
    return {
        "hidden_act": str(act),
        "norm": "layernorm" if model_type in _LAYERNORM_TYPES else "rmsnorm",
        "parallel_block": parallel,
        "parallel_mlp_norm": parallel and (model_type == "gpt_neox" or falcon_two_norms),
        "attention_dropout": _float(cfg, "attention_dropout", "attn_pdrop", "attention_probs_dropout_prob",
                                    "dropout_rate"),
        "hidden_dropout": _float(cfg, "hidden_dropout", "resid_pdrop", "hidden_dropout_prob", "dropout_rate",
                                 "dropout"),
        "embedding_dropout": _float(cfg, "embd_pdrop", "embedding_dropout", "hidden_dropout_prob"),
        "partial_rotary_factor": float(partial) if isinstance(partial, (int, float)) and 0 < partial <= 1 else 1.0,
        "qk_norm": (bool(cfg.get("qk_layernorm") or cfg.get("use_qk_norm"))
                    or model_type in {"qwen3", "qwen3_moe", "olmo2", "gemma3", "gemma3_text", "olmoe"}),
        "position_embedding": position,
    }


def _is_gated(cfg: dict[str, Any]) -> bool:
    """Gated MLPs (SwiGLU/GeGLU) have three matrices; GPT-2/BERT/Falcon/Phi-style MLPs two."""
    if "is_gated_act" in cfg:
        return bool(cfg["is_gated_act"])
    act = str(cfg.get("hidden_act") or cfg.get("activation_function") or cfg.get("feed_forward_proj") or "")
    two_matrix = {"gpt2", "gptj", "gpt_neox", "bert", "falcon", "phi", "bloom", "opt", "openai-gpt", "t5", "whisper",
                  "roberta", "starcoder2", "mpt", "gpt_bigcode", "nemotron_h", "mamba", "mamba2"}
    return cfg.get("model_type") not in two_matrix or act.startswith("gated")


def rough_parameter_count(arch: Architecture) -> int:
    """An upper-bound-ish count from dims alone, to refuse absurd configs before any build."""
    attn = 4 * arch.hidden_size * max(arch.num_attention_heads * arch.head_dim, arch.hidden_size)
    inner = arch.moe_intermediate_size or arch.intermediate_size
    mlp = 3 * arch.hidden_size * inner * max(1, arch.num_experts + arch.num_shared_experts)
    layers = arch.num_layers + arch.encoder_layers
    return layers * (attn + mlp) + 2 * arch.vocab_size * arch.hidden_size


def check_plausible(arch: Architecture) -> None:
    """Refuse configs whose size is beyond any real model (guards the meta build)."""
    estimate = rough_parameter_count(arch)  # exact integer arithmetic: huge dims cannot overflow it
    if estimate > MAX_PARAMETERS:
        raise AbsurdConfigError(
            f"config.json describes about {estimate // 10**12:,}T parameters (limit {MAX_PARAMETERS // 10**12}T); "
            "refusing to build it."
        )
