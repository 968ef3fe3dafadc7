"""The estimate flags shared by `hfmem MODEL` and `hfmem scan`, and their translation into a Plan."""

from __future__ import annotations

import functools
import inspect
from typing import Annotated, Any, Callable, Optional

import typer

from hfmem.errors import InvalidInputError

Methods = Annotated[Optional[list[str]], typer.Option(
    "--method", "-m", help="full, lora, qlora (repeatable or comma-separated; default: all three).")]
SeqLen = Annotated[Optional[int], typer.Option(help="Sequence length (default 2048, or the model's max if smaller).")]
BatchSize = Annotated[int, typer.Option("--batch-size", "-b", help="Micro-batch size per GPU.")]
GradAccum = Annotated[int, typer.Option(help="Gradient accumulation steps (keeps gradients alive across steps).")]
Dtype = Annotated[str, typer.Option(help="bf16 | fp16 (mixed precision, fp32 master weights), bf16-pure, fp32.")]
Optimizer = Annotated[Optional[str], typer.Option(
    help="adamw, adamw_8bit, paged_adamw_8bit, paged_adamw, sgd, sgd_momentum, adafactor, lion "
         "(default: adamw; paged_adamw_8bit for QLoRA).")]
Zero = Annotated[Optional[str], typer.Option(
    "--zero", help="Sharding: ddp, 1, 2, 3 (ZeRO stages), fsdp (full shard), fsdp_shard_grad_op.")]
NumGpus = Annotated[int, typer.Option(help="GPUs the estimate shards over.")]
OffloadOptimizer = Annotated[bool, typer.Option(help="Offload optimizer states to CPU (ZeRO/FSDP).")]
OffloadParams = Annotated[bool, typer.Option(help="Offload parameters to CPU (ZeRO-3/FSDP).")]
FsdpWrapEmbeddings = Annotated[bool, typer.Option(
    help="FSDP: embeddings and head are units of their own, gathered only while used (torchtune "
         "custom_sharded_layers), not held in the root unit for the whole step.")]
Checkpointing = Annotated[str, typer.Option(help="Gradient checkpointing: off, full, selective.")]
Attention = Annotated[str, typer.Option(help="Attention kernel: flash, sdpa, eager.")]
RepeatKv = Annotated[bool, typer.Option(
    help="The model code repeats grouped K/V heads to every query head before attention (LitGPT), so K/V are "
         "saved at the query heads' count.")]
LoraRank = Annotated[int, typer.Option(help="LoRA rank r (alpha does not change memory).")]
LoraTargets = Annotated[str, typer.Option(help="LoRA target modules: all-linear, or names like q_proj,v_proj.")]
LossChunks = Annotated[int, typer.Option(
    help="Chunked cross-entropy over N sequence chunks (torchtune CEWithChunkedOutputLoss: 8; 1 = off).")]
CompileLoss = Annotated[bool, typer.Option(
    help="The loss runs under torch.compile (saves 16-bit logits, not fp32 log-probs; see --compile-layers).")]
CompileLayers = Annotated[bool, typer.Option(
    help="Each decoder layer runs under torch.compile (torchtune compile=True): norms and activations are "
         "recomputed in backward, so layers save less.")]
ActivationOffloading = Annotated[bool, typer.Option(
    help="Saved activations in CPU pinned memory (torchtune enable_activation_offloading).")]
OptimizerInBackward = Annotated[bool, typer.Option(
    help="Optimizer step fused into backward: each gradient freed at once (torchtune optimizer_in_bwd).")]
QloraDoubleQuant = Annotated[bool, typer.Option(
    help="QLoRA double quantization of the NF4 block scales (off: one fp32 absmax per 64 weights, +0.047 B/param).")]
QloraKernel = Annotated[str, typer.Option(
    help="The 4-bit linear: bitsandbytes (>= 0.43.2), bitsandbytes-legacy (< 0.43.2: keeps each layer's input "
         "for backward), torchao (torchtune).")]
QuantizeHead = Annotated[bool, typer.Option(
    help="QLoRA quantizes lm_head too (LitGPT); transformers keeps it in 16 bits.")]
LossUpcast = Annotated[bool, typer.Option(
    help="The cross-entropy runs on fp32 logits (transformers' loss); --no-loss-upcast: on the 16-bit logits "
         "(a loop calling nn.CrossEntropyLoss on model(...).logits, LitGPT).")]
Gpus = Annotated[Optional[list[str]], typer.Option(
    "--gpu", "-g", help="GPUs to fit against: catalogue names (h100, rtx4090...) or name=GiB (repeatable; "
                        "default: the whole catalogue).")]
CudaContext = Annotated[Optional[float], typer.Option(help="CUDA context per GPU in GiB (default 0.5).")]
Fragmentation = Annotated[Optional[float], typer.Option(
    help="Allocator fragmentation as a fraction of allocated memory (default 0.10).")]


# Every estimate flag as (parameter name, annotated option, default), in --help order.
PLAN_FLAGS: tuple[tuple[str, Any, Any], ...] = (
    ("method", Methods, None), ("seq_len", SeqLen, None), ("batch_size", BatchSize, 1),
    ("grad_accum", GradAccum, 1), ("dtype", Dtype, "bf16"), ("optimizer", Optimizer, None), ("zero", Zero, None),
    ("num_gpus", NumGpus, 1), ("offload_optimizer", OffloadOptimizer, False), ("offload_params", OffloadParams, False),
    ("fsdp_wrap_embeddings", FsdpWrapEmbeddings, False),
    ("gradient_checkpointing", Checkpointing, "off"), ("attention", Attention, "flash"),
    ("repeat_kv", RepeatKv, False), ("lora_rank", LoraRank, 16),
    ("lora_targets", LoraTargets, "all-linear"), ("loss_chunks", LossChunks, 1), ("compile_loss", CompileLoss, False),
    ("compile_layers", CompileLayers, False), ("activation_offloading", ActivationOffloading, False),
    ("optimizer_in_backward", OptimizerInBackward, False), ("qlora_double_quant", QloraDoubleQuant, True),
    ("qlora_kernel", QloraKernel, "bitsandbytes"), ("quantize_head", QuantizeHead, False),
    ("loss_upcast", LossUpcast, True), ("gpu", Gpus, None),
    ("cuda_context_gib", CudaContext, None), ("fragmentation", Fragmentation, None),
)


def with_plan_flags(command: Callable[..., None]) -> Callable[..., None]:
    """Give a typer command every estimate flag; it receives them validated, as one `plan` argument.

    One definition serves `hfmem MODEL` and `hfmem scan`, so the two can never drift apart.
    """
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "plan"]
    flags = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=option)
             for name, option, default in PLAN_FLAGS]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        values = {name: kwargs.pop(name) for name, _, _ in PLAN_FLAGS}
        command(plan=make_plan(**values), **kwargs)

    wrapper.__signature__ = inspect.Signature(own + flags)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in own + flags}
    return wrapper


def split_list(values: list[str] | None) -> tuple[str, ...]:
    """Repeatable options that also accept comma-separated values."""
    return tuple(v.strip() for value in values or [] for v in value.split(",") if v.strip())


def make_plan(method: list[str] | None = None, batch_size: int = 1, grad_accum: int = 1, zero: str | None = None,
              gpu: list[str] | None = None, cuda_context_gib: float | None = None, fragmentation: float | None = None,
              **same_named: Any):
    """Validate the flags into a Plan; every bad value is an InvalidInputError naming the flag's value.

    `same_named`: the flags that carry a TrainingSettings field's name (--seq-len -> seq_len, ...).
    """
    from hfmem.hardware.gpus import resolve_gpus
    from hfmem.memory.plan import Plan
    from hfmem.memory.settings import METHODS, TrainingSettings, parse_overhead

    chosen = tuple(m.lower() for m in split_list(method)) or METHODS
    unknown = [m for m in chosen if m not in METHODS]
    if unknown:
        raise InvalidInputError(f"--method must be one of {', '.join(METHODS)}; got {unknown[0]!r}.")
    training = TrainingSettings(
        method=chosen[0], micro_batch_size=batch_size, gradient_accumulation_steps=grad_accum, sharding=zero,
        overhead=parse_overhead(cuda_context_gib, fragmentation), **same_named,
    ).validated()
    return Plan(training=training, methods=tuple(dict.fromkeys(chosen)), gpus=resolve_gpus(split_list(gpu)))
