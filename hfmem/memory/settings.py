"""Training settings: the knobs of a memory estimate, named like the CLI flags, with defaults and validation.

Everything here is plain data; `TrainingSettings.validated()` normalises aliases ("mixed-bf16", "fa2",
"adamw_torch", True/False for checkpointing, ...) and raises `InvalidInputError` with one clear line
on anything it cannot understand. Defaults are what a user expects from a Hugging Face fine-tune:
bf16 mixed precision, AdamW, sequence 2048 (or the model's maximum if smaller), micro-batch 1,
flash attention, no gradient checkpointing, LoRA rank 16 on all linear layers; a whole-sequence eager
loss, no activation offloading, no optimizer step in backward.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from hfmem.constants import DEFAULT_SEQ_LEN
from hfmem.errors import InvalidInputError
from hfmem.memory.precision import PRECISIONS, Precision

METHODS = ("full", "lora", "qlora")
QLORA_KERNELS = ("bitsandbytes", "bitsandbytes-legacy", "torchao")

DTYPES = tuple(PRECISIONS)

OPTIMIZERS = ("adamw", "adamw_foreach", "adamw_8bit", "paged_adamw_8bit", "paged_adamw", "sgd", "sgd_momentum",
              "adafactor", "lion")
"""adamw: fused AdamW (transformers' default adamw_torch_fused on torch >= 2.8); adamw_foreach:
torch.optim.AdamW's default multi-tensor path, whose step briefly allocates one more state-sized
buffer; paged_*: bitsandbytes paged optimizers, whose states live in CUDA managed memory outside
PyTorch's allocator (they can page out to the CPU instead of failing)."""

SHARDINGS = ("none", "ddp", "zero1", "zero2", "zero3", "fsdp_full_shard", "fsdp_shard_grad_op")
"""Cheapest first, as the fit search tries them (offload is a separate switch on top)."""

CHECKPOINTING = ("off", "full", "selective")

ATTENTION = ("flash_attention_2", "sdpa", "eager", "sdpa_math")
"""flash_attention_2: the flash-attn kernel; sdpa: torch SDPA dispatching to its flash or
memory-efficient kernel (falling back to math where the model's shapes rule those out); eager:
the explicit softmax(QK^T)V that stores the attention matrix; sdpa_math: SDPA's math fallback
forced (stores the attention matrix, upcast to fp32 as torch >= 2.5 does by default)."""

ADAPTER_DTYPES = ("fp32", "compute")
"""LoRA adapter weights: fp32 (PEFT's default `autocast_adapter_dtype=True`) or the compute dtype
(torchtune, LitGPT)."""

_ALIASES: dict[str, dict[str, str]] = {
    "dtype": {
        "bf16": "bf16", "bfloat16": "bf16", "mixed-bf16": "bf16", "mixed_bf16": "bf16",
        "fp16": "fp16", "float16": "fp16", "half": "fp16", "mixed-fp16": "fp16", "mixed_fp16": "fp16",
        "bf16-pure": "bf16-pure", "pure-bf16": "bf16-pure", "bf16_pure": "bf16-pure", "bf16-true": "bf16-pure",
        "fp32": "fp32", "float32": "fp32", "32": "fp32",
        "amp-bf16": "amp-bf16", "amp_bf16": "amp-bf16", "amp-fp16": "amp-fp16", "amp_fp16": "amp-fp16",
    },
    "optimizer": {
        "adamw": "adamw", "adamw_torch_fused": "adamw", "adamw_fused": "adamw",
        "adamw_foreach": "adamw_foreach", "adamw_torch": "adamw_foreach", "adam": "adamw_foreach", "torch_adamw": "adamw_foreach",
        "adamw_8bit": "adamw_8bit", "adamw8bit": "adamw_8bit", "adamw_bnb_8bit": "adamw_8bit", "adam8bit": "adamw_8bit",
        "paged_adamw_8bit": "paged_adamw_8bit", "paged_adamw8bit": "paged_adamw_8bit",
        "paged_adamw": "paged_adamw", "paged_adamw_32bit": "paged_adamw", "paged_adamw32bit": "paged_adamw",
        "sgd": "sgd", "sgd_momentum": "sgd_momentum", "sgd-momentum": "sgd_momentum", "momentum": "sgd_momentum",
        "adafactor": "adafactor", "lion": "lion", "lion_32bit": "lion",
    },
    "sharding": {
        "none": "none", "single": "none", "ddp": "ddp",
        "zero1": "zero1", "zero-1": "zero1", "1": "zero1", "zero2": "zero2", "zero-2": "zero2", "2": "zero2",
        "zero3": "zero3", "zero-3": "zero3", "3": "zero3", "0": "ddp",
        "fsdp": "fsdp_full_shard", "fsdp_full_shard": "fsdp_full_shard", "full_shard": "fsdp_full_shard",
        "fsdp_shard_grad_op": "fsdp_shard_grad_op", "shard_grad_op": "fsdp_shard_grad_op",
    },
    "gradient_checkpointing": {
        "off": "off", "false": "off", "no": "off", "none": "off", "0": "off",
        "full": "full", "on": "full", "true": "full", "yes": "full", "1": "full",
        "selective": "selective",
    },
    "attention": {
        "flash": "flash_attention_2", "fa2": "flash_attention_2", "flash_attention_2": "flash_attention_2",
        "flash_attention_3": "flash_attention_2", "flash-attn": "flash_attention_2",
        "sdpa": "sdpa", "eager": "eager", "sdpa_math": "sdpa_math", "math": "sdpa_math",
    },
    "adapter_dtype": {"fp32": "fp32", "float32": "fp32", "compute": "compute", "bf16": "compute", "fp16": "compute"},
}

@dataclass(frozen=True)
class Overhead:
    """Memory outside PyTorch's tensors, as explicit terms (not a fudge factor).

    cuda_context_gib: the CUDA context, cuBLAS/cuDNN handles and kernels loaded by the process; it
    shows in nvidia-smi but not in torch.cuda.memory_allocated (typically 0.3-1.3 GiB by GPU/driver).
    fragmentation: the caching allocator's reserved-but-unused share, as a fraction of the peak of
    allocated memory (reserved = allocated x (1 + fragmentation)); 5-15% is typical for LLM training.
    """

    cuda_context_gib: float = 0.5
    fragmentation: float = 0.10

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TrainingSettings:
    """One training configuration; field names are the CLI flag names (`--seq-len` -> seq_len)."""

    method: str = "full"
    seq_len: int | None = None
    """None: 2048, or the model's max_position_embeddings if smaller."""
    micro_batch_size: int = 1
    gradient_accumulation_steps: int = 1
    dtype: str = "bf16"
    optimizer: str | None = None
    """None: adamw, or paged_adamw_8bit for QLoRA (the QLoRA recipe)."""
    sharding: str | None = None
    """None: "none" on one GPU, "ddp" on several."""
    num_gpus: int = 1
    offload_optimizer: bool = False
    offload_params: bool = False
    fsdp_wrap_embeddings: bool = False
    """FSDP full shard with the embeddings and the head as units of their own (torchtune custom_sharded_layers):
    each is gathered only while used, instead of in the root unit for the whole step."""
    gradient_checkpointing: str = "off"
    attention: str = "flash_attention_2"
    repeat_kv: bool = False
    """The model code repeats grouped K/V heads to every query head before attention (LitGPT's expand + reshape);
    transformers hands the kernel the grouped heads (enable_gqa / flash-attn's native GQA)."""
    lora_rank: int = 16
    lora_targets: tuple[str, ...] = ("all-linear",)
    lora_dropout: float = 0.0
    adapter_dtype: str = "fp32"
    qlora_kernel: str = "bitsandbytes"
    """The 4-bit linear: "bitsandbytes" (HF/PEFT with bitsandbytes >= 0.43.2: MatMul4Bit keeps only the packed
    weight for backward), "bitsandbytes-legacy" (bitsandbytes < 0.43.2, before PR #1270 of July 2024: it also kept
    each layer's input, as a ctx attribute) or "torchao" (torchtune's NF4, which keeps no input either)."""
    qlora_double_quant: bool = True
    """NF4 with double quantisation (bnb_4bit_use_double_quant / LitGPT "bnb.nf4-dq": an 8-bit absmax per 64
    weights); False keeps bitsandbytes' fp32 absmax per 64 weights (LitGPT "bnb.nf4": lightning's _NF4Linear
    passes compress_statistics=False to bitsandbytes.functional.quantize_4bit)."""
    optimizer_in_backward: bool = False
    """Step each parameter as its gradient is ready and free it (torchtune): no full gradient set."""
    loss_chunks: int = 1
    """Chunked cross-entropy over this many sequence chunks (torchtune CEWithChunkedOutputLoss: 8): the loss
    backward's fp32 (b·s, V) buffers exist one chunk at a time. 1: the usual whole-sequence loss."""
    loss_upcast: bool = True
    """The cross-entropy runs on fp32 logits (transformers' loss_function casts them). False: on the compute-dtype
    logits (a loop calling nn.CrossEntropyLoss on model(...).logits, LitGPT's chunked_cross_entropy)."""
    compile_loss: bool = False
    """The loss under torch.compile (torchtune compile=True compiles model and loss): inductor saves the
    compute-dtype logits and fp32 row statistics instead of log_softmax's fp32 output. The decoder layers
    are a separate switch, compile_layers."""
    compile_layers: bool = False
    """Each decoder layer under torch.compile (torchtune compile=True; inductor's min-cut partitioner): norms keep
    only input and rstd, activation functions and eager attention's fp32 softmax are recomputed in backward."""
    quantize_head: bool = False
    """QLoRA quantises the output head too (LitGPT: lightning's BitsandbytesPrecision replaces every nn.Linear);
    transformers' bitsandbytes integration keeps lm_head in the compute dtype (False)."""
    previous_step_alive: bool = False
    """The training loop still references the previous step's outputs while the next forward runs (LitGPT keeps
    `logits` until it is reassigned), so that step's autograd graph is not freed yet. Saved tensors were released by
    its backward, but tensors an autograd Function keeps as ctx attributes were not: with bitsandbytes-legacy, every
    4-bit layer's input of the previous step is still alive at the end of the forward."""
    activation_offloading: bool = False
    """torchtune's enable_activation_offloading: the decoder's saved activations live in CPU pinned memory,
    about two layers' worth stay on the GPU; the output projection's input and the loss stay on the GPU."""
    overhead: Overhead = field(default_factory=Overhead)

    @property
    def precision(self) -> Precision:
        """What the dtype means for memory (bytes of weights, gradients, activations; master copy, autocast)."""
        return PRECISIONS[self.dtype]

    @property
    def zero_stage(self) -> int | None:
        """The ZeRO stage equivalent of the sharding (FSDP full shard = 3, shard grad op = 2)."""
        return {"none": None, "ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp_full_shard": 3,
                "fsdp_shard_grad_op": 2}[self.resolved_sharding]

    @property
    def resolved_sharding(self) -> str:
        if self.sharding is not None:
            return self.sharding
        return "none" if self.num_gpus == 1 else "ddp"

    @property
    def resolved_optimizer(self) -> str:
        if self.optimizer is not None:
            return self.optimizer
        return "paged_adamw_8bit" if self.method == "qlora" else "adamw"

    def resolved_seq_len(self, max_positions: int | None) -> int:
        """The sequence length to estimate for: the setting, else DEFAULT_SEQ_LEN capped at the model's maximum."""
        if self.seq_len is not None:
            return self.seq_len
        return min(DEFAULT_SEQ_LEN, max_positions) if max_positions else DEFAULT_SEQ_LEN

    def validated(self) -> "TrainingSettings":
        """Return a copy with aliases normalised; raise InvalidInputError on any bad value."""
        changes: dict[str, Any] = {}
        method = str(self.method).lower().replace("-", "_")
        if method not in METHODS:
            raise InvalidInputError(f"method must be one of {', '.join(METHODS)}; got {self.method!r}.")
        changes["method"] = method
        for name in ("dtype", "attention", "adapter_dtype", "gradient_checkpointing"):
            changes[name] = _choice(name, getattr(self, name))
        changes["optimizer"] = None if self.optimizer is None else _choice("optimizer", self.optimizer)
        changes["sharding"] = None if self.sharding is None else _choice("sharding", self.sharding)
        for name, low in (("micro_batch_size", 1), ("gradient_accumulation_steps", 1), ("num_gpus", 1), ("lora_rank", 1)):
            changes[name] = _positive_int(name, getattr(self, name), low)
        if self.seq_len is not None:
            changes["seq_len"] = _positive_int("seq_len", self.seq_len, 1)
        changes["loss_chunks"] = _positive_int("loss_chunks", self.loss_chunks, 1)
        for name in ("compile_loss", "compile_layers", "activation_offloading", "optimizer_in_backward",
                     "qlora_double_quant", "previous_step_alive",
                     "quantize_head", "loss_upcast", "fsdp_wrap_embeddings", "repeat_kv"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidInputError(f"{name} must be true or false; got {getattr(self, name)!r}.")
        if self.qlora_kernel not in QLORA_KERNELS:
            raise InvalidInputError(f"qlora_kernel must be one of {', '.join(QLORA_KERNELS)}; got {self.qlora_kernel!r}.")
        if not 0.0 <= float(self.lora_dropout) < 1.0:
            raise InvalidInputError(f"lora_dropout must be in [0, 1); got {self.lora_dropout!r}.")
        changes["lora_targets"] = parse_lora_targets(self.lora_targets)
        overhead = self.overhead
        if not isinstance(overhead, Overhead):
            raise InvalidInputError("overhead must be an Overhead(cuda_context_gib=..., fragmentation=...).")
        if not (0 <= overhead.cuda_context_gib < 64) or not (0 <= overhead.fragmentation < 10):
            raise InvalidInputError(
                f"overhead terms out of range: cuda_context_gib={overhead.cuda_context_gib}, "
                f"fragmentation={overhead.fragmentation} (a fraction, e.g. 0.1)."
            )
        result = replace(self, **changes)
        sharding = result.resolved_sharding
        if sharding == "none" and result.num_gpus > 1:
            raise InvalidInputError("sharding 'none' means one GPU; use ddp, zero1/2/3 or fsdp for num_gpus > 1.")
        if result.offload_params and sharding not in {"zero3", "fsdp_full_shard"}:
            raise InvalidInputError("offload_params needs parameter sharding (zero3 or fsdp_full_shard).")
        if result.offload_optimizer and sharding in {"none", "ddp"}:
            raise InvalidInputError("offload_optimizer needs ZeRO (zero1/2/3) or FSDP sharding (it is DeepSpeed/FSDP offload).")
        return result

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["lora_targets"] = list(self.lora_targets)
        data["resolved_optimizer"] = self.resolved_optimizer
        data["resolved_sharding"] = self.resolved_sharding
        data["zero_stage"] = self.zero_stage
        return data


def _choice(name: str, value: Any) -> str:
    if isinstance(value, bool) and name == "gradient_checkpointing":
        return "full" if value else "off"
    key = str(value).strip().lower()
    table = _ALIASES[name]
    if key not in table:
        allowed = sorted(set(table.values()))
        raise InvalidInputError(f"{name} must be one of {', '.join(allowed)}; got {value!r}.")
    return table[key]


def _positive_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidInputError(f"{name} must be an integer >= {low}; got {value!r}.")
    if value > 1 << 24:
        raise InvalidInputError(f"{name} = {value:,} is beyond any real training run.")
    return value


def parse_lora_targets(value: Any) -> tuple[str, ...]:
    """Accept "q_proj,v_proj", ["q_proj", "v_proj"], "all-linear"; return a tuple of module names."""
    if isinstance(value, str):
        names = [v.strip() for v in value.split(",")]
    elif isinstance(value, (list, tuple)):
        names = [str(v).strip() for v in value]
    else:
        raise InvalidInputError(f"lora_targets must be a comma-separated list of module names; got {value!r}.")
    names = [n for n in names if n]
    if not names:
        raise InvalidInputError("lora_targets is empty; give module names (q_proj,v_proj) or all-linear.")
    for n in names:
        if not n.replace("_", "").replace(".", "").replace("-", "").isalnum():
            raise InvalidInputError(f"lora target {n!r} is not a module name.")
    names = ["all-linear" if n.lower() in {"all-linear", "all_linear"} else n for n in names]
    return tuple(dict.fromkeys(names))


def parse_overhead(cuda_context_gib: float | None = None, fragmentation: float | None = None) -> Overhead:
    """Build the overhead terms from CLI values (None keeps the documented default)."""
    base = Overhead()
    return Overhead(
        cuda_context_gib=base.cuda_context_gib if cuda_context_gib is None else float(cuda_context_gib),
        fragmentation=base.fragmentation if fragmentation is None else float(fragmentation),
    )
