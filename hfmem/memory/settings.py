"""Training settings: the knobs of a memory estimate, each field declaring its flag, accepted values and check.

A field is its default, a `setting(...)` (hfmem.memory.fields: check, CLI spelling, the estimate parts it
affects) and an attribute docstring (its --help text and docs/settings.md row): the CLI flags, `validated()`, the memo
keys and docs/settings.md's table are all built from them. `validated()` normalises aliases ("mixed-bf16",
"fa2", "adamw_torch", True/False for checkpointing, ...) and raises `InvalidInputError` with one clear line on
anything it cannot understand. Defaults are what a user expects from a Hugging Face fine-tune: bf16 mixed
precision, AdamW, sequence 2048 (or the model's maximum if smaller), micro-batch 1, flash attention, no
gradient checkpointing, LoRA rank 16 on all linear layers; a whole-sequence eager loss, no activation
offloading, no optimizer step in backward.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from math import gcd
from typing import Any, Literal, get_args

from hfmem.constants import DEFAULT_SEQ_LEN, HFU_STACKS
from hfmem.errors import InvalidInputError
from hfmem.memory.activation_functions import ACTIVATION_SAVES
from hfmem.memory.fields import (
    SERVING_PANEL as SERVING,
    SHARDING_PANEL as SHARDING,
    TIME_PANEL as TIME,
    TRAINING_PANEL as TRAINING,
    Boolean,
    Choice,
    Group,
    Integer,
    Number,
    OrNone,
    Parsed,
    Part,
    memo_key,
    setting,
    validated_fields,
)
from hfmem.memory.precision import KBIT_UPCAST, PRECISIONS, Precision
from hfmem.memory.quantization import BaseFormat, base_format
from hfmem.model.architecture import StoredQuantization

# The choice fields' values, each with its table of aliases (other spellings of those values, nothing else).
Method = Literal["full", "lora", "qlora", "dora", "lora-fa", "vera", "ia3", "oft", "boft", "prompt-tuning",
                 "prefix-tuning"]
METHODS: tuple[Method, ...] = ("full", "lora", "qlora")
"""The methods estimated when none is named."""
PEFT_METHODS: tuple[Method, ...] = ("dora", "lora-fa", "vera", "ia3", "oft", "boft", "prompt-tuning",
                                     "prefix-tuning")
"""PEFT methods beyond LoRA, estimated when named (--method dora); hfmem.memory.peft_methods counts them."""
ALL_METHODS: tuple[Method, ...] = get_args(Method)
SERVE = "serve"
"""The method value (--method serve) that adds the serving column to the fit matrix: the deployment `Serving`
describes, with hfmem.serving's engine arithmetic, beside the training methods."""
ENGINES = ("vllm", "sglang", "llama.cpp", "transformers")
"""The serving engines hfmem.serving profiles (its ENGINES; tests/test_serving_surface.py holds the two equal)."""
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "float32", "fp8", "fp8_e4m3", "fp8_e5m2", "q8_0", "q4_0")
"""The KV cache element types hfmem.serving.kv knows (its KV_DTYPE_BYTES)."""
SERVING_QUANTIZATIONS = ("fp8", "int8", "awq", "gptq", "nf4", "mxfp4", "nvfp4", "f16", "q8_0", "q6_k", "q5_k", "q5_0",
                         "q4_k", "q4_0", "q3_k", "q2_k")
"""The weight formats hfmem.serving.weights packs (its QUANTIZATIONS)."""
METHOD_ALIASES = {"lora_fa": "lora-fa", "lorafa": "lora-fa", "prompt_tuning": "prompt-tuning",
                  "prefix_tuning": "prefix-tuning", "prompt": "prompt-tuning", "prefix": "prefix-tuning"}
DTYPES = tuple(PRECISIONS)
DTYPE_ALIASES = {
    "bfloat16": "bf16", "mixed-bf16": "bf16", "mixed_bf16": "bf16",
    "float16": "fp16", "half": "fp16", "mixed-fp16": "fp16", "mixed_fp16": "fp16",
    "pure-bf16": "bf16-pure", "bf16_pure": "bf16-pure", "bf16-true": "bf16-pure",
    "float32": "fp32", "32": "fp32", "amp_bf16": "amp-bf16", "amp_fp16": "amp-fp16",
    "fp8_te": "fp8-te", "fp8-delayed": "fp8-te", "fp8-te-delayed": "fp8-te", "fp8-current": "fp8-te-current",
    "fp8_te_current": "fp8-te-current", "fp8_torchao": "fp8-torchao", "fp8-tensorwise": "fp8-torchao",
    "fp8-rowwise": "fp8-torchao-rowwise", "fp8_torchao_rowwise": "fp8-torchao-rowwise", "mxfp8-te": "mxfp8",
    "nvfp4-te": "nvfp4",
}
Optimizer = Literal["adamw", "adamw_foreach", "adamw_8bit", "paged_adamw_8bit", "paged_adamw", "sgd", "sgd_momentum",
                    "adafactor", "lion", "galore_adamw", "galore_adamw_8bit", "galore_adamw_layerwise",
                    "galore_adamw_8bit_layerwise", "apollo_adamw", "apollo_mini", "adam_mini", "muon",
                    "schedulefree_adamw", "came", "adamw_torchao_8bit", "adamw_torchao_4bit", "lion_8bit", "ademamix",
                    "ademamix_8bit", "rmsprop", "rmsprop_8bit", "badam", "lisa"]
OPTIMIZERS: tuple[Optimizer, ...] = get_args(Optimizer)[:9]
MEMORY_OPTIMIZERS: tuple[Optimizer, ...] = get_args(Optimizer)[9:]
"""The memory-saving optimizers (hfmem.memory.optimizers: their states, step buffers and gradients alive)."""
OPTIMIZER_ALIASES = {
    "adamw_torch_fused": "adamw", "adamw_fused": "adamw",
    "adamw_torch": "adamw_foreach", "adam": "adamw_foreach", "torch_adamw": "adamw_foreach",
    "adamw8bit": "adamw_8bit", "adamw_bnb_8bit": "adamw_8bit", "adam8bit": "adamw_8bit",
    "paged_adamw8bit": "paged_adamw_8bit", "paged_adamw_32bit": "paged_adamw", "paged_adamw32bit": "paged_adamw",
    "sgd-momentum": "sgd_momentum", "momentum": "sgd_momentum", "lion_32bit": "lion",
    "apollo": "apollo_adamw", "adam-mini": "adam_mini", "adammini": "adam_mini",
    "schedule_free_adamw": "schedulefree_adamw", "schedulefree": "schedulefree_adamw", "came_pytorch": "came",
    "adamw_torch_8bit": "adamw_torchao_8bit", "ao_adamw_8bit": "adamw_torchao_8bit",
    "adamw_torch_4bit": "adamw_torchao_4bit", "adamw4bit": "adamw_torchao_4bit", "ao_adamw_4bit": "adamw_torchao_4bit",
    "paged_lion_8bit": "lion_8bit", "lion8bit": "lion_8bit", "paged_lion_32bit": "lion", "paged_lion": "lion",
    "paged_ademamix_8bit": "ademamix_8bit", "paged_ademamix_32bit": "ademamix", "ademamix_32bit": "ademamix",
    "rmsprop_bnb": "rmsprop", "rmsprop_bnb_32bit": "rmsprop", "rmsprop_bnb_8bit": "rmsprop_8bit",
    "galore": "galore_adamw", "galore_adamw8bit": "galore_adamw_8bit", "apollo-mini": "apollo_mini",
}
Sharding = Literal["none", "ddp", "zero1", "zero2", "zero3", "fsdp_full_shard", "fsdp_shard_grad_op"]
SHARDINGS: tuple[Sharding, ...] = get_args(Sharding)
"""Listed cheapest first; offload is a separate switch on top."""
SHARDING_ALIASES = {
    "single": "none", "0": "ddp", "zero-1": "zero1", "1": "zero1", "zero-2": "zero2", "2": "zero2",
    "zero-3": "zero3", "3": "zero3", "fsdp": "fsdp_full_shard", "full_shard": "fsdp_full_shard",
    "shard_grad_op": "fsdp_shard_grad_op", "distributed_optimizer": "zero1", "distributed-optimizer": "zero1",
}
OffloadDevice = Literal["cpu", "nvme"]
OFFLOAD_DEVICES: tuple[OffloadDevice, ...] = get_args(OffloadDevice)
"""Where offload puts its states: host RAM, or the node's NVMe through pinned host buffers (ZeRO-Infinity)."""
Checkpointing = Literal["off", "full", "selective", "op"]
CHECKPOINTING: tuple[Checkpointing, ...] = get_args(Checkpointing)
CHECKPOINTING_ALIASES = {
    "false": "off", "no": "off", "none": "off", "0": "off", "on": "full", "true": "full", "yes": "full", "1": "full",
    "op-sac": "op", "per-op": "op", "selective-op": "op",
}
CheckpointMethod = Literal["uniform", "block", "every"]
CHECKPOINT_METHODS: tuple[CheckpointMethod, ...] = get_args(CheckpointMethod)
Attention = Literal["flash_attention_2", "sdpa", "eager", "sdpa_math"]
ATTENTION: tuple[Attention, ...] = get_args(Attention)
ATTENTION_ALIASES = {
    "flash": "flash_attention_2", "fa2": "flash_attention_2", "flash_attention_3": "flash_attention_2",
    "flash-attn": "flash_attention_2", "math": "sdpa_math",
}
AdapterDtype = Literal["fp32", "compute"]
ADAPTER_DTYPES: tuple[AdapterDtype, ...] = get_args(AdapterDtype)
ADAPTER_DTYPE_ALIASES = {"float32": "fp32", "bf16": "compute", "fp16": "compute"}
QloraKernel = Literal["bitsandbytes", "bitsandbytes-legacy", "torchao"]
QLORA_KERNELS: tuple[QloraKernel, ...] = get_args(QloraKernel)
ExpertLora = Literal["merged", "per-expert"]
EXPERT_LORA: tuple[ExpertLora, ...] = get_args(ExpertLora)
FusedLoss = Literal["none", "cce", "liger"]
FUSED_LOSSES: tuple[FusedLoss, ...] = get_args(FusedLoss)
FUSED_LOSS_ALIASES = {"cut_cross_entropy": "cce", "cut-cross-entropy": "cce", "liger_kernel": "liger", "off": "none",
                      "false": "none"}
ModelLoading = Literal["per-rank-cpu", "per-rank-gpu", "rank0"]
MODEL_LOADING: tuple[ModelLoading, ...] = get_args(ModelLoading)
MODEL_LOADING_ALIASES = {"cpu": "per-rank-cpu", "gpu": "per-rank-gpu", "device_map": "per-rank-gpu",
                         "meta": "rank0", "cpu_ram_efficient_loading": "rank0", "rank-0": "rank0"}
StateDictType = Literal["full", "sharded"]
STATE_DICT_TYPES: tuple[StateDictType, ...] = get_args(StateDictType)
STATE_DICT_TYPE_ALIASES = {"full_state_dict": "full", "sharded_state_dict": "sharded", "local_state_dict": "sharded",
                           "local": "sharded"}
BaseQuantization = Literal["nf4", "int8", "gptq", "awq"]
BASE_QUANTIZATIONS: tuple[BaseQuantization, ...] = get_args(BaseQuantization)
BASE_QUANTIZATION_ALIASES = {"4bit": "nf4", "bnb_4bit": "nf4", "load_in_4bit": "nf4", "8bit": "int8",
                             "bnb_8bit": "int8", "load_in_8bit": "int8", "llm.int8": "int8", "llm_int8": "int8"}
ACTIVATION_FNS = tuple(ACTIVATION_SAVES)
ACTIVATION_FN_ALIASES = {"gelu_tanh": "gelu_tanh_fused", "gelu_approximate_tanh": "gelu_tanh_fused"}
PpSchedule = Literal["1f1b", "interleaved", "gpipe", "zero-bubble"]
PP_SCHEDULES: tuple[PpSchedule, ...] = get_args(PpSchedule)
PP_SCHEDULE_ALIASES = {"one-f-one-b": "1f1b", "interleaved-1f1b": "interleaved", "interleaved_1f1b": "interleaved",
                       "1f1b-interleaved": "interleaved", "zb": "zero-bubble", "zbh1": "zero-bubble",
                       "zero_bubble": "zero-bubble", "zbv": "zero-bubble"}
SequenceParallel = Literal["off", "megatron", "dtensor"]
SEQUENCE_PARALLEL: tuple[SequenceParallel, ...] = get_args(SequenceParallel)
SEQUENCE_PARALLEL_ALIASES = {"false": "off", "no": "off", "none": "off", "true": "megatron", "on": "megatron",
                             "yes": "megatron", "torch": "dtensor", "torchtitan": "dtensor"}
OptimizerDtype = Literal["fp32", "bf16"]
OPTIMIZER_DTYPES: tuple[OptimizerDtype, ...] = get_args(OptimizerDtype)
GradDtype = Literal["param", "fp32"]
GRAD_DTYPES: tuple[GradDtype, ...] = get_args(GradDtype)
GRAD_DTYPE_ALIASES = {"params": "param", "weights": "param", "float32": "fp32", "main_grad": "fp32",
                      "main-grad": "fp32"}
PpBuffers = Literal["step", "transfer", "kept"]
PP_BUFFERS: tuple[PpBuffers, ...] = get_args(PpBuffers)
PP_BUFFER_ALIASES = {"torch": "step", "torchtitan": "step", "megatron": "transfer", "p2p": "transfer",
                     "keep": "kept", "megatron-2021": "kept"}
NcclGroups = Literal["layout", "megatron"]
NCCL_GROUPS: tuple[NcclGroups, ...] = get_args(NcclGroups)
NCCL_GROUP_ALIASES = {"megatron-lm": "megatron", "megatron-core": "megatron", "torch": "layout"}
CpKind = Literal["ring", "all-gather", "all-to-all"]
CP_KINDS: tuple[CpKind, ...] = get_args(CpKind)
CP_KIND_ALIASES = {"p2p": "ring", "ring-attention": "ring", "allgather": "all-gather", "all_gather": "all-gather",
                   "a2a": "all-to-all", "ulysses": "all-to-all", "all2all": "all-to-all", "alltoall": "all-to-all"}

SWITCH = Boolean()
COUNT = Integer(1)


def module_names(setting_name: str, value: Any) -> tuple[str, ...]:
    """Module names from "q_proj,v_proj" or ["q_proj", "v_proj"], in order, each once (possibly none)."""
    if isinstance(value, str):
        names = [v.strip() for v in value.split(",")]
    elif isinstance(value, (list, tuple)):
        names = [str(v).strip() for v in value]
    else:
        raise InvalidInputError(f"{setting_name} must be a comma-separated list of module names; got {value!r}.")
    names = [n for n in names if n]
    for n in names:
        if not n.replace("_", "").replace(".", "").replace("-", "").isalnum():
            raise InvalidInputError(f"{setting_name}: {n!r} is not a module name.")
    return tuple(dict.fromkeys(names))


def parse_lora_targets(value: Any) -> tuple[str, ...]:
    """Accept "q_proj,v_proj", ["q_proj", "v_proj"], "all-linear"; return a tuple of module names."""
    names = module_names("lora_targets", value)
    if not names:
        raise InvalidInputError("lora_targets is empty; give module names (q_proj,v_proj) or all-linear.")
    return tuple(dict.fromkeys("all-linear" if n.lower() in {"all-linear", "all_linear"} else n for n in names))


def parse_modules_to_save(value: Any) -> tuple[str, ...]:
    """Accept "embed_tokens,lm_head", a list of names, or nothing; return a tuple of module leaf names."""
    names = module_names("modules_to_save", value)
    if any(n.lower() in {"all-linear", "all_linear"} for n in names):
        raise InvalidInputError("modules_to_save takes module names (embed_tokens,lm_head), not all-linear.")
    return tuple(n.rsplit(".", 1)[-1] for n in names)


LORA_TARGETS = Parsed(parse_lora_targets, "module names, comma-separated (q_proj,v_proj), or all-linear", ",".join)
MODULES_TO_SAVE = Parsed(parse_modules_to_save, "module names, comma-separated (embed_tokens,lm_head)", ",".join)


@dataclass(frozen=True)
class Overhead:
    """Memory outside PyTorch's tensors, as explicit terms (not a fudge factor)."""

    cuda_context_gib: float = setting(0.5, Number(0, 64), panel=SHARDING)
    """CUDA context per GPU in GiB: the context, cuBLAS/cuDNN handles and kernels loaded by the process; it shows
    in nvidia-smi but not in torch.cuda.memory_allocated (typically 0.3-1.3 GiB by GPU/driver)."""
    fragmentation: float = setting(0.10, Number(0, 10), panel=SHARDING)
    """The caching allocator's reserved-but-unused share, as a fraction of the peak of allocated memory
    (reserved = allocated x (1 + fragmentation)); 5-15% is typical for LLM training."""
    nccl_gib: float | None = setting(None, OrNone(Number(0, 64)), shown="from the layout", panel=SHARDING)
    """NCCL's device memory per GPU in GiB on more than one GPU: each communicator's buffers, outside PyTorch's
    allocator (nvidia-smi shows them). Unset: NCCL v2.21.5's defaults for the communicators the layout's ranks use
    (hfmem.memory.nccl); 0 switches it off; a figure replaces it (NCCL_BUFFSIZE, NCCL_NVLS_ENABLE,
    NCCL_MIN/MAX_NCHANNELS and the NCCL version change it)."""
    nccl_nvls: bool | None = setting(None, OrNone(SWITCH), shown="from the GPU", panel=SHARDING)
    """Count NCCL's NVLink SHARP buffers (NCCL_NVLS_ENABLE) for communicators of more than 2 GPUs of a node. Unset:
    on for an NVSwitch Hopper or Blackwell board of the catalogue (H100, H200, B200), off elsewhere and for an
    estimate not tied to one GPU."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Serving:
    """The serving deployment the fit matrix's serving column (--method serve) judges: one replica per GPU at
    tensor parallelism 1, a failing cell advising fp8 KV or the TP degree that fits (`hfmem serve` sets the rest)."""

    engine: str = setting("vllm", Choice(ENGINES), panel=SERVING)
    """The inference engine whose reserve and KV sizing rules apply (hfmem.serving.engines: each default cited)."""
    context: int = setting(4096, COUNT, panel=SERVING)
    """Tokens per request (prompt and output): the serving cell's concurrency is at this length."""
    serve_concurrency: int = setting(1, COUNT, panel=SERVING)
    """Requests at once to serve at --context (hfmem serve's --concurrency; hfmem scan's --concurrency is its
    fetches): the cheapest serving pick holds this many, in as many replicas as that takes."""
    kv_cache_dtype: str = setting("auto", Choice(KV_CACHE_DTYPES), panel=SERVING)
    """The KV cache's element type (auto: the model's dtype, the engines' default)."""
    quantization: str | None = setting(None, OrNone(Choice(SERVING_QUANTIZATIONS)), shown="as stored", panel=SERVING)
    """The served weights packed in this format (each format's bytes, scales and zeros) instead of as stored."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TrainingSettings:
    """One training configuration; each field's metadata names its CLI flag (`--seq-len` -> seq_len)."""

    method: Method = setting("full", Choice(ALL_METHODS, METHOD_ALIASES), flags=("--method", "-m"), many=True,
                             shown="full, lora, qlora", panel=TRAINING)
    """What is trained: full (every weight), lora (adapters on a frozen 16-bit base), qlora (adapters on a 4-bit
    NF4 base); PEFT's other methods on a frozen base (4-bit with base_quantization nf4): dora (LoRA plus a
    magnitude vector; each forward builds W + B·A to take its column norm), lora-fa (LoRA with A frozen), vera
    (shared frozen random A/B, two trained vectors per layer, rank lora_rank), ia3 (one trained vector per
    adapted layer), oft (a block-diagonal rotation of each adapted layer's input, blocks of oft_block_size), boft
    (butterfly products of such rotations, blocks of boft_block_size, and a scale per output),
    prompt-tuning and prefix-tuning (num_virtual_tokens trained embeddings; prefix: per layer
    K/V). The flag repeats or takes a comma-separated list: each method gets its estimate and fit; serve adds a
    serving column (the Serving panel's deployment) beside them, alone beside the default methods."""
    seq_len: int | None = setting(None, OrNone(COUNT), affects=("activations",),
                                  shown=f"{DEFAULT_SEQ_LEN}, or the model's maximum if smaller", panel=TRAINING)
    """Tokens per sequence."""
    micro_batch_size: int = setting(1, COUNT, flags=("--batch-size", "-b"), affects=("activations",), panel=TRAINING)
    """Micro-batch size per GPU."""
    gradient_accumulation_steps: int = setting(1, COUNT, flags=("--grad-accum",), affects=("state",), panel=TRAINING)
    """Gradient accumulation steps: more than one keeps the gradients alive between micro-batches."""
    eval_batch_size: int | None = setting(None, OrNone(COUNT), affects=(), shown="no evaluation", panel=TRAINING)
    """Sequences per GPU in an evaluation forward between steps (TrainingArguments.per_device_eval_batch_size when
    eval_strategy is on): a no-grad forward at the training length beside the weights and optimizer states, whose
    logits and fp32 loss buffers can outgrow the training step's. The fit takes the larger phase."""
    generation_batch_size: int | None = setting(None, OrNone(COUNT), affects=("state",), shown="no generation",
                                                panel=TRAINING)
    """Sequences per GPU generated between steps with model.generate and its KV cache (TRL's GRPO without vLLM:
    per_device_train_batch_size x steps_per_generation; a sampling callback): the prompt's prefill forward, then
    the cache growing to seq_len tokens, beside the resident weights and optimizer states. The fit takes the
    larger phase."""
    generation_tokens: int = setting(256, COUNT, affects=(), panel=TRAINING)
    """New tokens per generated sequence (TRL's max_completion_length); the prompt is the rest of seq_len."""
    generation_gathers_weights: bool = setting(True, SWITCH, affects=("state",), panel=SHARDING)
    """ZeRO-3 gathers the whole model's weights on every GPU to generate (TRL's ds3_gather_for_generation, its
    default); off, each layer is gathered as the forward reaches it. Only ZeRO-3 with generation reads it."""
    dtype: str = setting("bf16", Choice(DTYPES, DTYPE_ALIASES), affects=("trainability", "state", "activations"),
                         panel=TRAINING)
    """Training precision: bf16/fp16 mixed precision (16-bit weights and gradients, fp32 master weights and
    optimizer states; ZeRO/DeepSpeed, FSDP MixedPrecision); bf16-pure (bf16 weights, gradients and states, no
    master copy: torchtune, LitGPT bf16-true); fp32; amp-bf16/amp-fp16 (torch autocast over fp32 weights, as HF
    Trainer --bf16/--fp16 on an fp32-loaded model: 16-bit copies of the matmul weights, an fp32 residual).
    Low-precision recipes for a full fine-tune or pretraining (bf16 mixed precision's weights and states plus the
    recipe's terms, hfmem.memory.lowprecision; PEFT methods are estimated as bf16): fp8-te (TransformerEngine
    delayed scaling, Megatron's --fp8-format hybrid), fp8-te-current (TE Float8CurrentScaling), fp8-torchao and
    fp8-torchao-rowwise (torchao float8, torchtitan's [float8] recipe_name tensorwise/rowwise), mxfp8 and nvfp4
    (TE MXFP8BlockScaling and NVFP4BlockScaling, Blackwell only)."""
    fp8_amax_history_len: int = setting(1024, COUNT, affects=("state",), panel=TRAINING)
    """fp8-te's amax history per quantizer (TE DelayedScaling amax_history_len, default 1024; Megatron-LM's
    TransformerConfig.fp8_amax_history_len defaults to 1, transformer_config.py line 621 at d98e8a6): fp32 amaxes of
    5 quantizers per GEMM."""
    fp8_params: bool = setting(False, SWITCH, affects=("state",), panel=TRAINING)
    """A TransformerEngine recipe (fp8-te, fp8-te-current, mxfp8, nvfp4) holds the decoder linears' weights only as
    its quantized copies: Megatron-LM's --fp8-param-gather (megatron/training/arguments.py lines 2016-2018 at
    d98e8a6), NeMo's fp8_params, Megatron-Bridge's fp8_param_gather, built under TE's quantized_model_init ("hold
    only quantized copies of its parameters", transformer_engine/pytorch/quantization.py lines 878-905 at d0067d0),
    whose weight the linear uses as it is (module/linear.py line 476). Their 16-bit weights are gone; the fp32
    master copy in the optimizer stays."""
    optimizer: Optimizer | None = setting(None, OrNone(Choice(OPTIMIZERS + MEMORY_OPTIMIZERS, OPTIMIZER_ALIASES)),
                                          affects=("state",), shown="adamw (QLoRA: paged_adamw_8bit)", panel=TRAINING)
    """adamw: fused AdamW (transformers' default adamw_torch_fused on torch >= 2.8); adamw_foreach:
    torch.optim.AdamW's default multi-tensor path, whose step briefly allocates one more state-sized buffer;
    adamw_8bit: bitsandbytes' blockwise 8-bit states; paged_adamw_8bit and paged_adamw (32-bit states): bitsandbytes
    paged optimizers, whose states live in CUDA managed memory outside PyTorch's allocator (they can page out to
    the CPU instead of failing); sgd: no state; sgd_momentum and lion: one state per weight; adafactor: HF
    Adafactor's factored second moment (a row and a column vector per matrix). Memory-saving ones
    (hfmem.memory.optimizers): galore_adamw[_8bit][_layerwise] (moments of the gradient projected to
    galore_rank, plus the projection; layerwise: one parameter's gradient alive), apollo_adamw/apollo_mini
    (moments projected by a random projection, which is kept), adam_mini (one second moment per block),
    muon (momentum for the decoder's matrices, AdamW for the rest), schedulefree_adamw (z and the second moment),
    came, adamw_torchao_8bit/4bit, lion_8bit, ademamix[_8bit], rmsprop[_8bit], badam and lisa (only
    active_layers decoder layers trained at a time)."""
    sharding: Sharding | None = setting(None, OrNone(Choice(SHARDINGS, SHARDING_ALIASES)), flags=("--zero",),
                                        affects=("state",), shown="none on one GPU, ddp on several", panel=SHARDING)
    """Data parallelism and sharding: ddp, ZeRO stages 1-3, FSDP full shard (= ZeRO-3) or shard-grad-op
    (= ZeRO-2); each adds its all-gather and bucket buffers."""
    grad_dtype: GradDtype = setting("param", Choice(GRAD_DTYPES, GRAD_DTYPE_ALIASES), affects=("state",),
                                    panel=SHARDING)
    """The dtype trained weights' gradients accumulate and are reduced in: param (param.grad in the trained weights'
    dtype, as autograd leaves it) or fp32 (Megatron-LM's main_grad buffer: accumulate_allreduce_grads_in_fp32, which
    its bf16 training turns on unless grad_reduce_in_bf16): 4 bytes per trained parameter, kept whole by ZeRO-1 and
    the distributed optimizer, sharded by ZeRO-2/3 and FSDP."""
    grad_bucket_view: bool = setting(False, SWITCH, affects=("state",), panel=SHARDING)
    """Gradients live in the data-parallel reduction's own buckets (torch DDP gradient_as_bucket_view=True;
    Megatron-LM's contiguous gradient buffer, of which each param.main_grad is a view): no second gradient copy
    under ddp, and no separate reduce bucket under ZeRO-1/2 (Megatron's distributed optimizer); the buckets are
    allocated once, so the gradients they hold exist through the forward as well."""
    optimizer_dtype: OptimizerDtype = setting("fp32", Choice(OPTIMIZER_DTYPES), affects=("state",), panel=SHARDING)
    """The dtype of the optimizer's states and master copy of 16-bit weights (Apex DistributedFusedAdam's dtype,
    NeMo's optim.dtype). bf16: AdamW's moments at 2 bytes each and no master copy, the bf16 weights being what it
    updates (NeMo sets store_params False when the optimizer dtype is the model's,
    nemo/collections/nlp/models/language_modeling/megatron_base_model.py lines 806-807 at NVIDIA/NeMo 8e3d65d),
    except over fp8_params weights, of which it keeps a bf16 copy (store_params True, lines 804-805)."""
    master_remainders: bool = setting(False, SWITCH, affects=("state",), panel=SHARDING)
    """The fp32 master copy of bf16 weights kept as the 16 low bits the bf16 weight lacks: 2 bytes per trained
    parameter instead of 4 (Apex DistributedFusedAdam's store_param_remainders, an int16 buffer,
    apex/contrib/optimizers/distributed_fused_adam.py lines 361-363 and 462 at NVIDIA/apex f9f19d5; NeMo turns it
    on for bf16 O2 training with the fp32 optimizer, megatron_base_model.py lines 808-810 at 8e3d65d). Only bf16
    weights with the fp32 optimizer dtype read it; FP8 weights (fp8_params) keep a whole master copy (line 805)."""
    num_gpus: int = setting(1, COUNT, affects=("state",), panel=SHARDING)
    """GPUs the estimate shards over."""
    offload_optimizer: bool = setting(False, SWITCH, affects=("state",), panel=SHARDING)
    """Optimizer states and fp32 master weights (and gradient partitions) on the CPU (ZeRO/FSDP offload)."""
    offload_params: bool = setting(False, SWITCH, affects=("state",), panel=SHARDING)
    """Sharded parameters on the CPU, only the gathered layers on the GPU (ZeRO-3/FSDP)."""
    offload_device: OffloadDevice = setting("cpu", Choice(OFFLOAD_DEVICES), affects=("state",), panel=SHARDING)
    """Where offloaded optimizer states and parameters live: cpu (host RAM) or nvme (DeepSpeed ZeRO-Infinity's
    offload_optimizer/offload_param device "nvme", ZeRO-3 only: the states, fp32 gradient partitions and the
    parameters beyond param_max_in_cpu in files on the node's NVMe, swapped through pinned host buffers; the
    optimizer still steps on the CPU)."""
    optimizer_swap_buffers: int = setting(4, COUNT, affects=("state",), panel=SHARDING)
    """NVMe offload: pinned host buffers of the optimizer swapper, each the size of the largest fp32 sub-group
    (DeepSpeed offload_optimizer.buffer_count, default 4; SwapBufferManager pins them:
    https://github.com/microsoft/DeepSpeed/blob/38327e07f6cd39b63418f60cedd1651b0be3e7c3/deepspeed/runtime/zero/offload_config.py#L64,
    https://github.com/microsoft/DeepSpeed/blob/38327e07f6cd39b63418f60cedd1651b0be3e7c3/deepspeed/runtime/swap_tensor/optimizer_utils.py#L139)."""
    sub_group_size: float = setting(1e9, Number(0, 1e15), affects=("state",), shown="1e9",
                                         panel=SHARDING)
    """NVMe offload: elements per ZeRO-3 optimizer sub-group, the tile the optimizer swapper moves at a time
    (DeepSpeed zero_optimization.sub_group_size, default 1e9): a sub-group closes at the first parameter that
    reaches it, so 0 makes each parameter one (_create_fp16_sub_groups):
    https://github.com/microsoft/DeepSpeed/blob/38327e07f6cd39b63418f60cedd1651b0be3e7c3/deepspeed/runtime/zero/config.py#L168,
    https://github.com/microsoft/DeepSpeed/blob/38327e07f6cd39b63418f60cedd1651b0be3e7c3/deepspeed/runtime/zero/stage3.py#L959."""
    max_live_parameters: float = setting(1e9, Number(0, 1e15), affects=("state",), shown="1e9", panel=SHARDING)
    """ZeRO-3: DeepSpeed prefetches the next modules' parameters only while fewer than this many elements are gathered
    (zero_optimization.stage3_max_live_parameters, default 1e9); see hfmem.memory.zero3_gather."""
    max_reuse_distance: float = setting(1e9, Number(0, 1e15), affects=("state",), shown="1e9", panel=SHARDING)
    """ZeRO-3: a module's parameters stay gathered after it ran when they are used again within this many elements
    of modules (zero_optimization.stage3_max_reuse_distance, default 1e9); see hfmem.memory.zero3_gather."""
    prefetch_bucket_size: float | None = setting(None, OrNone(Number(0, 1e15)), affects=("state",),
                                                 shown="0.9 x hidden² (HF auto)", panel=SHARDING)
    """ZeRO-3: elements DeepSpeed prefetches after each fetch (zero_optimization.stage3_prefetch_bucket_size); unset,
    Hugging Face's "auto", 0.9 x hidden² (transformers/integrations/deepspeed.py; DeepSpeed's own default is 5e7)."""
    param_swap_buffers: int = setting(5, COUNT, affects=("state",), panel=SHARDING)
    """NVMe parameter offload: pinned host buffers the parameter swapper reads layers into (DeepSpeed
    offload_param.buffer_count, default 5):
    https://github.com/microsoft/DeepSpeed/blob/38327e07f6cd39b63418f60cedd1651b0be3e7c3/deepspeed/runtime/zero/offload_config.py#L33,
    https://github.com/microsoft/DeepSpeed/blob/38327e07f6cd39b63418f60cedd1651b0be3e7c3/deepspeed/runtime/swap_tensor/partitioned_param_swapper.py#L130."""
    param_swap_buffer_size: float = setting(1e8, Number(1, 1e15), affects=("state",), shown="1e8",
                                                 panel=SHARDING)
    """NVMe parameter offload: elements per parameter swap buffer (DeepSpeed offload_param.buffer_size, default 1e8):
    https://github.com/microsoft/DeepSpeed/blob/38327e07f6cd39b63418f60cedd1651b0be3e7c3/deepspeed/runtime/zero/offload_config.py#L36."""
    param_max_in_cpu: float = setting(1e9, Number(0, 1e15), affects=("state",), shown="1e9",
                                           panel=SHARDING)
    """NVMe parameter offload: parameter elements per rank kept in pinned host memory, the rest on NVMe (DeepSpeed
    offload_param.max_in_cpu, default 1e9; stage3.py sizes the host copy by it):
    https://github.com/microsoft/DeepSpeed/blob/38327e07f6cd39b63418f60cedd1651b0be3e7c3/deepspeed/runtime/zero/offload_config.py#L39,
    https://github.com/microsoft/DeepSpeed/blob/38327e07f6cd39b63418f60cedd1651b0be3e7c3/deepspeed/runtime/zero/stage3.py#L687."""
    fsdp_wrap_embeddings: bool = setting(False, SWITCH, affects=("state",), panel=SHARDING)
    """FSDP full shard with the embeddings and the head as units of their own (torchtune custom_sharded_layers):
    each is gathered only while used, instead of in the root unit for the whole step."""
    fsdp_mixed_units: bool = setting(False, SWITCH, affects=("state",), panel=SHARDING)
    """LoRA under FSDP1 with use_orig_params=True and each adapter in the same unit as its frozen base (a plain
    accelerate loop with TRANSFORMER_BASED_WRAP; HF Trainer wraps adapters apart with PEFT's fsdp_auto_wrap_policy):
    a unit's flat gradient covers its frozen weights too, so the gradient shards are full-size (torch's FSDP
    docstring warns of "higher than expected gradient memory usage"). Only FSDP sharding reads it."""
    fp8_all_gather: bool = setting(False, SWITCH, affects=("state",), panel=SHARDING)
    """dtype fp8-torchao under FSDP full shard: FSDP2 all-gathers the decoder linears' weights in float8 (torchao
    Float8LinearConfig.enable_fsdp_float8_all_gather; fsdp_utils.py fsdp_pre_all_gather gathers the float8 data),
    so the gathered layers hold them at 1 byte and the all-gathers move half the bytes. torchao allows it with
    tensorwise scaling only. Only FSDP full shard reads it."""
    sync_each_batch: bool = setting(False, SWITCH, affects=("state",), panel=SHARDING)
    """FSDP with gradient accumulation: reduce-scatter the gradients after every micro-batch (accelerate's
    sync_each_batch=True; torchtune, which calls no no_sync). Off, as accelerate, HF Trainer and LitGPT do, the
    accumulating micro-batches run under no_sync and every rank keeps the whole unsharded gradients of each unit
    until the step (torch's no_sync docstring: "accumulate the full model gradients (instead of gradient shards)").
    Only FSDP sharding with --grad-accum above 1 reads it."""
    model_loading: ModelLoading = setting("per-rank-cpu", Choice(MODEL_LOADING, MODEL_LOADING_ALIASES),
                                          affects=("state",), panel=SHARDING)
    """How each rank loads the checkpoint before sharding: per-rank-cpu (every rank reads the whole model into host
    RAM, then FSDP/ZeRO moves it to its GPU unit by unit: HF from_pretrained without a device_map); per-rank-gpu
    (every rank materialises the whole model on its GPU first, e.g. device_map={"": rank}: the load phase peaks
    at the full model per GPU); rank0 (rank 0 reads it, the others start on the meta device and receive their
    shards: accelerate fsdp_cpu_ram_efficient_loading, torchtune)."""
    state_dict_type: StateDictType = setting("full", Choice(STATE_DICT_TYPES, STATE_DICT_TYPE_ALIASES),
                                             affects=("state",), panel=SHARDING)
    """How a sharded run saves its checkpoints: full (FSDP FULL_STATE_DICT with offload_to_cpu and rank0_only, the
    default of HF Trainer and accelerate's FSDP1: rank 0's host gathers the whole model, then the whole optimizer
    state; DeepSpeed ZeRO-3 with stage3_gather_16bit_weights_on_model_save: the 16-bit weights alone) or sharded
    (each rank writes its own shard: SHARDED_STATE_DICT, accelerate's FSDP2 default, DeepSpeed's own checkpoint
    files). Only FSDP and ZeRO-3 on several GPUs read it."""
    gpus_per_node: int = setting(8, COUNT, affects=(), panel=SHARDING)
    """GPUs per machine: how many ranks share one host's RAM (offloaded states, load-time copies)."""
    host_ram_gib: float | None = setting(None, OrNone(Number(1, 1 << 20)), affects=(),
                                         shown="the GPU's common server (hfmem gpus), else not checked", panel=SHARDING)
    """Host RAM per machine in GiB: a setup whose host memory (offload, load-time copies) exceeds it does not fit.
    Unset, each catalogue GPU's cells assume its common server's (DGX H100: 2,048; AWS g4dn.metal for T4: 384)."""
    # The network and the layout search: multi-node step time and the pick of the fastest and cheapest setup.
    network_gbps: float | None = setting(None, OrNone(Number(0.1, 1e5)), affects=(),
                                         shown="the GPU's common server (hfmem gpus)", panel=TIME)
    """Inter-node bandwidth per GPU in Gb/s, one direction (400: one 400 Gb/s NIC per GPU, as on DGX H100): the
    collectives of a setup spanning machines of gpus_per_node GPUs cross it; inside a machine they run over
    NVLink or PCIe."""
    nvme_gib: float | None = setting(None, OrNone(Number(1, 1 << 30)), affects=(),
                                     shown="the GPU's common server (hfmem gpus), else not checked", panel=SHARDING)
    """NVMe (local SSD) space per machine in GiB for offload_device nvme: a setup whose NVMe need exceeds it does not
    fit. Unset, each catalogue GPU's cells assume its common server's (DGX H100: 8 x 3.84 TB, 28,610 GiB)."""
    nvme_read_gbps: float | None = setting(None, OrNone(Number(0.01, 1e5)), affects=(),
                                           shown="the GPU's common server (hfmem gpus), else untimed", panel=TIME)
    """NVMe read bandwidth per machine in GB/s, shared by its ranks: the swapped-in optimizer states and parameters
    of offload_device nvme cross it."""
    nvme_write_gbps: float | None = setting(None, OrNone(Number(0.01, 1e5)), affects=(),
                                            shown="the GPU's common server (hfmem gpus), else untimed", panel=TIME)
    """NVMe write bandwidth per machine in GB/s, shared by its ranks: the swapped-out optimizer states, gradients
    and updated parameters of offload_device nvme cross it."""
    max_gpus: int = setting(1024, COUNT, affects=(), panel=SHARDING)
    """The most GPUs the fit search suggests and times for one cell."""
    hfu: float | None = setting(None, OrNone(Number(0.01, 1)), affects=(),
                                shown="hfu_stack's for the GPU's architecture", panel=TIME)
    """Hardware FLOPs utilisation of the bf16/fp16 matmul peak the roofline times compute at (0.01-1): your stack's
    own where you know it; unset, the cited figure of hfu_stack on the GPU's architecture (Hopper 0.404). Under an
    FP8/FP4 recipe the quantized linears run the recipe's cited GEMM speedup over it (compute.roofline.GEMM_SPEEDUP),
    the attention core and the head stay at it."""
    hfu_stack: str = setting("any", Choice(HFU_STACKS), affects=(), panel=TIME)
    """Whose published utilisation sets the default HFU: any (the cited sources' median on the GPU's architecture,
    Hopper 0.404) or megatron (Megatron-LM's own papers and README runs: Hopper 0.464); the megatron and nemo
    profiles set megatron. Ignored when hfu is given."""
    pick_floor: float = setting(0.1, Number(0, 1), affects=(), panel=TIME)
    """A setup whose tokens/s per GPU is below this share of the best per-GPU rate of a fitting setup of its method
    is never named fastest or cheapest: a cheap but glacial run (a 1-GPU offload at 1% of the speed) is not a pick."""
    gradient_checkpointing: Checkpointing = setting("off", Choice(CHECKPOINTING, CHECKPOINTING_ALIASES),
                                                    affects=("trainability", "activations", "state"), panel=TRAINING)
    """Gradient checkpointing: off, full (layers recomputed in backward, which ones set by checkpoint_method),
    selective (the attention core only) or op (torchtitan's per-op selective checkpointing: every layer keeps its
    input and the outputs of every other matmul and of the attention kernel, the rest is recomputed)."""
    checkpoint_method: CheckpointMethod = setting("uniform", Choice(CHECKPOINT_METHODS), affects=("activations",),
                                                  panel=TRAINING)
    """Which layers full checkpointing recomputes, checkpoint_layers counting: uniform (Megatron's: every layer, in
    groups of that many recomputed together, each group keeping only its input; 1 is the usual per-layer
    checkpointing), block (Megatron's: the first that many layers of each pipeline stage's model chunk recomputed
    one by one, the rest saving everything) or every (torchtitan's layer-selective option: every that-many-th
    layer recomputed, the others saving everything). Only full checkpointing reads it."""
    checkpoint_layers: int = setting(1, COUNT, affects=("activations",), panel=TRAINING)
    """The count checkpoint_method reads: layers per recomputed group (uniform), layers recomputed per model chunk
    (block) or the interval between recomputed layers (every). Only full checkpointing reads it."""
    attention: Attention = setting("flash_attention_2", Choice(ATTENTION, ATTENTION_ALIASES),
                                   affects=("activations",), panel=TRAINING)
    """Attention kernel: flash_attention_2 (the flash-attn kernel); sdpa (torch SDPA dispatching to its flash or
    memory-efficient kernel, falling back to math where the model's shapes rule those out); eager (the explicit
    softmax(QK^T)V that stores the attention matrix); sdpa_math (SDPA's math fallback forced: stores the attention
    matrix, upcast to fp32 as torch >= 2.5 does by default)."""
    activation_fn: str | None = setting(None, OrNone(Choice(ACTIVATION_FNS, ACTIVATION_FN_ALIASES)),
                                        affects=("activations",), shown="the model's hidden_act", panel=TRAINING)
    """The MLP activation as the training code calls it, where it differs from the model's hidden_act (what
    transformers runs): what the activation keeps for backward differs by implementation, e.g. gelu_tanh_fused
    (F.gelu(x, approximate="tanh") as one op, as LitGPT and nanoGPT call it) keeps only its input where
    transformers' gelu_new spells the same curve out in elementwise ops that keep three temporaries more."""
    tie_word_embeddings: bool | None = setting(None, OrNone(SWITCH), affects=("split",), shown="the model's config",
                                               panel=TRAINING)
    """Whether the output head shares the input embedding's matrix, where the framework overrides the model's
    config (untying it, or tying it): an untied head is a vocab x hidden matrix of its own, with its weights,
    gradients and optimizer states, and for LoRA a frozen matrix more (or a trained copy in modules_to_save)."""
    repeat_kv: bool = setting(False, SWITCH, affects=("activations",), panel=TRAINING)
    """The model code repeats grouped K/V heads to every query head before attention (LitGPT's expand + reshape),
    so K/V are saved at the query heads' count; transformers hands the kernel the grouped heads (enable_gqa /
    flash-attn's native GQA)."""
    padding_mask: bool = setting(False, SWITCH, affects=("activations",), panel=TRAINING)
    """Batches padded to their longest sample, with an attention mask (DataCollatorWithPadding,
    DataCollatorForSeq2Seq); seq_len is then the padded length. transformers hands SDPA a 4-D mask: grouped K/V
    are repeated to every query head and each layer keeps a compute-dtype copy of the mask (b·s² elements) for
    backward. flash_attention_2 unpads instead and eager keeps no mask: no change there. Off: full-length or
    packed sequences (transformers drops a mask without padded positions)."""
    lora_rank: int = setting(16, COUNT, affects=("split", "trainability"), panel=TRAINING)
    """LoRA rank r: r·(in + out) parameters per adapted layer (alpha does not change memory)."""
    lora_targets: tuple[str, ...] = setting(("all-linear",), LORA_TARGETS, affects=("split", "trainability"),
                                            panel=TRAINING)
    """LoRA target modules, matched by leaf name as PEFT does: all-linear is every nn.Linear/Conv1D except the
    output head."""
    modules_to_save: tuple[str, ...] = setting((), MODULES_TO_SAVE, affects=("split", "trainability"), shown="none",
                                               panel=TRAINING)
    """LoRA/QLoRA modules trained whole beside the adapters, by leaf name (PEFT modules_to_save, Axolotl
    lora_modules_to_save, LLaMA-Factory additional_target): PEFT's ModulesToSaveWrapper keeps the frozen original
    and a trainable copy in the model's dtype, with its gradients and optimizer states (and master weights as the
    dtype says); a trained embedding keeps its token ids and a trained head its input. Accepts the input
    embedding's names (embed_tokens, wte, word_embeddings, ...) and linear layers' leaf names (lm_head, score)."""
    expert_lora: ExpertLora = setting("merged", Choice(EXPERT_LORA), affects=("trainability",), panel=TRAINING)
    """How LoRA adapts MoE experts stored as fused 3-D tensors (transformers 5): merged (PEFT's ParamWrapper: each
    forward builds W + B·A for the whole expert stack, which autograd keeps, and backward its full-size gradient)
    or per-expert (per-expert nn.Linear modules, as transformers 4 or axolotl's llama4_linearized_experts: each
    expert's adapter keeps the inputs of its routed tokens). A quantised base's experts are counted as per-expert
    quantised Linears, so their adapters are per-expert whatever this says."""
    lora_dropout: float = setting(0.0, Number(0, 1), affects=("trainability",), panel=TRAINING)
    """LoRA dropout on the adapters' input: above 0 each adapted layer keeps a dropout mask and its dropped input."""
    adapter_dtype: AdapterDtype = setting("fp32", Choice(ADAPTER_DTYPES, ADAPTER_DTYPE_ALIASES),
                                          affects=("trainability", "state"), panel=TRAINING)
    """LoRA adapter weights: fp32 (PEFT's default autocast_adapter_dtype=True) or the compute dtype (torchtune,
    LitGPT)."""
    qlora_kernel: QloraKernel = setting("bitsandbytes", Choice(QLORA_KERNELS), affects=("trainability",),
                                        panel=TRAINING)
    """The 4-bit linear: bitsandbytes (HF/PEFT with bitsandbytes >= 0.43.2: MatMul4Bit keeps only the packed
    weight for backward), bitsandbytes-legacy (bitsandbytes < 0.43.2, before PR #1270 of July 2024: it also kept
    each layer's input, as a ctx attribute) or torchao (torchtune's NF4, which keeps no input either)."""
    base_quantization: BaseQuantization | None = setting(
        None, OrNone(Choice(BASE_QUANTIZATIONS, BASE_QUANTIZATION_ALIASES)),
        affects=("split", "trainability", "state", "activations"),
        shown="the model's quantization_config, else lora: none, qlora: nf4", panel=TRAINING)
    """The frozen base's weight format under LoRA/QLoRA: nf4 (bitsandbytes 4-bit, as qlora); int8 (bitsandbytes
    LLM.int8: int8 weights and an fp32 scale per output row; its matmul keeps each layer's input on the autograd
    ctx and dequantises the weight in backward); gptq and awq (4-bit weights packed in int32, int32 zeros and
    fp16 scales per group of 128 input rows, GPTQ's int32 g_idx per input row; the bits and group size of the
    model's quantization_config when it is stored so; their trainable torch kernels dequantise each weight
    and matmul, so autograd saves every layer's dequantised weight for backward)."""
    qlora_double_quant: bool = setting(True, SWITCH, affects=("split",), panel=TRAINING)
    """NF4 with double quantisation (bnb_4bit_use_double_quant / LitGPT bnb.nf4-dq: an 8-bit absmax per 64
    weights); off keeps bitsandbytes' fp32 absmax per 64 weights, +0.047 B/param (LitGPT bnb.nf4: lightning's
    _NF4Linear passes compress_statistics=False to bitsandbytes.functional.quantize_4bit)."""
    optimizer_in_backward: bool = setting(False, SWITCH, affects=("state",), panel=TRAINING)
    """Step each parameter as its gradient is ready and free it (torchtune optimizer_in_bwd): no full gradient
    set."""
    loss_chunks: int = setting(1, COUNT, affects=("activations",), panel=TRAINING)
    """Chunked cross-entropy over this many sequence chunks (torchtune CEWithChunkedOutputLoss: 8): the loss
    backward's fp32 (b·s, V) buffers exist one chunk at a time. 1: the usual whole-sequence loss."""
    loss_upcast: bool = setting(True, SWITCH, affects=("activations",), panel=TRAINING)
    """The cross-entropy runs on fp32 logits (transformers' loss_function casts them); off: on the compute-dtype
    logits (a loop calling nn.CrossEntropyLoss on model(...).logits, LitGPT's chunked_cross_entropy)."""
    compile_loss: bool = setting(False, SWITCH, affects=("activations",), panel=TRAINING)
    """The loss under torch.compile (torchtune compile=True compiles model and loss): inductor saves the
    compute-dtype logits and fp32 row statistics instead of log_softmax's fp32 output. The decoder layers
    are a separate switch, compile_layers."""
    fused_loss: FusedLoss = setting("none", Choice(FUSED_LOSSES, FUSED_LOSS_ALIASES), affects=("activations",),
                                    panel=TRAINING)
    """The output projection and the cross-entropy as one kernel that never builds the (tokens x vocab) logits:
    cce (Apple's Cut Cross-Entropy, axolotl's CutCrossEntropyPlugin) keeps the head's input and an fp32 log-sum-exp
    per token and computes the gradients in backward; liger (Liger Kernel's fused linear cross-entropy,
    use_liger_kernel) computes them during the forward, vocabulary-sized chunk by chunk, and keeps the input's
    gradient (and a trained head's weight gradient) until backward. none: transformers' lm_head and loss."""
    compile_layers: bool = setting(False, SWITCH, affects=("activations",), panel=TRAINING)
    """Each decoder layer under torch.compile (torchtune compile=True; inductor's min-cut partitioner): norms keep
    only input and rstd, activation functions and eager attention's fp32 softmax are recomputed in backward. The
    same tensors Megatron's fused layers keep (TransformerEngine's LayerNormLinear, fused bias-GeLU/SwiGLU and
    bias-dropout-add; with eager attention Korthikanti et al. 2022's 34·sbh + 5·as²b per layer)."""
    fused_softmax: bool = setting(False, SWITCH, affects=("activations",), panel=TRAINING)
    """Eager attention's scale, causal mask and softmax as one kernel that keeps only its compute-dtype output for
    backward (Megatron's FusedScaleMaskSoftmax, on unless --no-masked-softmax-fusion: ScaledUpperTriangMaskedSoftmax
    saves softmax_results, megatron/core/fusions/fused_softmax.py:20-36, for half inputs and key lengths
    16 < sk <= 4096, fused_softmax.py:238-263); off: the model code's softmax (in fp32 where it upcasts). Only eager
    attention reads it."""
    loss_in_place: bool = setting(False, SWITCH, affects=("activations",), panel=TRAINING)
    """The cross-entropy computes its fp32 softmax in the upcast logits' own buffer, keeps it and writes the
    gradient into it (Megatron-core's vocab_parallel_cross_entropy, megatron/core/tensor_parallel/
    cross_entropy.py:25-116): backward allocates only the logits' gradient in the compute dtype, where eager
    cross-entropy (off) allocates two fp32 buffers of the logits' size."""
    quantize_head: bool = setting(False, SWITCH, affects=("split", "trainability", "activations"), panel=TRAINING)
    """QLoRA quantises the output head too (LitGPT: lightning's BitsandbytesPrecision replaces every nn.Linear);
    transformers' bitsandbytes integration keeps lm_head in the compute dtype (off)."""
    kbit_upcast: bool = setting(False, SWITCH, affects=("split", "trainability", "state", "activations"),
                                panel=TRAINING)
    """PEFT's prepare_model_for_kbit_training ran on the quantised base: every 16-bit parameter that is not
    quantised (embeddings, norms, lm_head) is cast to fp32, so the embeddings start an fp32 residual stream, each
    quantised linear returns fp32, and the activations, logits and loss are fp32; only the quantised matmuls
    compute in 16 bits. Only LoRA/QLoRA read it."""
    previous_step_alive: bool = setting(False, SWITCH, affects=("activations",), panel=TRAINING)
    """The training loop still references the previous step's outputs while the next forward runs (LitGPT keeps
    `logits` until it is reassigned), so that step's autograd graph is not freed yet. Saved tensors were released by
    its backward, but tensors an autograd Function keeps as ctx attributes were not: with bitsandbytes-legacy, every
    4-bit layer's input of the previous step is still alive at the end of the forward."""
    activation_offloading: bool = setting(False, SWITCH, affects=("activations",), panel=TRAINING)
    """torchtune's enable_activation_offloading: the decoder's saved activations live in CPU pinned memory,
    about two layers' worth stay on the GPU; the output projection's input and the loss stay on the GPU."""
    moe_probs_in_activation: bool = setting(False, SWITCH, affects=("activations",), panel=TRAINING)
    """A MoE layer's routing weights multiply the routed experts' activation inside the fused SwiGLU, whose backward
    keeps only its input and the weights (Megatron-core's TEGroupedMLP: weighted_bias_swiglu_impl(fc1_output, bias,
    permuted_probs), megatron/core/transformer/moe/experts.py lines 963-970 at d98e8a6; WeightedSwiGLUFunction saves
    (input, weights), fusions/fused_bias_swiglu.py line 270), and the unpermute takes no weights (token_dispatcher.py
    lines 891-899): no expert output is kept. Off: each expert's output is multiplied by its routing weight after
    the expert (transformers' MoE blocks), which keeps that output, top-k copies per token, for the weight's
    gradient."""
    # Model parallelism (Megatron-LM, torchtitan): the estimate is the most-loaded rank's; DP = num_gpus/(tp·pp·cp).
    tp: int = setting(1, COUNT, affects=("state", "activations"), panel=SHARDING)
    """Tensor parallel ranks (Megatron's column/row splits of attention and MLP, a vocabulary-parallel embedding,
    head and loss): each holds 1/tp of every linear layer's weights and of the activations inside attention and
    MLP; norms and the layer's input and output stay whole on every rank unless sequence_parallel is on."""
    sequence_parallel: SequenceParallel = setting("off", Choice(SEQUENCE_PARALLEL, SEQUENCE_PARALLEL_ALIASES),
                                                  affects=("activations",), panel=SHARDING)
    """Sequence parallelism beside --tp (Korthikanti et al. 2022): the norms, dropouts and residual stream split
    over the sequence too. megatron: the all-gathered input of the column-parallel linears is saved sharded and
    gathered again in backward (Megatron-LM's sequence_parallel); dtensor: torch.distributed.tensor.parallel's
    SequenceParallel and ColwiseParallel(input_layouts=Shard(1)), whose linears save the all-gathered input."""
    pp: int = setting(1, COUNT, affects=("state", "activations"), panel=SHARDING)
    """Pipeline stages: the decoder layers split into pp consecutive stages, the embedding on the first stage, the
    final norm, head and loss on the last; the estimate is the larger of the two."""
    pp_schedule: PpSchedule = setting("1f1b", Choice(PP_SCHEDULES, PP_SCHEDULE_ALIASES), affects=("activations",),
                                      panel=SHARDING)
    """Pipeline schedule, which sets the micro-batches (--grad-accum of them a step) whose activations the first
    stage holds at once: 1f1b (min(pp, micro-batches)), interleaved (pp·(1 + (pp-1)/(pp·vpp)), Megatron's
    penalty), gpipe (every micro-batch), zero-bubble (ZB-H1: as 1f1b)."""
    vpp: int = setting(1, COUNT, affects=("activations",), panel=SHARDING)
    """Virtual pipeline stages (model chunks) per rank of the interleaved schedule (and of interleaved
    zero-bubble, torch's ScheduleInterleavedZeroBubble)."""
    pp_stage: int | None = setting(None, OrNone(Integer(0)), affects=("state", "activations"),
                                   shown="the most loaded", panel=SHARDING)
    """The pipeline stage (0: the first) whose rank the estimate is for, instead of the most-loaded one: what a
    figure logged by one rank measures (Megatron-LM logs its memory on the last rank only)."""
    pp_buffers: PpBuffers = setting("step", Choice(PP_BUFFERS, PP_BUFFER_ALIASES), affects=("activations",),
                                    panel=SHARDING)
    """How a pipeline stage allocates its boundary tensors. step: torch.distributed.pipelining's PipelineStage
    allocates a receive buffer for every micro-batch of the step up front (stage.py _prepare_forward_infra) and
    keeps each output for its backward (torchtitan); transfer: Megatron-core allocates each receive when it comes
    (p2p_communication.py:336-344), the received tensor being the stage's input that its first layer keeps, and
    frees each output's data once sent (deallocate_pipeline_outputs, set by megatron/training/argument_utils.py:305;
    schedules.py:171-195); kept: each receive allocated when it comes, as transfer, and each sent output kept whole
    until its backward (Megatron-LM before deallocate_pipeline_outputs, added in de1ae5b, 2022-01: 8aa4619's
    megatron/training.py:413 and :474 append each output, :418 and :477 pop it for its backward)."""
    nccl_groups: NcclGroups = setting("layout", Choice(NCCL_GROUPS, NCCL_GROUP_ALIASES), affects=(), panel=SHARDING)
    """The process groups whose NCCL communicators a rank holds (each group its own communicator, even one whose ranks
    another group has: ProcessGroupNCCL's devNCCLCommMap_). layout: the gradient, TP, CP, EP, expert-DP and PP groups
    (torch DDP and FSDP run on the default group); megatron: also Megatron-LM's world group, which pretrain's
    start-time all-reduce uses (megatron/training/training.py:1729; 8aa4619's megatron/training.py:95-96), and, with
    TP x PP above 1 and no distributed optimizer, its model-parallel group of TP x PP ranks, which the found-inf
    all-reduce and the gradient norm use (megatron/core/optimizer/optimizer.py:322-335; 8aa4619's
    megatron/optimizer/optimizer.py:255-257 and clip_grads.py:105-107)."""
    cp: int = setting(1, COUNT, affects=("state", "activations"), panel=SHARDING)
    """Context parallel ranks: each holds 1/cp of every sequence's tokens and their activations; the optimizer
    states shard over DP x CP, as Megatron's distributed optimizer and torchtitan's FSDP do."""
    cp_kind: CpKind = setting("ring", Choice(CP_KINDS, CP_KIND_ALIASES), affects=("activations",), panel=SHARDING)
    """How context parallelism exchanges K and V (Megatron's --cp-comm-type): ring (p2p, Megatron's default: the
    next rank's K/V chunk received while the current one is used), all-gather (every rank's K/V gathered for the
    layer: Megatron's allgather, the default rotate method of torch's context_parallel) or all-to-all
    (DeepSpeed-Ulysses, Megatron's a2a: heads swapped for the sequence around attention)."""
    ep: int = setting(1, COUNT, affects=("state", "activations"), panel=SHARDING)
    """Expert parallel ranks of an MoE: each holds num_experts/ep routed experts (their weights, gradients and
    states) and the dispatch and combine buffers of the tokens routed to them; carved out of DP x CP."""
    expert_tp: int | None = setting(None, OrNone(COUNT), affects=("state", "activations"), shown="tp",
                                    panel=SHARDING)
    """Tensor parallel ranks of each routed expert (Megatron's --expert-tensor-parallel-size, which defaults to
    --tp: megatron/training/arguments.py:587-588): each rank holds 1/(ep x expert_tp) of the routed experts, and
    their gradients and states shard over the num_gpus / (pp x ep x expert_tp) expert-data-parallel ranks."""
    # PEFT methods beyond LoRA and the memory-saving optimizers (hfmem.memory.peft_methods, memory.optimizers)
    num_virtual_tokens: int = setting(20, COUNT, affects=("split", "trainability", "activations"), panel=TRAINING)
    """prompt-tuning and prefix-tuning: trained virtual tokens (PEFT num_virtual_tokens). Prompt tuning prepends
    them to every sequence (n x hidden trained); prefix tuning adds them to every layer's keys and values
    (n x layers x 2 x kv width trained)."""
    oft_block_size: int = setting(32, COUNT, affects=("split", "trainability"), panel=TRAINING)
    """oft: the size of each rotation block (PEFT OFTConfig oft_block_size, default 32; it must divide each adapted
    layer's input width): bs·(bs - 1)/2 trained values per block, in/bs blocks per adapted layer."""
    boft_block_size: int = setting(4, COUNT, affects=("split", "trainability"), panel=TRAINING)
    """boft: the size of each rotation block (PEFT BOFTConfig boft_block_size, default 4; boft_block_size x
    2^(boft_n_butterfly_factor - 1) must divide each adapted layer's input width): per adapted layer
    boft_n_butterfly_factor x in x bs trained rotation values, a trained scale per output, and frozen fp32
    permutation buffers of boft_n_butterfly_factor x in x in values (boft_P)."""
    boft_n_butterfly_factor: int = setting(1, COUNT, affects=("split", "trainability"), panel=TRAINING)
    """boft: butterfly factors (PEFT BOFTConfig boft_n_butterfly_factor, default 1). PEFT sets it back to 1 when its
    CUDA extension (fbd_cuda, built with ninja at import) does not load (peft/tuners/boft/layer.py update_layer)."""
    galore_rank: int = setting(128, COUNT, affects=("state",), panel=TRAINING)
    """GaLore/APOLLO projection rank (transformers' optim_args rank, default 128; LLaMA-Factory galore_rank):
    each decoder matrix keeps its moments at rank x its longer side, plus the projection."""
    galore_update_proj_gap: int = setting(200, COUNT, affects=(), panel=TRAINING)
    """Steps between GaLore's projection updates (transformers' update_proj_gap, default 200): that step runs a
    truncated SVD of each gradient (fp32 workspace of one matrix at a time, in the step's peak); it changes the
    step time, not the memory."""
    active_layers: int | None = setting(None, OrNone(COUNT), affects=("state",), shown="badam 1, lisa 2",
                                        panel=TRAINING)
    """badam/lisa: decoder layers trained at a time (BAdam's block of one layer, LLaMA-Factory badam_mode layer;
    LISA's lisa_activated_layers, 2 in LMFlow); only they hold gradients, fp32 master weights and optimizer states
    (LISA also trains the embeddings and the head throughout)."""
    overhead: Overhead = setting(None, Group(Overhead), affects=())
    """Memory outside PyTorch's tensors: the CUDA context, NCCL's buffers and the allocator's fragmentation."""
    serving: Serving = setting(None, Group(Serving), affects=())
    """The serving deployment of the fit matrix's serving column (--method serve); no training part reads it."""

    @property
    def precision(self) -> Precision:
        """What the dtype means for memory (bytes of weights, gradients, activations; master copy, autocast)."""
        return KBIT_UPCAST if self.kbit_upcast and self.method != "full" else PRECISIONS[self.dtype]

    @property
    def zero_stage(self) -> int | None:
        """The ZeRO stage equivalent of the sharding (FSDP full shard = 3, shard grad op = 2)."""
        return {"none": None, "ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp_full_shard": 3,
                "fsdp_shard_grad_op": 2}[self.resolved_sharding]

    @property
    def resolved_sharding(self) -> str:
        if self.sharding is not None:
            return self.sharding
        return "none" if self.shard_ranks == 1 else "ddp"

    @property
    def model_parallel(self) -> int:
        """GPUs one model replica spans: tp x pp x cp."""
        return self.tp * self.pp * self.cp

    @property
    def data_parallel(self) -> int:
        """Model replicas: num_gpus / (tp x pp x cp)."""
        return max(1, self.num_gpus // self.model_parallel)

    @property
    def resolved_expert_tp(self) -> int:
        """Tensor parallel ranks of each routed expert: expert_tp, or tp when unset (Megatron's default)."""
        return self.expert_tp or self.tp

    @property
    def shard_ranks(self) -> int:
        """The ranks that hold the same weights and shard their gradients and optimizer states (ZeRO, FSDP, DDP):
        DP x CP, as Megatron's distributed optimizer and torchtitan's FSDP mesh (dp_shard x cp) do."""
        return max(1, self.num_gpus // (self.tp * self.pp))

    @property
    def resolved_optimizer(self) -> str:
        if self.optimizer is not None:
            return self.optimizer
        return "paged_adamw_8bit" if self.method == "qlora" else "adamw"

    def base_format(self, stored: StoredQuantization | None) -> BaseFormat | None:
        """The frozen base's weight format: the setting, else the one the checkpoint is `stored` in, else the
        method's (lora: None, the compute dtype; qlora: nf4); None for a full fine-tune, which trains every weight."""
        if self.method == "full":
            return None
        name = (self.base_quantization or (stored.format if stored else None)
                or ("nf4" if self.method == "qlora" else None))
        return base_format(name, stored, self.qlora_double_quant)

    def resolved_seq_len(self, max_positions: int | None) -> int:
        """The sequence length to estimate for: the setting, else DEFAULT_SEQ_LEN capped at the model's maximum."""
        if self.seq_len is not None:
            return self.seq_len
        return min(DEFAULT_SEQ_LEN, max_positions) if max_positions else DEFAULT_SEQ_LEN

    def memo_key(self, part: Part) -> tuple:
        """The values the estimate part ("split", "trainability", "state", "activations") depends on."""
        return memo_key(self, part)

    def validated(self) -> TrainingSettings:
        """Return a copy with every field checked and aliases normalised; raise InvalidInputError on any bad value."""
        result = replace(self, **validated_fields(self))
        result = _layout_checked(result)
        sharding = result.resolved_sharding
        if sharding == "none" and result.shard_ranks > 1:
            raise InvalidInputError("sharding 'none' means one GPU per model shard; use ddp, zero1/2/3 or fsdp for "
                                    "data parallelism (num_gpus > tp x pp x cp).")
        if result.fp8_all_gather and result.dtype != "fp8-torchao":
            raise InvalidInputError("fp8_all_gather needs dtype fp8-torchao (torchao's float8 all-gather supports "
                                    "tensorwise scaling only).")
        if result.master_remainders and result.fp8_params:
            raise InvalidInputError("master_remainders needs bf16 weights: the remainders complete a bf16 weight to "
                                    "fp32, and fp8_params weights are FP8 (the optimizer keeps a whole master copy).")
        if result.optimizer_dtype == "bf16" and not (result.precision.master_copy and result.dtype != "fp16"):
            raise InvalidInputError("optimizer_dtype bf16 needs bf16 mixed precision or a low-precision recipe (bf16 "
                                    "weights that the optimizer can update itself).")
        if result.fp8_params and not (result.precision.recipe and result.precision.recipe.weight_copy_bytes):
            raise InvalidInputError("fp8_params needs a TransformerEngine recipe (dtype fp8-te, fp8-te-current, mxfp8 "
                                    "or nvfp4), whose quantized weights it keeps in place of the 16-bit ones.")
        if result.offload_params and sharding not in {"zero3", "fsdp_full_shard"}:
            raise InvalidInputError("offload_params needs parameter sharding (zero3 or fsdp_full_shard).")
        if result.offload_optimizer and sharding in {"none", "ddp"}:
            raise InvalidInputError(
                "offload_optimizer needs ZeRO (zero1/2/3) or FSDP sharding (it is DeepSpeed/FSDP offload).")
        if result.offload_device == "nvme" and (result.offload_optimizer or result.offload_params) \
                and sharding != "zero3":
            raise InvalidInputError("offload_device nvme needs zero3 sharding (DeepSpeed swaps to NVMe in ZeRO stage 3 "
                                    "only).")
        return result

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["lora_targets"] = list(self.lora_targets)
        data["modules_to_save"] = list(self.modules_to_save)
        data["resolved_optimizer"] = self.resolved_optimizer
        data["resolved_sharding"] = self.resolved_sharding
        data["zero_stage"] = self.zero_stage
        return data


NO_MODEL_PARALLELISM: dict[str, Any] = {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "sequence_parallel": "off",
                                         "pp_schedule": "1f1b", "vpp": 1, "expert_tp": None, "pp_stage": None}
"""The parallelism fields of a run without model parallelism (one GPU per replica)."""


def _layout_checked(s: TrainingSettings) -> TrainingSettings:
    """The settings with num_gpus set to the layout's fewest GPUs (tp x pp x cp, times what EP needs beyond CP)
    where it was left at 1; InvalidInputError for a layout whose
    dimensions do not divide the GPUs or contradict its schedule (the model's own limits are checked by
    hfmem.memory.parallel)."""
    product = s.model_parallel
    if s.num_gpus == 1 and product * s.ep > 1:  # the fewest GPUs of the layout: EP needs DP x CP ranks to span
        s = replace(s, num_gpus=product * s.ep // gcd(s.ep, s.cp))
    if s.num_gpus % product:
        raise InvalidInputError(f"num_gpus {s.num_gpus} is not a multiple of tp x pp x cp = {s.tp} x {s.pp} x {s.cp} "
                                f"= {product}.")
    etp = s.resolved_expert_tp
    if (s.tp * s.data_parallel * s.cp) % (s.ep * etp):
        raise InvalidInputError(f"ep {s.ep} x expert_tp {etp} must divide TP x DP x CP = "
                                f"{s.tp * s.data_parallel * s.cp} (the ranks that hold the same layers' experts).")
    if s.pp_stage is not None and s.pp_stage >= s.pp:
        raise InvalidInputError(f"pp_stage {s.pp_stage} is not a stage of pp {s.pp} (stages count from 0).")
    if s.vpp > 1 and s.pp_schedule not in ("interleaved", "zero-bubble"):
        raise InvalidInputError(f"vpp {s.vpp} needs pp_schedule interleaved or zero-bubble (virtual stages are "
                                "their model chunks).")
    if s.pp_schedule == "interleaved" and (s.vpp < 2 or s.pp < 2):
        raise InvalidInputError("pp_schedule interleaved needs pp >= 2 and vpp >= 2 (model chunks per rank).")
    return s
