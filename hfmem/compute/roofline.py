"""Time per training step on one GPU type: a roofline of compute and memory traffic, plus the communication
compute does not hide, each an explicit term in seconds.

    micro-batch = max(executed FLOPs / (HFU x peak), HBM bytes / bandwidth) + exposed per-micro-batch transfers
    step        = micro-batches x micro-batch + optimizer traffic / bandwidth + exposed per-step transfers

The utilisation is explicit: `hfu`, the share of the dense peak at which the executed matmul FLOPs run (PaLM's
hardware FLOPs utilisation, Chowdhery et al. 2022, App. B); MFU (model FLOPs, recomputation excluded) is an
output. A transfer hides behind the compute window it overlaps with in the framework (DDP's bucketed all-reduce
behind the last backward, FSDP/ZeRO-3 prefetched all-gathers behind forward and backward) and shows only the part
longer than that window, or its non-overlappable tail. Collectives are ring algorithms: an all-reduce moves
2(n-1)/n of the buffer per GPU, a reduce-scatter or an all-gather (n-1)/n, at one direction of the link.
Pure functions over numbers and dataclasses; the CPU optimizer step of ZeRO-Offload is not modelled.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Literal

from hfmem.compute.flops import CHECKPOINTING, TrainingFlops
from hfmem.errors import InvalidInputError
from hfmem.hardware.specs import GpuSpecs

GB_S = 1e9
Link = Literal["gpu", "pcie"]
"""The data-parallel link between GPUs, or PCIe to the host."""
SHARDINGS = ("none", "ddp", "zero1", "zero2", "zero3", "fsdp_full_shard", "fsdp_shard_grad_op")
"""The data-parallel schemes timed (the values of TrainingSettings.sharding)."""
DDP_BUCKET_BYTES = 25 * 2**20
"""torch DistributedDataParallel's bucket_cap_mb default (25 MiB): the last bucket is all-reduced after backward
ends."""


@dataclass(frozen=True)
class UtilisationSource:
    """A published utilisation figure behind the default HFU (none of them is a validation row)."""

    setup: str
    url: str
    where: str
    mfu: float | None
    hfu: float
    arch: str
    """The accelerator architecture it was measured on (the catalogue's `arch` names for GPUs)."""


LLAMA3 = "https://arxiv.org/abs/2407.21783"
H100_DENSE_BF16_TFLOPS = 989.5
UTILISATION_SOURCES = (
    UtilisationSource("PaLM 540B, 6144 TPU v4, rematerialisation", "https://arxiv.org/abs/2204.02311",
                      "Section 4 and Appendix B: 46.2% MFU, 57.8% HFU", 0.462, 0.578, "tpu-v4"),
    UtilisationSource("Megatron-LM GPT 530B, 2240 A100, full recomputation", "https://arxiv.org/abs/2205.05198",
                      "abstract: 42.1% MFU; one extra forward of three makes HFU 4/3 of it", 0.421, 0.421 * 4 / 3,
                      "ampere"),
    UtilisationSource("Megatron-LM GPT 1T, 3072 A100, PTD-P with recomputation", "https://arxiv.org/abs/2104.04473",
                      "abstract: 52% of peak, FLOPs counted with the recomputed forward", None, 0.52, "ampere"),
    *(UtilisationSource(f"Llama 3 405B, {gpus} H100, BF16", LLAMA3,
                        f"Table 4: {tflops} TFLOPs/GPU of the H100's {H100_DENSE_BF16_TFLOPS} dense BF16 peak",
                        tflops / H100_DENSE_BF16_TFLOPS, tflops / H100_DENSE_BF16_TFLOPS, "hopper")
      for gpus, tflops in (("8,192", 430), ("16,384", 400), ("16,384 (context parallel)", 380))),
)
DEFAULT_HFU = round(statistics.median(s.hfu for s in UTILISATION_SOURCES), 3)
"""The median hardware FLOPs utilisation of UTILISATION_SOURCES (tuned large-scale training; 0.48), for an
architecture none of them was measured on."""
HFU_BY_ARCH = {arch: round(statistics.median(s.hfu for s in UTILISATION_SOURCES if s.arch == arch), 3)
               for arch in sorted({s.arch for s in UTILISATION_SOURCES})}
"""The median of the sources measured on each architecture: Ampere 0.54, Hopper 0.40 (the H100's dense peak is three
times the A100's, and the same kind of software reaches a smaller share of it)."""


def hfu_for(arch: str | None) -> float:
    """The utilisation assumed on a GPU of `arch`: its architecture's published median, else DEFAULT_HFU."""
    return HFU_BY_ARCH.get(arch or "", DEFAULT_HFU)


@dataclass(frozen=True)
class Machine:
    """What one GPU of a setup computes and moves per second."""

    peak_flops: float
    memory_bytes_per_s: float
    gpu_link_bytes_per_s: float | None
    """One direction of the data-parallel link each GPU's collectives run at (NVLink, PCIe or the network)."""
    pcie_bytes_per_s: float | None
    """One direction of the host link (offload traffic)."""

    def bandwidth(self, link: Link) -> float:
        value = self.gpu_link_bytes_per_s if link == "gpu" else self.pcie_bytes_per_s
        if not value:
            raise InvalidInputError(f"no {'GPU-to-GPU' if link == 'gpu' else 'PCIe'} bandwidth for this GPU; "
                                    "the catalogue has no vendor figure for it.")
        return value


def machine(specs: GpuSpecs, dtype: str, num_gpus: int, *, gpus_per_node: int = 8,
            network_gbps: float | None = None) -> Machine:
    """A catalogue GPU's figures for `num_gpus` of them: one direction of the vendor's bidirectional links.

    Up to `link_gpus` GPUs talk over NVLink/Infinity Fabric, up to `gpus_per_node` over PCIe, beyond a node over
    the network at `network_gbps` per GPU and direction (e.g. 50 for one 400 Gb/s NIC per GPU).
    """
    peak = specs.peak_flops(dtype)
    if peak is None or specs.memory_gbps is None:
        raise InvalidInputError(f"no vendor {dtype} peak or memory bandwidth for {specs.name} in the catalogue")
    pcie = specs.pcie_gbps / 2 * GB_S if specs.pcie_gbps else None
    link: float | None
    if num_gpus <= (specs.link_gpus or 0) and specs.link_gbps:
        link = specs.link_gbps / 2 * GB_S
    elif num_gpus <= gpus_per_node:
        link = pcie
    elif network_gbps is None:
        raise InvalidInputError(f"beyond a node of {gpus_per_node} GPUs; no network figure")
    else:
        intra = specs.link_gbps if (specs.link_gpus or 0) >= gpus_per_node and specs.link_gbps else specs.pcie_gbps or 0
        link = min(intra / 2, network_gbps) * GB_S
    return Machine(peak, specs.memory_gbps * GB_S, link, pcie)


@dataclass(frozen=True)
class Transfer:
    """Bytes one GPU sends over a link each micro-batch or each step, and the compute it can hide behind."""

    name: str
    bytes: float
    link: Link
    """"gpu" (the data-parallel link) or "pcie" (host)."""
    per: Literal["micro_batch", "step"]
    """"micro_batch" or "step" (step transfers overlap the last micro-batch only)."""
    hidden_by: Literal["forward", "backward"] | None
    """"forward", "backward" or None (exposed whole)."""
    tail_bytes: float = 0.0
    """What cannot overlap even with a long window (DDP's last bucket, all-reduced after backward)."""


def data_parallel_transfers(sharding: str, num_gpus: int, *, parameter_bytes: float, trainable_bytes: float,
                            gradient_bytes: float) -> tuple[Transfer, ...]:
    """The collectives of one step's data parallelism, per GPU.

    parameter_bytes: every weight as the shards hold them (what ZeRO-3/FSDP all-gather); trainable_bytes: the
    updated weights ZeRO-1/2 all-gather after the step; gradient_bytes: the gradients reduced.
    ddp: one all-reduce per step, in buckets during the last backward. zero1: reduce-scatter at the step's last
    backward, all-gather of the updated weights after the optimizer. zero2: the reduce-scatter every micro-batch
    (its gradients are partitioned). zero3 / fsdp_full_shard: every micro-batch, an all-gather in forward and
    again in backward, a reduce-scatter in backward. fsdp_shard_grad_op: the forward all-gather (the weights stay
    gathered through backward) and the reduce-scatter.
    """
    if sharding not in SHARDINGS:
        raise InvalidInputError(f"unknown sharding {sharding!r}; expected one of {', '.join(SHARDINGS)}.")
    if num_gpus < 2 or sharding == "none":
        return ()
    share = (num_gpus - 1) / num_gpus
    reduce_scatter = share * gradient_bytes
    if sharding == "ddp":
        return (Transfer("ddp_all_reduce", 2 * reduce_scatter, "gpu", "step", "backward",
                         tail_bytes=2 * share * min(DDP_BUCKET_BYTES, gradient_bytes)),)
    if sharding in {"zero1", "zero2"}:
        per: Literal["micro_batch", "step"] = "step" if sharding == "zero1" else "micro_batch"
        return (Transfer("zero_reduce_scatter", reduce_scatter, "gpu", per, "backward"),
                Transfer("zero_all_gather_updated", share * trainable_bytes, "gpu", "step", None))
    gather = share * parameter_bytes
    transfers = [Transfer("all_gather_forward", gather, "gpu", "micro_batch", "forward")]
    if sharding != "fsdp_shard_grad_op":
        transfers.append(Transfer("all_gather_backward", gather, "gpu", "micro_batch", "backward"))
    transfers.append(Transfer("reduce_scatter", reduce_scatter, "gpu", "micro_batch", "backward"))
    return tuple(transfers)


def offload_transfers(num_gpus: int, *, offload_optimizer: bool, offload_params: bool, parameter_bytes: float,
                      trainable_bytes: float, gradient_bytes: float) -> tuple[Transfer, ...]:
    """PCIe traffic of ZeRO/FSDP offload, per GPU (its 1/num_gpus shard).

    Optimizer offload: the gradient shard goes to the CPU during each backward, the updated weights come back after
    the CPU step. Parameter offload: the weight shard streams in for forward and again for backward.
    """
    shard = 1 / max(1, num_gpus)
    transfers = []
    if offload_optimizer:
        transfers += [Transfer("offload_gradients_to_cpu", shard * gradient_bytes, "pcie", "micro_batch", "backward"),
                      Transfer("offload_weights_to_gpu", shard * trainable_bytes, "pcie", "step", None)]
    if offload_params:
        transfers += [Transfer("offload_params_forward", shard * parameter_bytes, "pcie", "micro_batch", "forward"),
                      Transfer("offload_params_backward", shard * parameter_bytes, "pcie", "micro_batch", "backward")]
    return tuple(transfers)


def weight_passes(checkpointing: str) -> int:
    """Times each weight is read per micro-batch: forward, backward (the input gradient), and the recomputed forward
    of full checkpointing. QLoRA dequantises its NF4 weights once per pass."""
    if checkpointing not in CHECKPOINTING:
        raise InvalidInputError(f"unknown checkpointing {checkpointing!r}; expected one of {', '.join(CHECKPOINTING)}.")
    return 3 if checkpointing == "full" else 2


@dataclass(frozen=True)
class Traffic:
    """HBM bytes per micro-batch and per optimizer step, by term."""

    per_micro_batch: dict[str, float]
    per_step: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {"per_micro_batch": dict(self.per_micro_batch), "per_step": dict(self.per_step)}


def hbm_traffic(*, weight_bytes: float, passes: int, gradient_bytes: float, optimizer_bytes: float,
                activation_bytes: float = 0.0, dequantised_weights: float = 0.0, compute_bytes: int = 2) -> Traffic:
    """A lower bound of the memory traffic: every weight read once per pass, gradients read and written (accumulated),
    saved activations written in forward and read in backward, the optimizer reading and writing its state once per
    step, and QLoRA writing then reading each dequantised weight (`dequantised_weights` elements, `compute_bytes`
    each) once per pass. Matmul operand re-reads from HBM (tiles that miss the L2 cache) are not counted.
    """
    return Traffic(
        per_micro_batch={"weights": weight_bytes * passes, "gradients": 2 * gradient_bytes,
                         "activations": 2 * activation_bytes,
                         "dequantisation": 2 * compute_bytes * dequantised_weights * passes},
        per_step={"optimizer": 2 * optimizer_bytes},
    )


@dataclass(frozen=True)
class StepTime:
    """Seconds per optimizer step on one GPU, by term, with the throughput and utilisation they imply."""

    terms: dict[str, float]
    seconds: float
    tokens_per_s: float
    """All GPUs together."""
    mfu: float
    hfu: float
    bound: str
    """"compute" or "memory": which side of the roofline sets each micro-batch."""

    def to_dict(self) -> dict[str, Any]:
        return {"terms": dict(self.terms), "seconds": self.seconds, "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
                "hfu": self.hfu, "bound": self.bound}


def _exposed(transfers: list[Transfer], windows: dict[str, float], node: Machine) -> dict[str, float]:
    """Seconds each transfer shows beyond the compute it overlaps; transfers sharing a window and a link queue."""
    exposed: dict[str, float] = {}
    groups: dict[tuple[str | None, Link], list[Transfer]] = {}
    for t in transfers:
        groups.setdefault((t.hidden_by, t.link), []).append(t)
    for (window, link), group in groups.items():
        seconds = [t.bytes / node.bandwidth(link) for t in group]
        total = sum(seconds)
        shown = total if window is None else max(sum(t.tail_bytes for t in group) / node.bandwidth(link),
                                                 total - windows[window])
        for t, s in zip(group, seconds, strict=True):
            exposed[t.name] = shown * s / total if total else 0.0
    return exposed


def step_time(flops: TrainingFlops, node: Machine, *, tokens_per_micro_batch: int, micro_batches: int = 1,
              num_gpus: int = 1, hfu: float = DEFAULT_HFU, traffic: Traffic | None = None,
              transfers: tuple[Transfer, ...] = ()) -> StepTime:
    """Time one optimizer step of `micro_batches` micro-batches of `tokens_per_micro_batch` tokens on each GPU."""
    if not 0 < hfu <= 1:
        raise InvalidInputError(f"utilisation must be in (0, 1], got {hfu!r}.")
    if tokens_per_micro_batch < 1 or micro_batches < 1 or num_gpus < 1:
        raise InvalidInputError("tokens, micro-batches and GPUs must be positive.")
    traffic = traffic or Traffic({}, {})
    rate = hfu * node.peak_flops
    forward = tokens_per_micro_batch * flops.forward / rate
    backward = tokens_per_micro_batch * (flops.backward_input + flops.backward_weight + flops.recompute) / rate
    memory = sum(traffic.per_micro_batch.values()) / node.memory_bytes_per_s
    micro = max(forward + backward, memory)
    stretch = micro / (forward + backward) if forward + backward else 1.0
    windows = {"forward": forward * stretch, "backward": backward * stretch}
    each = _exposed([t for t in transfers if t.per == "micro_batch"], windows, node)
    once = _exposed([t for t in transfers if t.per == "step"], windows, node)
    optimizer = sum(traffic.per_step.values()) / node.memory_bytes_per_s
    terms = {"compute_forward": micro_batches * forward, "compute_backward": micro_batches * backward,
             "memory_traffic": micro_batches * memory,
             "roofline": micro_batches * micro, "optimizer_traffic": optimizer}
    terms |= {f"exposed_{name}": micro_batches * s for name, s in each.items()}
    terms |= {f"exposed_{name}": s for name, s in once.items()}
    seconds = micro_batches * (micro + sum(each.values())) + optimizer + sum(once.values())
    tokens = tokens_per_micro_batch * micro_batches
    return StepTime(terms=terms, seconds=seconds, tokens_per_s=num_gpus * tokens / seconds,
                    mfu=tokens * flops.model / (seconds * node.peak_flops),
                    hfu=tokens * flops.hardware / (seconds * node.peak_flops),
                    bound="compute" if forward + backward >= memory else "memory")
