"""How long a fitting setup takes per step, per token budget and in money: the roofline of hfmem.compute fed with
the estimate's own FLOPs, bytes and sharding, for one catalogue GPU.

Every figure is a term of hfmem.compute.roofline (compute at the explicit HFU, HBM traffic, exposed transfers);
a GPU without vendor peaks in the catalogue, or an fp32 run (no tensor-core peak listed), gets no time and says so.
"""

from __future__ import annotations

from typing import Any

from hfmem.compute.collectives import pipeline_bubble
from hfmem.compute.flops import TrainingFlops, forward_flops, training_flops
from hfmem.compute.roofline import (
    GB_S,
    Machine,
    Transfer,
    data_parallel_transfers,
    gemm_speedup,
    hbm_traffic,
    hfu_for,
    layout_transfers,
    low_precision_hfu,
    machine,
    offload_transfers,
    step_time,
    weight_passes,
)
from hfmem.errors import InvalidInputError
from hfmem.hardware.gpus import Gpu
from hfmem.hardware.specs import gpu_specs, node_specs
from hfmem.memory.activations import layer_modules
from hfmem.memory.activations.recompute import recomputed_share
from hfmem.memory.estimate import Estimate
from hfmem.memory.model_state import lora_targets
from hfmem.memory.precision import KBIT_UPCAST
from hfmem.memory.settings import TrainingSettings
from hfmem.model.architecture import Architecture
from hfmem.model.inventory import Inventory
from hfmem.units import figure

HEADLINE = ("seconds", "tokens_per_s", "mfu", "hfu")
"""The step's figures reported at units.FIGURE_DIGITS, as are its terms."""


def matmul_dtype(settings: TrainingSettings) -> str | None:
    """The tensor-core dtype a run's matmuls use: bf16 or fp16 (mixed, pure or autocast), None for fp32. With
    kbit_upcast the quantised linears, which carry almost every FLOP, still compute in the dtype's 16 bits. A
    low-precision recipe's full fine-tune runs at its fp8 or fp4 peak (hfmem.memory.lowprecision; PEFT methods
    are estimated as bf16)."""
    recipe = settings.precision.recipe
    if recipe is not None:
        return recipe.matmul if settings.method == "full" else "bf16"
    if settings.precision.compute_bytes != 2 and settings.precision is not KBIT_UPCAST:
        return None
    return "fp16" if "fp16" in settings.dtype else "bf16"


def flops_of(arch: Architecture, inventory: Inventory, est: Estimate) -> TrainingFlops:
    """Matmul FLOPs per token of the estimate's training step (GPU-independent: one per setup)."""
    return flops_for(arch, inventory, est.settings, est.seq_len, est.activations.attention)


def flops_for(arch: Architecture, inventory: Inventory, s: TrainingSettings, seq_len: int,
              kernel: str) -> TrainingFlops:
    """Matmul FLOPs per token of a training step with settings `s` at `seq_len`, attention run by `kernel` (what
    per-op checkpointing recomputes depends on it)."""
    # PEFT's other methods are counted as LoRA: DoRA, LoRA-FA and VeRA with LoRA's adapter matmuls, IA3 and the
    # prompt methods with none (their vectors and virtual tokens are no matmuls of note)
    low_rank = s.method in {"lora", "qlora", "dora", "lora-fa", "vera"}
    adapters = lora_targets(inventory, s.lora_targets) if low_rank else ()
    method = s.method if s.method in {"full", "qlora"} else "lora"
    forward = forward_flops(arch, inventory, seq_len)
    recomputed = recomputed_share(arch, layer_modules(arch, inventory), mode=s.gradient_checkpointing,
                                  method=s.checkpoint_method, n=s.checkpoint_layers, kernel=kernel,
                                  in_layers=forward.in_layers, attention=forward.attention)
    return training_flops(arch, forward, method=method, adapters=adapters, rank=s.lora_rank,
                          checkpointing=s.gradient_checkpointing, recomputed=recomputed)


def throughput_bound(flops: TrainingFlops, s: TrainingSettings, seq_len: int, gpu: Gpu, arch: Architecture, *,
                     hfu: float | None = None) -> float | None:
    """The most tokens/s (all GPUs) settings `s` can reach on `gpu`: each micro-batch's executed FLOPs at the HFU
    plus its model-parallel transfers on the critical path (layout_traffic's, which nothing hides), through the
    pipeline bubble; step_for's time is never shorter (memory traffic, hidden transfers' tails and the optimizer
    only add). 0 where step_for cannot time it either (a link without a figure); None without a peak."""
    dtype, specs = matmul_dtype(s), gpu_specs(gpu)
    peak = None if dtype is None else specs.peak_flops(dtype)
    if dtype is None or peak is None:
        return None
    hfu = bf16_hfu(gpu, s) if hfu is None else hfu
    tokens = s.micro_batch_size * seq_len // s.model_parallel
    compute = tokens * (flops.forward + flops.backward_input + flops.backward_weight + flops.recompute) / (hfu * peak)
    try:
        node = machine(specs, dtype, s.num_gpus, gpus_per_node=s.gpus_per_node, network_gbps=network_gbps(s, gpu))
        critical = sum(t.seconds(node) for t in layout_traffic(s, seq_len, arch)
                       if t.hidden_by is None and t.per == "micro_batch")
    except InvalidInputError:
        return 0.0
    return s.num_gpus * tokens / ((compute + critical) * (1 + bubble_of(s)))


def network_gbps(settings: TrainingSettings, gpu: Gpu) -> float | None:
    """The inter-node Gb/s per GPU a setup crosses: the setting, else the GPU's common server's (hfmem gpus)."""
    return settings.network_gbps if settings.network_gbps is not None else node_specs(gpu).network_gbps


def nvme_gbps(settings: TrainingSettings, gpu: Gpu, direction: str) -> float | None:
    """The NVMe GB/s per machine in `direction` ("read", "write") a setup swaps over: the setting, else the GPU's
    common server's (hfmem gpus; None: NVMe offload untimed)."""
    given = settings.nvme_read_gbps if direction == "read" else settings.nvme_write_gbps
    node = node_specs(gpu)
    return given if given is not None else node.nvme_read_gbps if direction == "read" else node.nvme_write_gbps


def quantized_gemms(gpu: Gpu, s: TrainingSettings, flops: TrainingFlops) -> dict[str, Any] | None:
    """Under an FP8/FP4 recipe, what it speeds up: its GEMM speedup over bf16 on `gpu` (GEMM_SPEEDUP) and the share
    of the executed FLOPs its quantized linears carry; None without a recipe."""
    recipe = s.precision.recipe
    if recipe is None or matmul_dtype(s) not in {"fp8", "fp4"} or not flops.hardware:
        return None
    return {"recipe": recipe.name, "gemm_speedup": gemm_speedup(recipe.name, gpu.arch),
            "quantized_share": flops.quantized / flops.hardware}


def bf16_hfu(gpu: Gpu, s: TrainingSettings) -> float:
    """The bf16 utilisation a setup's matmuls run at on `gpu`: the hfu setting, else its stack's published median on
    the GPU's architecture (hfu_for)."""
    return hfu_for(gpu.arch, s.hfu_stack) if s.hfu is None else s.hfu


def default_hfu(gpu: Gpu, s: TrainingSettings, gemms: dict[str, Any] | None) -> float:
    """The utilisation assumed for a setup's matmuls on `gpu`: bf16_hfu; under an FP8/FP4 recipe (`gemms`, from
    quantized_gemms), the share of the low-precision peak at which the step runs when the quantized linears go the
    recipe's GEMM speedup faster (compute.roofline.low_precision_hfu)."""
    hfu, specs = bf16_hfu(gpu, s), gpu_specs(gpu)
    bf16, peak = specs.peak_flops("bf16"), specs.peak_flops(matmul_dtype(s) or "bf16")
    if gemms is None or not bf16 or not peak:
        return hfu
    return low_precision_hfu(hfu, bf16, peak, gemms["gemm_speedup"], gemms["quantized_share"])


def step_for(est: Estimate, flops: TrainingFlops, gpu: Gpu, arch: Architecture, *,
             hfu: float | None = None) -> dict[str, Any]:
    """The step time of an estimate's setup (its `flops_of`) on `gpu` at `hfu` (default: its architecture's,
    hfu_for), its layers and the head gathered one FSDP unit / ZeRO-3 module at a time, a model-parallel layout's
    traffic and pipeline bubble included: seconds, tokens/s (all GPUs), MFU and every term; or the reason there is
    none."""
    units = -(-arch.num_layers // est.settings.pp) + 1
    s = est.settings
    dtype = matmul_dtype(s)
    if dtype is None:
        return {"seconds": None, "reason": "fp32 training: the catalogue lists no fp32 tensor-core peak"}
    gemms = quantized_gemms(gpu, s, flops)
    hfu = default_hfu(gpu, s, gemms) if hfu is None else hfu
    try:
        node = machine(gpu_specs(gpu), dtype, s.num_gpus, gpus_per_node=s.gpus_per_node,
                       network_gbps=network_gbps(s, gpu),
                       nvme_gbps={d: nvme_gbps(s, gpu, d) for d in ("read", "write")})
    except InvalidInputError as err:
        return {"seconds": None, "reason": str(err)}
    stage, n, replicas = s.zero_stage or 0, s.num_gpus, s.shard_ranks  # DP (x CP) ranks share the weights
    state = est.state
    whole_weights = state.weights * (replicas if stage >= 3 else 1)
    gradients = state.gradients * (replicas if stage >= 2 else 1)
    trainable_bytes = est.split.trainable * s.precision.compute_bytes // s.model_parallel
    gathered = whole_weights * float8_gather_share(est)
    transfers = (data_parallel_transfers(s.resolved_sharding, replicas, parameter_bytes=gathered,
                                         trainable_bytes=trainable_bytes, gradient_bytes=gradients, units=units)
                 + offload_transfers(replicas, offload_optimizer=s.offload_optimizer,
                                     offload_params=s.offload_params, parameter_bytes=whole_weights,
                                     trainable_bytes=trainable_bytes, gradient_bytes=gradients,
                                     nvme_optimizer_bytes=state.nvme_bytes - state.nvme_param_bytes,
                                     nvme_param_bytes=state.nvme_param_bytes)
                 + model_parallel_transfers(est, arch))
    traffic = hbm_traffic(weight_bytes=state.weights, passes=weight_passes(s.gradient_checkpointing),
                          gradient_bytes=state.gradients, optimizer_bytes=state.optimizer,
                          activation_bytes=est.activations.stored,
                          dequantised_weights=est.split.frozen_quantized, compute_bytes=s.precision.compute_bytes)
    try:  # a link the setup uses (PCIe for offload, NVLink for collectives) may have no vendor figure
        step = step_time(flops, node, tokens_per_micro_batch=s.micro_batch_size * est.seq_len // s.model_parallel,
                         micro_batches=s.gradient_accumulation_steps, num_gpus=n, hfu=hfu, traffic=traffic,
                         transfers=transfers, bubble=bubble_of(s))
    except InvalidInputError as err:
        return {"seconds": None, "reason": str(err)}
    terms = step.to_dict()
    tokens = s.micro_batch_size * est.seq_len * s.gradient_accumulation_steps * s.data_parallel  # a step, all GPUs
    headline = {k: figure(terms[k]) for k in HEADLINE}
    return terms | {"terms": {k: figure(v) for k, v in terms["terms"].items()}} | headline | {
        "dtype": dtype, "hfu_assumed": hfu, "flops_per_step": figure(flops.hardware * tokens)} | (
        {"low_precision": gemms | {"quantized_share": figure(gemms["quantized_share"])}} if gemms else {}) \
        | offload_links(s, node)


def offload_links(s: TrainingSettings, node: Machine) -> dict[str, Any]:
    """The bandwidths an offloading setup's transfers cross, per GPU and direction in GB/s: PCIe, and with
    offload_device nvme its share of the machine's NVMe read and write; {} without offload."""
    if not (s.offload_optimizer or s.offload_params):
        return {}
    links = {"pcie": node.pcie_bytes_per_s} | (
        {f"nvme_{d}": node.nvme_bytes_per_s.get(d) for d in ("read", "write")} if s.offload_device == "nvme" else {})
    return {"offload_gbps": {k: None if v is None else figure(v / GB_S) for k, v in links.items()}}



def float8_gather_share(est: Estimate) -> float:
    """The share of the weights' bytes FSDP's all-gathers move: 1, or with torchao's float8 all-gather
    (fp8_all_gather) the decoder linears at 1 byte of their 2."""
    s, split = est.settings, est.split
    if not (s.fp8_all_gather and s.resolved_sharding == "fsdp_full_shard") or not split.total:
        return 1.0
    return 1.0 - split.decoder_linear_weights / split.total / 2


SCHEDULE_NAMES = {"1f1b": "1f1b", "interleaved": "interleaved", "gpipe": "gpipe", "zero-bubble": "zb-h1"}
"""A pipeline schedule setting's bubble model (compute.collectives.SCHEDULES)."""


def bubble_of(s: TrainingSettings) -> float:
    """The pipeline's idle share of a step's micro-batches (0 without pipeline parallelism)."""
    if s.pp == 1:
        return 0.0
    return pipeline_bubble(SCHEDULE_NAMES[s.pp_schedule], s.pp, s.gradient_accumulation_steps, s.vpp)


def model_parallel_transfers(est: Estimate, arch: Architecture) -> tuple[Transfer, ...]:
    """One micro-batch's TP, CP, EP and PP traffic per GPU of an estimate's setup (layout_traffic)."""
    return layout_traffic(est.settings, est.seq_len, arch)


def layout_traffic(s: TrainingSettings, seq_len: int, arch: Architecture) -> tuple[Transfer, ...]:
    """One micro-batch's TP, CP, EP and PP traffic per GPU, from the model's shapes (compute.roofline
    layout_transfers): TP moves the layer's b·s/cp·h activations twice in forward and twice in backward (Megatron's
    f and g operators; twice more under full recomputation); CP passes each layer's K/V chunk around its ring; EP
    dispatches and combines each routed token's hidden state in forward and backward; PP sends one activation to the
    next stage. Sizes in the compute dtype, per stage (layers / pp)."""
    if s.model_parallel * s.ep == 1:
        return ()
    width = s.precision.compute_bytes
    tokens = s.micro_batch_size * seq_len // s.cp
    layers = -(-arch.num_layers // s.pp)
    hidden = tokens * arch.hidden_size * width
    kv = 2 * tokens * (arch.num_key_value_heads or arch.num_attention_heads) * arch.head_dim * width // s.tp
    passes = 3 if s.gradient_checkpointing in ("full", "op") else 2
    routed = hidden * (arch.experts_per_token or 1)
    return layout_transfers(dp=s.data_parallel, tp=s.tp, cp=s.cp, ep=s.ep, pp=s.pp,
                            sequence_parallel=s.sequence_parallel != "off", tp_bytes=hidden,
                            tp_collectives=2 * passes * layers, cp_bytes=kv * layers,
                            ep_bytes=routed // s.tp, ep_collectives=2 * passes * layers if arch.is_moe else 0,
                            pp_bytes=hidden // (s.tp if s.sequence_parallel != "off" else 1))
