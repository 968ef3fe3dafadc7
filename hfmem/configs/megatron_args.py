"""A Megatron-LM argument list (pretrain_gpt.py's flags, in a file or the shell script that launches it).

Argument names and defaults are Megatron-LM's (megatron/training/arguments.py at d98e8a6): no --bf16/--fp16
trains in fp32; --bf16 accumulates and reduces gradients in an fp32 buffer unless --grad-reduce-in-bf16 (L1204-L1217);
the output layer is tied to the embedding unless --untie-embeddings-and-output-weights. torchrun's --nproc_per_node
and --nnodes give the GPUs, and with them --global-batch-size gives the micro-batches per step. The model's own
dimensions (--num-layers, --hidden-size, ...) set nothing but the virtual stages per rank: the model is the one
hfmem is given, and a dimension the file states that the model does not have is a warning.
"""

from __future__ import annotations

from typing import Any

from hfmem.configs.draft import Draft

CP_KINDS = {"p2p": "ring", "a2a": "all-to-all", "allgather": "all-gather"}
ATTENTION = {"auto": "flash_attention_2", "flash": "flash_attention_2", "fused": "flash_attention_2",
             "unfused": "eager", "local": "eager"}
"""--attention-backend: Transformer Engine's flash or cuDNN fused attention keep no attention matrix; unfused and
Megatron's local core attention keep the softmax probabilities, as eager attention does."""
DIMENSIONS = {"--num-layers": "num_layers", "--hidden-size": "hidden_size",
              "--num-attention-heads": "num_attention_heads", "--ffn-hidden-size": "intermediate_size",
              "--num-experts": "num_experts", "--moe-router-topk": "experts_per_token"}
"""Model dimensions the arguments state, by the Architecture field they are (checked against the model's); with
--group-query-attention, --num-query-groups is num_key_value_heads."""
FP8_RECIPES = {"delayed": "fp8-te", "tensorwise": "fp8-te-current", "mxfp8": "mxfp8"}
"""--fp8-recipe (default delayed, core/transformer/transformer_config.py L594-L596) as hfmem's dtype: core/fp8_utils.py
L771-L788 builds TE's DelayedScaling, Float8CurrentScaling or MXFP8BlockScaling; blockwise and custom are not
modelled. --fp4-format e2m1 with --fp4-recipe nvfp4 (the default, L679) is NVFP4BlockScaling."""
MEGATRON_AMAX_HISTORY = 1
"""TransformerConfig.fp8_amax_history_len's default (transformer_config.py L621), for --fp8-recipe delayed without
--fp8-amax-history-len."""
OPTIMIZERS = {"adam": "adamw", "sgd": "sgd_momentum", "lion": "lion"}
"""--optimizer: FusedAdam with decoupled weight decay; SGD with --sgd-momentum (0.9 by default); Lion."""

ARCHITECTURE = ("--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--num-query-groups",
                "--group-query-attention", "--kv-channels", "--max-position-embeddings", "--position-embedding-type",
                "--rotary-base", "--rotary-percent", "--rotary-interleaved", "--use-rotary-position-embeddings",
                "--swiglu", "--normalization", "--norm-epsilon", "--apply-layernorm-1p", "--disable-bias-linear",
                "--add-qkv-bias", "--vocab-size", "--make-vocab-size-divisible-by", "--num-experts",
                "--moe-router-topk", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size",
                "--moe-layer-freq", "--qk-layernorm", "--use-mcore-models", "--use-legacy-models", "--spec",
                "--tokenizer-type", "--tokenizer-model", "--vocab-file", "--merge-file", "--tiktoken-pattern",
                "--transformer-impl", "--attention-dropout", "--hidden-dropout", "--init-method-std",
                "--seq-length", "--encoder-seq-length", "--decoder-seq-length")
"""The model's own shape (the model hfmem is given decides it), dropouts and tokenizer."""
IGNORED_PREFIXES = ("--lr", "--min-lr", "--decoupled-", "--weight-decay", "--adam-", "--sgd-momentum", "--clip-grad",
                    "--train-", "--eval-", "--log-", "--save", "--load", "--tensorboard", "--wandb", "--data-",
                    "--split", "--mock-data", "--num-workers", "--seed", "--exit-", "--ckpt-", "--profile",
                    "--distributed-timeout", "--distributed-backend", "--overlap-", "--no-", "--manual-gc",
                    "--empty-unused-memory-level", "--calculate-per-token-loss", "--master_", "--node_rank",
                    "--rdzv", "--use-distributed-optimizer", "--step-batch-size-schedule", "--loss-scale",
                    "--initial-loss-scale", "--min-loss-scale", "--hysteresis", "--use-checkpoint-args",
                    "--finetune", "--timing-log", "--check-for-nan", "--async-save", "--dist-ckpt",
                    "--attention-softmax-in-fp32", "--accumulate-allreduce-grads-in-fp32", "--grad-reduce-in-bf16",
                    "--nproc_per_node", "--nnodes", "--bf16", "--fp16", "--use-flash-attn", "--cross-entropy-fusion",
                    "--fp8-amax-", "--fp8-margin", "--fp8-interval", "--moe-router-", "--moe-aux-loss-coeff",
                    "--moe-z-loss-coeff", "--moe-grouped-gemm")
"""Flags that do not change training memory, or that are read below."""
UNMODELLED = ("--fp8-param-gather", "--fp4-param-gather", "--use-precision-aware-optimizer",
              "--exp-avg-dtype", "--exp-avg-sq-dtype", "--main-params-dtype", "--cpu-offloading",
              "--cross-entropy-loss-fusion", "--recompute-modules", "--moe-token-dispatcher-type",
              "--moe-expert-capacity-factor", "--moe-pad-expert-input-to-capacity", "--use-megatron-fsdp",
              "--use-torch-fsdp2", "--data-parallel-sharding-strategy", "--num-distributed-optimizer-instances",
              "--expert-tensor-parallel-size", "--decoder-first-pipeline-num-layers",
              "--decoder-last-pipeline-num-layers", "--account-for-embedding-in-pipeline-split",
              "--account-for-loss-in-pipeline-split", "--mtp-num-layers", "--fp16-lm-cross-entropy")
"""FP8/FP4 parameters, low-precision optimizer states, activation offloading, the fused cross-entropy, recomputing
chosen modules, MoE dispatcher buffers, Megatron/torch FSDP, an expert TP other than TP, uneven pipeline stages,
multi-token prediction."""


def read(d: Draft) -> tuple[str, str | None]:
    """Map a Megatron-LM argument list into `d`; return the framework and the model it names (none: flags only)."""
    d.set("method", "full", "(pretrain_gpt.py trains every weight)")
    layout(d)
    gpus = world_size(d)
    precision(d)
    for flag, field in (("--micro-batch-size", "micro_batch_size"), ("--seq-length", "seq_len")):
        value = literal(d, flag)
        if value is not None:
            d.set(field, d.integer(flag), flag)
    batches(d, gpus)
    recompute(d)
    backend = literal(d, "--attention-backend")
    if d.boolean("--use-flash-attn"):
        d.set("attention", "flash_attention_2", "--use-flash-attn")
    elif backend is not None:
        if str(backend) not in ATTENTION:
            raise d.fail("--attention-backend", f"one of {', '.join(ATTENTION)}", backend)
        d.set("attention", ATTENTION[str(backend)], "--attention-backend")
    optimizer = literal(d, "--optimizer")
    if optimizer is not None:
        if str(optimizer) in OPTIMIZERS:
            d.set("optimizer", OPTIMIZERS[str(optimizer)], "--optimizer")
        else:
            d.unmodelled("--optimizer")
    if d.boolean("--optimizer-cpu-offload"):
        d.set("offload_optimizer", True, "--optimizer-cpu-offload")
    if d.raw("--use-distributed-optimizer") is not None:
        d.set("sharding", "zero1", "--use-distributed-optimizer")
    d.set("tie_word_embeddings", d.raw("--untie-embeddings-and-output-weights") is None,
          "--untie-embeddings-and-output-weights" + ("" if d.raw("--untie-embeddings-and-output-weights") else
                                                      " (absent: tied)"))
    dimensions(d)
    d.unmodelled_if_active(*UNMODELLED)
    d.know(*ARCHITECTURE, *(flag for flag in d.data if flag.startswith(IGNORED_PREFIXES)))
    return "megatron", None


def literal(d: Draft, flag: str) -> Any:
    """The flag's value; None when absent or not literal (a variable the file does not assign), which is then
    reported."""
    value = d.raw(flag)
    if isinstance(value, str) and "$" in value:
        d.unresolved_value(flag, f"{value} is a variable the file does not assign a literal to")
        return None
    return value


def world_size(d: Draft) -> int | None:
    """torchrun's --nproc_per_node x --nnodes, where both are literal and hold the layout: the GPUs, and the GPUs
    per machine."""
    if literal(d, "--nproc_per_node") is None:
        return None
    per_node = d.integer("--nproc_per_node") or 1
    d.set("gpus_per_node", per_node, "--nproc_per_node")
    if d.raw("--nnodes") is None:
        nodes = 1
    elif literal(d, "--nnodes") is None:
        return None
    else:
        nodes = d.integer("--nnodes") or 1
    v = d.values
    model_parallel = v.get("tp", 1) * v.get("pp", 1) * v.get("cp", 1)
    if (per_node * nodes) % model_parallel or (per_node * nodes // model_parallel * v.get("cp", 1)) % v.get("ep", 1):
        d.unresolved_value("--nnodes", f"torchrun's {per_node * nodes} GPUs cannot hold the layout (TP x PP x CP "
                           f"{model_parallel}, EP {v.get('ep', 1)}); give them with --num-gpus")
        return None
    d.set("num_gpus", per_node * nodes, "--nproc_per_node x --nnodes")
    return per_node * nodes


def layout(d: Draft) -> None:
    """TP, PP (and the interleaved schedule's virtual stages), CP, EP and sequence parallelism."""
    for flag, field in (("--tensor-model-parallel-size", "tp"), ("--pipeline-model-parallel-size", "pp"),
                        ("--context-parallel-size", "cp"), ("--expert-model-parallel-size", "ep")):
        if literal(d, flag) is not None:
            d.set(field, d.integer(flag), flag)
    if d.boolean("--sequence-parallel") and d.values.get("tp", 1) > 1:  # arguments.py#L1433: off without TP
        d.set("sequence_parallel", "megatron", "--sequence-parallel")
    kinds = literal(d, "--cp-comm-type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if len(set(kinds)) == 1 and str(kinds[0]) in CP_KINDS:
            d.set("cp_kind", CP_KINDS[str(kinds[0])], "--cp-comm-type")
        else:
            d.unmodelled("--cp-comm-type")
    virtual: tuple[int, str] | None = None
    for flag in ("--virtual-pipeline-model-parallel-size", "--num-virtual-stages-per-pipeline-rank"):
        if literal(d, flag) is not None:
            virtual = d.integer(flag) or 1, flag
    per_stage = literal(d, "--num-layers-per-virtual-pipeline-stage")
    if per_stage is not None:
        layers, pp = literal(d, "--num-layers"), d.values.get("pp", 1)
        if layers is None:
            d.unmodelled("--num-layers-per-virtual-pipeline-stage")
        else:
            chunks, rest = divmod(d.integer("--num-layers") or 0, pp * (d.integer(
                "--num-layers-per-virtual-pipeline-stage") or 1))
            if rest or not chunks:
                raise d.fail("--num-layers-per-virtual-pipeline-stage", "a divisor of --num-layers / "
                             "--pipeline-model-parallel-size", per_stage)
            virtual = chunks, "--num-layers-per-virtual-pipeline-stage"
    if virtual is not None and virtual[0] > 1:
        d.set("vpp", virtual[0], virtual[1])
        d.set("pp_schedule", "interleaved", virtual[1])


def precision(d: Draft) -> None:
    """--bf16 / --fp16 / neither (fp32), and the dtype Megatron accumulates and reduces gradients in."""
    bf16, fp16 = d.boolean("--bf16"), d.boolean("--fp16")
    if bf16 and fp16:
        raise d.fail("--fp16", "absent with --bf16 (Megatron asserts not both)", True)
    if bf16:
        d.set("dtype", "bf16", "--bf16")
        in_bf16 = d.boolean("--grad-reduce-in-bf16") or literal(d, "--main-grads-dtype") == "bf16"
        d.set("grad_dtype", "param" if in_bf16 else "fp32",
              "--grad-reduce-in-bf16" if in_bf16 else "--bf16 (accumulate_allreduce_grads_in_fp32)")
    elif fp16:
        d.set("dtype", "fp16", "--fp16")
        fp32 = d.boolean("--accumulate-allreduce-grads-in-fp32")
        d.set("grad_dtype", "fp32" if fp32 else "param",
              "--accumulate-allreduce-grads-in-fp32" if fp32 else "--fp16")
    else:
        d.set("dtype", "fp32", "--bf16 (absent: fp32)")
        d.set("grad_dtype", "fp32", "--bf16 (absent: fp32)")
    d.know("--main-grads-dtype")
    low_precision(d)


def low_precision(d: Draft) -> None:
    """--fp8-format / --fp4-format with their recipe, over --bf16: hfmem's low-precision dtype (FP8_RECIPES)."""
    d.know("--fp8-format", "--fp8-recipe", "--fp4-format", "--fp4-recipe")
    if literal(d, "--fp4-format") is not None:
        if (literal(d, "--fp4-recipe") or "nvfp4") == "nvfp4" and d.boolean("--bf16"):
            d.set("dtype", "nvfp4", "--fp4-format")
        else:
            d.unmodelled("--fp4-recipe")
        return
    if literal(d, "--fp8-format") is None:
        return
    recipe = str(literal(d, "--fp8-recipe") or "delayed")
    if recipe not in FP8_RECIPES or not d.boolean("--bf16"):
        d.unmodelled("--fp8-recipe")
        return
    d.set("dtype", FP8_RECIPES[recipe], "--fp8-recipe" if d.raw("--fp8-recipe") is not None else "--fp8-format")
    if recipe == "delayed":
        history = literal(d, "--fp8-amax-history-len")
        d.given_or("fp8_amax_history_len", None if history is None else d.integer("--fp8-amax-history-len"),
                   MEGATRON_AMAX_HISTORY, "--fp8-amax-history-len")


def batches(d: Draft, gpus: int | None) -> None:
    """--global-batch-size over --micro-batch-size x DP: the micro-batches of one step (what a pipeline runs)."""
    total = literal(d, "--global-batch-size")
    if total is None:
        return
    if gpus is None:
        d.unresolved_value("--global-batch-size", "the micro-batches per step need the GPUs, which the launch does "
                           "not settle; give them with --grad-accum")
        return
    v = d.values
    dp = gpus // max(1, v.get("tp", 1) * v.get("pp", 1) * v.get("cp", 1))
    micro = v.get("micro_batch_size", 1)
    steps, rest = divmod(d.integer("--global-batch-size") or 0, micro * max(1, dp))
    if rest or not steps:
        raise d.fail("--global-batch-size", f"a multiple of --micro-batch-size x data parallel ({micro} x {dp})",
                     total)
    d.set("gradient_accumulation_steps", steps, "--global-batch-size / (--micro-batch-size x DP)")


def recompute(d: Draft) -> None:
    """--recompute-granularity full (--recompute-method uniform or block over --recompute-num-layers) or selective;
    --recompute-activations is selective."""
    granularity = literal(d, "--recompute-granularity")
    if d.boolean("--recompute-activations"):
        granularity = granularity or "selective"
    if granularity is None:
        d.know("--recompute-method", "--recompute-num-layers", "--recompute-activations")
        return
    source = "--recompute-granularity" if d.raw("--recompute-granularity") else "--recompute-activations"
    d.know("--recompute-activations")
    if granularity == "selective":
        d.set("gradient_checkpointing", "selective", source)
    elif granularity == "full":
        full_recompute(d, literal(d, "--recompute-method"), literal(d, "--recompute-num-layers"),
                       "--recompute-method", "--recompute-num-layers")
    else:
        raise d.fail("--recompute-granularity", "full or selective", granularity)


def dimensions(d: Draft) -> None:
    """The model's dimensions where the file states them literally, to check against the model's."""
    for flag, name in DIMENSIONS.items():
        if isinstance(d.raw(flag), int) and not isinstance(d.raw(flag), bool):
            d.architecture[name] = d.raw(flag)
    heads = d.raw("--num-attention-heads")
    groups = d.raw("--num-query-groups") if d.raw("--group-query-attention") else heads
    if isinstance(groups, int) and not isinstance(groups, bool):
        d.architecture["num_key_value_heads"] = groups


def full_recompute(d: Draft, method: Any, layers: Any, method_key: str, layers_key: str) -> None:
    """Full recomputation's method and layer count, as Megatron-LM's --recompute-method and --recompute-num-layers
    (uniform: groups of N layers; block: the first N layers of each pipeline stage's model chunk). Megatron-core
    requires both with full granularity (transformer_config.py:1908-1922); one left out keeps hfmem's default
    (uniform, 1: every layer on its own)."""
    d.set("gradient_checkpointing", "full", method_key if method is not None else layers_key)
    if method is not None:
        if str(method) not in ("uniform", "block"):
            raise d.fail(method_key, "uniform or block", method)
        d.set("checkpoint_method", str(method), method_key)
    if layers is not None:
        if isinstance(layers, bool) or not str(layers).isdigit() or int(layers) < 1:
            raise d.fail(layers_key, "a positive integer", layers)
        d.set("checkpoint_layers", int(layers), layers_key)
