"""How long a fitting setup takes per step, per token budget and in money: the roofline of hfmem.compute fed with
the estimate's own FLOPs, bytes and sharding, for one catalogue GPU.

Every figure is a term of hfmem.compute.roofline (compute at the explicit HFU, HBM traffic, exposed transfers);
a GPU without vendor peaks in the catalogue, or an fp32 run (no tensor-core peak listed), gets no time and says so.
"""

from __future__ import annotations

from typing import Any

from hfmem.compute.flops import TrainingFlops, forward_flops, training_flops
from hfmem.compute.roofline import (
    data_parallel_transfers,
    hfu_for,
    hbm_traffic,
    machine,
    offload_transfers,
    step_time,
    weight_passes,
)
from hfmem.errors import InvalidInputError
from hfmem.hardware.gpus import Gpu
from hfmem.hardware.specs import gpu_specs
from hfmem.memory.estimate import Estimate
from hfmem.memory.precision import KBIT_UPCAST
from hfmem.memory.model_state import lora_targets
from hfmem.memory.settings import TrainingSettings
from hfmem.model.architecture import Architecture
from hfmem.model.inventory import Inventory
from hfmem.units import figure

HEADLINE = ("seconds", "tokens_per_s", "mfu", "hfu")
"""The step's figures reported at units.FIGURE_DIGITS, as are its terms."""


def matmul_dtype(settings: TrainingSettings) -> str | None:
    """The tensor-core dtype a run's matmuls use: bf16 or fp16 (mixed, pure or autocast), None for fp32. With
    kbit_upcast the quantised linears, which carry almost every FLOP, still compute in the dtype's 16 bits."""
    if settings.precision.compute_bytes != 2 and settings.precision is not KBIT_UPCAST:
        return None
    return "fp16" if "fp16" in settings.dtype else "bf16"


def flops_of(arch: Architecture, inventory: Inventory, est: Estimate) -> TrainingFlops:
    """Matmul FLOPs per token of the estimate's training step (GPU-independent: one per setup)."""
    s = est.settings
    # PEFT's other methods are counted as LoRA: DoRA, LoRA-FA and VeRA with LoRA's adapter matmuls, IA3 and the
    # prompt methods with none (their vectors and virtual tokens are no matmuls of note)
    low_rank = s.method in {"lora", "qlora", "dora", "lora-fa", "vera"}
    adapters = lora_targets(inventory, s.lora_targets) if low_rank else ()
    method = s.method if s.method in {"full", "qlora"} else "lora"
    return training_flops(arch, forward_flops(arch, inventory, est.seq_len), method=method, adapters=adapters,
                          rank=s.lora_rank, checkpointing=s.gradient_checkpointing)


def step_for(est: Estimate, flops: TrainingFlops, gpu: Gpu, *, hfu: float | None = None) -> dict[str, Any]:
    """The step time of an estimate's setup (its `flops_of`) on `gpu` at `hfu` (default: its architecture's,
    hfu_for): seconds, tokens/s (all GPUs), MFU and every term; or the reason there is none."""
    s = est.settings
    hfu = hfu_for(gpu.arch) if hfu is None else hfu
    dtype = matmul_dtype(s)
    if dtype is None:
        return {"seconds": None, "reason": "fp32 training: the catalogue lists no fp32 tensor-core peak"}
    try:
        node = machine(gpu_specs(gpu), dtype, s.num_gpus, gpus_per_node=s.gpus_per_node)
    except InvalidInputError as err:
        return {"seconds": None, "reason": str(err)}
    stage, n = s.zero_stage or 0, s.num_gpus
    state = est.state
    whole_weights = state.weights * (n if stage >= 3 else 1)
    gradients = state.gradients * (n if stage >= 2 else 1)
    trainable_bytes = est.split.trainable * s.precision.compute_bytes
    transfers = (data_parallel_transfers(s.resolved_sharding, n, parameter_bytes=whole_weights,
                                         trainable_bytes=trainable_bytes, gradient_bytes=gradients)
                 + offload_transfers(n, offload_optimizer=s.offload_optimizer, offload_params=s.offload_params,
                                     parameter_bytes=whole_weights, trainable_bytes=trainable_bytes,
                                     gradient_bytes=gradients))
    traffic = hbm_traffic(weight_bytes=state.weights, passes=weight_passes(s.gradient_checkpointing),
                          gradient_bytes=state.gradients, optimizer_bytes=state.optimizer,
                          activation_bytes=est.activations.stored,
                          dequantised_weights=est.split.frozen_quantized, compute_bytes=s.precision.compute_bytes)
    try:  # a link the setup uses (PCIe for offload, NVLink for collectives) may have no vendor figure
        step = step_time(flops, node, tokens_per_micro_batch=s.micro_batch_size * est.seq_len,
                         micro_batches=s.gradient_accumulation_steps, num_gpus=n, hfu=hfu, traffic=traffic,
                         transfers=transfers)
    except InvalidInputError as err:
        return {"seconds": None, "reason": str(err)}
    terms = step.to_dict()
    tokens = s.micro_batch_size * est.seq_len * s.gradient_accumulation_steps * n  # one optimizer step, all GPUs
    return terms | {"terms": {k: figure(v) for k, v in terms["terms"].items()}} | {
        k: figure(terms[k]) for k in HEADLINE} | {"dtype": dtype, "hfu_assumed": hfu,
                                                  "flops_per_step": figure(flops.hardware * tokens)}

