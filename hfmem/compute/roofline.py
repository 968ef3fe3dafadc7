"""Time per training step on one GPU type: a roofline of compute and memory traffic, plus the communication
compute does not hide, each an explicit term in seconds.

    micro-batch = max(executed FLOPs / (HFU x peak), HBM bytes / bandwidth) + exposed per-micro-batch transfers
    step        = micro-batches x micro-batch + optimizer traffic / bandwidth + exposed per-step transfers

The utilisation is explicit: `hfu`, the share of the dense peak at which the executed matmul FLOPs run (PaLM's
hardware FLOPs utilisation, Chowdhery et al. 2022, App. B); MFU (model FLOPs, recomputation excluded) is an
output. A transfer hides behind the compute window it overlaps with in the framework (DDP's bucketed all-reduce
behind the last backward, FSDP/ZeRO-3 prefetched all-gathers behind forward and backward) and shows only the part
longer than that window, or its non-overlappable tail. Collectives cost what hfmem.compute.collectives says (ring
α-β terms at one direction of the link; across machines NCCL's flat ring, bounded by the slower of NVLink/PCIe
and the node's network). A pipeline's bubble adds its schedule's idle share of the micro-batches' time.
Pure functions over numbers and dataclasses; the CPU optimizer step of ZeRO-Offload is not modelled.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

from hfmem.compute.collectives import STEP_LATENCY_S, Fabric, Link, collective_seconds
from hfmem.compute.flops import CHECKPOINTING, TrainingFlops
from hfmem.errors import InvalidInputError
from hfmem.hardware.specs import GpuSpecs

GB_S = 1e9
GBIT_S = 1e9 / 8
"""Bytes per second of one Gb/s (network figures are in bits)."""
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
    stack: str = ""
    """The training software that reached it, where the hfu_stack setting can name it (constants.HFU_STACKS)."""


LLAMA3 = "https://arxiv.org/abs/2407.21783"
H100_DENSE_BF16_TFLOPS = 989.5
UTILISATION_SOURCES = (
    UtilisationSource("PaLM 540B, 6144 TPU v4, rematerialisation", "https://arxiv.org/abs/2204.02311",
                      "Section 4 and Appendix B: 46.2% MFU, 57.8% HFU", 0.462, 0.578, "tpu-v4"),
    UtilisationSource("Megatron-LM GPT-2 8.3B, 512 V100 (DGX-2H), 8-way model and 64-way data parallel",
                      "https://arxiv.org/abs/1909.08053",
                      "abstract: 15.1 PetaFLOPs over 512 GPUs; its 39 TeraFLOPs single-GPU baseline 'is 30% of peak "
                      "FLOPs', a 130 TFLOP/s peak: 15.1e15 / 512 / 130e12", None, round(15.1e15 / 512 / 130e12, 3),
                      "volta", "megatron"),
    UtilisationSource("Megatron-LM GPT 530B, 2240 A100, full recomputation", "https://arxiv.org/abs/2205.05198",
                      "abstract: 42.1% MFU; one extra forward of three makes HFU 4/3 of it", 0.421, 0.421 * 4 / 3,
                      "ampere", "megatron"),
    UtilisationSource("Megatron-LM GPT 1T, 3072 A100, PTD-P with recomputation", "https://arxiv.org/abs/2104.04473",
                      "abstract: 52% of peak, FLOPs counted with the recomputed forward", None, 0.52, "ampere",
                      "megatron"),
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
"""The median of the sources measured on each architecture: Volta 0.23, Ampere 0.54, Hopper 0.40 (the H100's dense
peak is three times the A100's, and the same kind of software reaches a smaller share of it)."""


MEGATRON_README = ("https://github.com/NVIDIA/Megatron-LM/blob/d98e8a64ddf34856e74b24714e3bedb2f5a39553/"
                   "images/model_table.png")
MEGATRON_H100 = tuple(
    UtilisationSource(f"Megatron-Core r0.8.0 GPT {size}, {gpus} H100, TP{tp} PP{pp} DP48", MEGATRON_README,
                      f"README 'Performance Benchmarking' table: {tflops} TFLOP/s per GPU, MFU against the dense bf16 "
                      "peak; no recomputation stated, so HFU is taken as MFU", tflops / H100_DENSE_BF16_TFLOPS,
                      tflops / H100_DENSE_BF16_TFLOPS, "hopper", "megatron")
    for size, gpus, tp, pp, tflops in (
        ("1.7B", 48, 1, 1, 408.8), ("7.1B", 96, 2, 1, 465.9), ("16B", 192, 4, 1, 489.1), ("32B", 384, 8, 1, 459.6),
        ("70B", 768, 8, 2, 419.7), ("119B", 1536, 8, 4, 420.5), ("177B", 2304, 8, 6, 432.8),
        ("314B", 3072, 8, 8, 474.4), ("462B", 6144, 8, 16, 459.9)))
"""Megatron-LM's own H100 figures (its README's weak-scaling table, Megatron-Core r0.8.0, July 2024): what its
stack reaches, used where the run names that stack (hfu_stack megatron), not in the default pool."""
STACK_SOURCES = UTILISATION_SOURCES + MEGATRON_H100
HFU_BY_STACK = {key: round(statistics.median(s.hfu for s in STACK_SOURCES if (s.stack, s.arch) == key), 3)
                for key in {(s.stack, s.arch) for s in STACK_SOURCES if s.stack}}
"""The median per stack and architecture: Megatron on Volta 0.23, Ampere 0.54, Hopper 0.46."""


def hfu_for(arch: str | None, stack: str = "any") -> float:
    """The utilisation assumed on a GPU of `arch`: `stack`'s published median there, else the architecture's
    (HFU_BY_ARCH), else DEFAULT_HFU."""
    return HFU_BY_STACK.get((stack, arch or ""), HFU_BY_ARCH.get(arch or "", DEFAULT_HFU))


TE_SPEEDUPS = ("https://github.com/NVIDIA/TransformerEngine/blob/d0067d0da6cb01811b8072a7d304f0e00344ce2b/"
               "docs/features/low_precision_training/speedups.rst")
GEMM_SPEEDUP: dict[tuple[str, str], float] = {
    ("fp8-te", "hopper"): 1.69, ("fp8-te-current", "hopper"): 1.57, ("fp8-torchao", "hopper"): 1.57,
    ("fp8-torchao-rowwise", "hopper"): 1.41,
    ("fp8-te", "blackwell"): 1.61, ("fp8-te-current", "blackwell"): 1.41, ("fp8-torchao", "blackwell"): 1.41,
    ("fp8-torchao-rowwise", "blackwell"): 1.41, ("mxfp8", "blackwell"): 1.44, ("nvfp4", "blackwell"): 2.03,
}
"""How many times faster than bf16 a recipe runs a transformer layer's 12 linear GEMMs (forward, data and weight
gradients), its per-step quantization included: TransformerEngine's GEMM benchmark of a 5B model (hidden 4096,
intermediate 16384) in autocast mode (TE_SPEEDUPS lines 56-58 on a B300, 89-94 on an H200 NVL: delayed scaling
1.69x / 1.61x, current scaling 1.57x / 1.41x, Hopper's block-scaled FP8 1.41x, MXFP8 1.44x, NVFP4 2.03x). torchao's
tensorwise recipe scales from the current amax, as TE's current scaling; its rowwise one is read as the finer-scaled
FP8 recipe (Hopper's block scaling, Blackwell's current scaling). Larger GEMMs gain more (1.92x on Hopper with the
quantization left out, lines 93-94), smaller ones less (lines 100-105). Other architectures take Hopper's."""


def gemm_speedup(recipe: str, arch: str | None) -> float:
    """The GEMM speedup over bf16 of `recipe` on an `arch` GPU: GEMM_SPEEDUP's, else Hopper's, else (a recipe only
    Blackwell runs) Blackwell's."""
    for key in ((recipe, arch or ""), (recipe, "hopper"), (recipe, "blackwell")):
        if key in GEMM_SPEEDUP:
            return GEMM_SPEEDUP[key]
    raise InvalidInputError(f"no GEMM speedup is known for the {recipe!r} recipe.")


def low_precision_hfu(hfu: float, bf16_peak: float, peak: float, speedup: float, share: float) -> float:
    """The share of a low-precision dense `peak` at which a step runs when the `share` of its FLOPs a recipe
    quantizes goes `speedup` times as fast as in bf16 at `hfu` of `bf16_peak`, and the rest (attention core, head,
    router) runs in bf16 as before."""
    return min(1.0, hfu * bf16_peak / peak / (share / speedup + 1 - share))


@dataclass(frozen=True)
class Machine:
    """What one GPU of a setup computes and moves per second, and the links its collectives cross."""

    peak_flops: float
    memory_bytes_per_s: float
    intra: Link | None
    """One direction of the link inside a machine (NVLink/Infinity Fabric, else PCIe), with its latency."""
    inter: Link | None
    """One direction of the network per GPU between machines; None where the setup stays in one machine."""
    pcie_bytes_per_s: float | None
    """One direction of the host link (offload traffic)."""
    gpus_per_node: int = 8
    nvme_bytes_per_s: dict[str, float | None] = field(default_factory=dict)
    """This GPU's share of its machine's NVMe bandwidth by direction ("read", "write"): NVMe offload traffic."""

    def fabric(self, ranks: int, stride: int = 1) -> Fabric:
        """The links a group of `ranks` GPUs, `stride` apart in the rank order (Megatron's tp-cp-ep-dp-pp, innermost
        first), talks over: as many of them share a machine as fit in its gpus_per_node."""
        if self.intra is None:
            raise InvalidInputError("no GPU-to-GPU bandwidth for this GPU; the catalogue has no vendor figure for it.")
        per_node = max(1, min(ranks, self.gpus_per_node // stride))
        return Fabric(ranks, per_node, self.intra, self.inter)

    def pcie(self) -> float:
        """The host link's bytes per second, one direction; a one-line error where the catalogue has none."""
        if not self.pcie_bytes_per_s:
            raise InvalidInputError("no PCIe bandwidth for this GPU; the catalogue has no vendor figure for it.")
        return self.pcie_bytes_per_s

    def nvme(self, direction: str) -> float:
        """This GPU's share of the machine's NVMe bytes per second in `direction`; a one-line error without a figure."""
        rate = self.nvme_bytes_per_s.get(direction)
        if not rate:
            raise InvalidInputError(f"no NVMe {direction} bandwidth for this machine; give --nvme-{direction}-gbps.")
        return rate


def machine(specs: GpuSpecs, dtype: str, num_gpus: int, *, gpus_per_node: int = 8,
            network_gbps: float | None = None, nvme_gbps: dict[str, float | None] | None = None) -> Machine:
    """A catalogue GPU's figures for `num_gpus` of them: one direction of the vendor's bidirectional links.

    Inside a machine of `gpus_per_node`, GPUs talk over NVLink/Infinity Fabric where it joins them all (`link_gpus`),
    else over PCIe; between machines over the network at `network_gbps` Gb/s per GPU and direction (400 for one
    400 Gb/s NIC per GPU). Each link's α is NCCL's per-step latency for it (collectives.STEP_LATENCY_S).
    `nvme_gbps`: the machine's NVMe GB/s by direction ("read", "write"), shared by its GPUs of the setup.
    """
    peak = specs.peak_flops(dtype)
    if peak is None or specs.memory_gbps is None:
        raise InvalidInputError(f"no vendor {dtype} peak or memory bandwidth for {specs.name} in the catalogue")
    pcie = specs.pcie_gbps / 2 * GB_S if specs.pcie_gbps else None
    local = min(num_gpus, gpus_per_node)
    if local <= (specs.link_gpus or 0) and specs.link_gbps:
        intra: Link | None = Link(specs.link_gbps / 2 * GB_S, STEP_LATENCY_S["nvlink"])
    else:
        intra = Link(pcie, STEP_LATENCY_S["pcie"]) if pcie else None
    inter = None
    if num_gpus > gpus_per_node:
        if network_gbps is None:
            raise InvalidInputError(f"{num_gpus} GPUs span machines of {gpus_per_node} and {specs.name} has no network "
                                    "figure: give --network-gbps")
        inter = Link(network_gbps * GBIT_S, STEP_LATENCY_S["network"])
    nvme = {d: gbps * GB_S / local if gbps else None for d, gbps in (nvme_gbps or {}).items()}
    return Machine(peak, specs.memory_gbps * GB_S, intra, inter, pcie, gpus_per_node, nvme)


NVME_OPS = {"nvme_read": "read", "nvme_write": "write"}
"""The transfer ops that cross the machine's NVMe, and the direction each reads its bandwidth for."""


@dataclass(frozen=True)
class Transfer:
    """One kind of collective (or host copy) of a step, per GPU, and the compute it can hide behind."""

    name: str
    op: str
    """A collective of hfmem.compute.collectives (all_reduce, reduce_scatter, all_gather, all_to_all, p2p),
    "copy" (a host transfer over PCIe), or "nvme_read" / "nvme_write" (a swap between host buffers and the NVMe)."""
    buffer: float
    """The whole buffer of the collective (collectives.py), or the bytes copied to or from the host."""
    per: Literal["micro_batch", "step"]
    """"micro_batch" or "step" (step transfers overlap the last micro-batch only)."""
    hidden_by: Literal["forward", "backward"] | None
    """"forward", "backward" or None (on the critical path, exposed whole)."""
    ranks: int = 1
    """The group it runs over."""
    stride: int = 1
    """How far apart the group's ranks are in the rank order (1: adjacent, inside one machine first)."""
    count: int = 1
    """Collectives the buffer is split into (FSDP units, DDP buckets): each pays the latency terms."""
    tail: float = 0.0
    """The buffer that cannot overlap even with a long window (DDP's last bucket, all-reduced after backward)."""

    @property
    def link(self) -> Literal["gpu", "pcie", "nvme"]:
        """"pcie" for a host copy, "nvme" for a swap, "gpu" for a collective: transfers on one link and window queue
        behind each other."""
        return "pcie" if self.op == "copy" else "nvme" if self.op in NVME_OPS else "gpu"

    def seconds(self, node: Machine, buffer: float | None = None) -> float:
        """Seconds of this transfer (of `buffer` bytes in one collective where given) on `node`."""
        if self.op == "copy":
            return (self.buffer if buffer is None else buffer) / node.pcie()
        if self.op in NVME_OPS:
            return (self.buffer if buffer is None else buffer) / node.nvme(NVME_OPS[self.op])
        fabric = node.fabric(self.ranks, self.stride)
        if buffer is not None:
            return collective_seconds(self.op, fabric, buffer)
        return self.count * collective_seconds(self.op, fabric, self.buffer / self.count)


def data_parallel_transfers(sharding: str, num_gpus: int, *, parameter_bytes: float, trainable_bytes: float,
                            gradient_bytes: float, units: int = 1, stride: int = 1) -> tuple[Transfer, ...]:
    """The collectives of one step's data parallelism over `num_gpus` ranks, `stride` apart.

    parameter_bytes: every weight as the shards hold them (what ZeRO-3/FSDP all-gather); trainable_bytes: the
    updated weights ZeRO-1/2 all-gather after the step; gradient_bytes: the gradients reduced; units: the FSDP
    units / ZeRO-3 modules gathered one at a time (a collective each).
    ddp: one all-reduce per step, in 25 MiB buckets during the last backward (torch DDP overlaps each bucket with
    the rest of the backward; the last one is exposed). zero1: reduce-scatter at the step's last backward,
    all-gather of the updated weights after the optimizer. zero2: the reduce-scatter every micro-batch (its
    gradients are partitioned). zero3 / fsdp_full_shard: every micro-batch, an all-gather in forward and again in
    backward, a reduce-scatter in backward, each prefetched behind the neighbouring unit's compute (FSDP
    backward_prefetch=BACKWARD_PRE, FSDP2's implicit prefetch, DeepSpeed's stage3_prefetch_bucket_size), except
    the first unit's gather, which nothing precedes, and the last unit's reduce-scatter, which nothing follows.
    fsdp_shard_grad_op: the forward all-gather (the weights stay gathered through backward) and the
    reduce-scatter.
    """
    if sharding not in SHARDINGS:
        raise InvalidInputError(f"unknown sharding {sharding!r}; expected one of {', '.join(SHARDINGS)}.")
    if num_gpus < 2 or sharding == "none":
        return ()
    group = {"ranks": num_gpus, "stride": stride}
    if sharding == "ddp":
        buckets = max(1, math.ceil(gradient_bytes / DDP_BUCKET_BYTES))
        return (Transfer("ddp_all_reduce", "all_reduce", gradient_bytes, "step", "backward", **group, count=buckets,
                         tail=min(DDP_BUCKET_BYTES, gradient_bytes)),)
    if sharding in {"zero1", "zero2"}:
        per: Literal["micro_batch", "step"] = "step" if sharding == "zero1" else "micro_batch"
        return (Transfer("zero_reduce_scatter", "reduce_scatter", gradient_bytes, per, "backward", **group),
                Transfer("zero_all_gather_updated", "all_gather", trainable_bytes, "step", None, **group))
    units = max(1, units)
    each = {**group, "count": units}
    transfers = [Transfer("all_gather_forward", "all_gather", parameter_bytes, "micro_batch", "forward", **each,
                          tail=parameter_bytes / units)]
    if sharding != "fsdp_shard_grad_op":
        transfers.append(Transfer("all_gather_backward", "all_gather", parameter_bytes, "micro_batch", "backward",
                                  **each))
    transfers.append(Transfer("reduce_scatter", "reduce_scatter", gradient_bytes, "micro_batch", "backward", **each,
                              tail=gradient_bytes / units))
    return tuple(transfers)


def offload_transfers(num_gpus: int, *, offload_optimizer: bool, offload_params: bool, parameter_bytes: float,
                      trainable_bytes: float, gradient_bytes: float, nvme_optimizer_bytes: float = 0.0,
                      nvme_param_bytes: float = 0.0) -> tuple[Transfer, ...]:
    """PCIe traffic of ZeRO/FSDP offload, per GPU (its 1/num_gpus shard), and NVMe traffic of ZeRO-Infinity's.

    Optimizer offload: the gradient shard goes to the CPU during each backward, the updated weights come back after
    the CPU step. Parameter offload: the weight shard streams in for forward and again for backward. On NVMe
    (`nvme_optimizer_bytes`, `nvme_param_bytes`: this GPU's swapped bytes), each step reads the optimizer's swapped
    states, master weights and gradients and writes them back, exposed (DeepSpeed's swapper without pipeline_read
    and pipeline_write); the swapped parameters are read for forward and again for backward, prefetched behind
    them, and the updated ones written after the step.
    """
    shard = 1 / max(1, num_gpus)
    transfers = []
    if offload_optimizer:
        transfers += [Transfer("offload_gradients_to_cpu", "copy", shard * gradient_bytes, "micro_batch", "backward"),
                      Transfer("offload_weights_to_gpu", "copy", shard * trainable_bytes, "step", None)]
    if offload_params:
        transfers += [Transfer("offload_params_forward", "copy", shard * parameter_bytes, "micro_batch", "forward"),
                      Transfer("offload_params_backward", "copy", shard * parameter_bytes, "micro_batch", "backward")]
    if nvme_optimizer_bytes:
        transfers += [Transfer("nvme_read_optimizer", "nvme_read", nvme_optimizer_bytes, "step", None),
                      Transfer("nvme_write_optimizer", "nvme_write", nvme_optimizer_bytes, "step", None)]
    if nvme_param_bytes:
        transfers += [Transfer("nvme_read_params_forward", "nvme_read", nvme_param_bytes, "micro_batch", "forward"),
                      Transfer("nvme_read_params_backward", "nvme_read", nvme_param_bytes, "micro_batch", "backward"),
                      Transfer("nvme_write_params", "nvme_write", nvme_param_bytes, "step", None)]
    return tuple(transfers)


def layout_transfers(*, dp: int = 1, tp: int = 1, cp: int = 1, ep: int = 1, pp: int = 1,
                     sequence_parallel: bool = False, tp_bytes: float = 0.0, tp_collectives: int = 0,
                     cp_bytes: float = 0.0, ep_bytes: float = 0.0, ep_collectives: int = 0,
                     pp_bytes: float = 0.0) -> tuple[Transfer, ...]:
    """The model-parallel collectives of one micro-batch, per GPU, ranks ordered tp-cp-ep-dp-pp (Megatron-LM's
    default order, innermost first: tensor parallelism stays inside a machine).

    tp_bytes: one TP collective's buffer (b·s·h activations), tp_collectives of them per micro-batch (Megatron: two
    all-reduces per layer in forward, two in backward): all-reduces, or with sequence parallelism an all-gather and
    a reduce-scatter each, on the critical path (Megatron overlaps them only with tp_comm_overlap, off by default).
    cp_bytes: the K/V one rank passes around the context-parallel ring in forward (cp-1 sends, hidden behind the
    attention of the chunk in hand, as Megatron's ring attention does); backward passes K/V and their gradients.
    ep_bytes: one all-to-all's buffer (a layer's routed tokens), ep_collectives per micro-batch (dispatch and
    combine, in forward and backward), exposed. pp_bytes: the activation one stage sends the next per micro-batch,
    and its gradient back, exposed.
    """
    out: list[Transfer] = []
    if tp > 1 and tp_collectives:
        if sequence_parallel:
            half = {"ranks": tp, "count": tp_collectives}
            out += [Transfer("tp_all_gather", "all_gather", tp_bytes * tp_collectives, "micro_batch", None, **half),
                    Transfer("tp_reduce_scatter", "reduce_scatter", tp_bytes * tp_collectives, "micro_batch", None,
                             **half)]
        else:
            out.append(Transfer("tp_all_reduce", "all_reduce", tp_bytes * tp_collectives, "micro_batch", None,
                                ranks=tp, count=tp_collectives))
    if cp > 1 and cp_bytes:
        ring = {"ranks": 2, "stride": tp, "count": cp - 1}
        out += [Transfer("cp_ring_forward", "p2p", cp_bytes * (cp - 1), "micro_batch", "forward", **ring),
                Transfer("cp_ring_backward", "p2p", 2 * cp_bytes * (cp - 1), "micro_batch", "backward", **ring)]
    if ep > 1 and ep_collectives:
        out.append(Transfer("ep_all_to_all", "all_to_all", ep_bytes * ep_collectives, "micro_batch", None, ranks=ep,
                            stride=tp * cp, count=ep_collectives))
    if pp > 1 and pp_bytes:
        out.append(Transfer("pp_send_recv", "p2p", 2 * pp_bytes, "micro_batch", None, ranks=2, stride=tp * cp * dp,
                            count=2))
    return tuple(out)


def weight_passes(checkpointing: str) -> int:
    """Times each weight is read per micro-batch: forward, backward (the input gradient), and the recomputed forward
    of full or per-op checkpointing (counted whole: per-op checkpointing recomputes about half the matmuls, a
    partial full checkpointing some layers). QLoRA dequantises its NF4 weights once per pass."""
    if checkpointing not in CHECKPOINTING:
        raise InvalidInputError(f"unknown checkpointing {checkpointing!r}; expected one of {', '.join(CHECKPOINTING)}.")
    return 3 if checkpointing in ("full", "op") else 2


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
    groups: dict[tuple[str | None, str], list[Transfer]] = {}
    for t in transfers:
        groups.setdefault((t.hidden_by, t.link), []).append(t)
    for (window, _), group in groups.items():
        seconds = [t.seconds(node) for t in group]
        total = sum(seconds)
        tail = sum(t.seconds(node, t.tail) for t in group if t.tail)
        shown = total if window is None else max(tail, total - windows[window])
        for t, s in zip(group, seconds, strict=True):
            exposed[t.name] = shown * s / total if total else 0.0
    return exposed


def step_time(flops: TrainingFlops, node: Machine, *, tokens_per_micro_batch: int, micro_batches: int = 1,
              num_gpus: int = 1, hfu: float = DEFAULT_HFU, traffic: Traffic | None = None,
              transfers: tuple[Transfer, ...] = (), bubble: float = 0.0) -> StepTime:
    """Time one optimizer step of `micro_batches` micro-batches of `tokens_per_micro_batch` tokens on each GPU;
    `bubble`: a pipeline schedule's idle share of the micro-batches' time (collectives.pipeline_bubble)."""
    if not 0 < hfu <= 1:
        raise InvalidInputError(f"utilisation must be in (0, 1], got {hfu!r}.")
    if tokens_per_micro_batch < 1 or micro_batches < 1 or num_gpus < 1 or bubble < 0:
        raise InvalidInputError("tokens, micro-batches and GPUs must be positive, the bubble not negative.")
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
    busy = micro_batches * (micro + sum(each.values()))
    if bubble:
        terms["pipeline_bubble"] = bubble * busy
    terms |= {f"exposed_{name}": micro_batches * s for name, s in each.items()}
    terms |= {f"exposed_{name}": s for name, s in once.items()}
    seconds = busy * (1 + bubble) + optimizer + sum(once.values())
    tokens = tokens_per_micro_batch * micro_batches
    return StepTime(terms=terms, seconds=seconds, tokens_per_s=num_gpus * tokens / seconds,
                    mfu=tokens * flops.model / (seconds * node.peak_flops),
                    hfu=tokens * flops.hardware / (seconds * node.peak_flops),
                    bound="compute" if forward + backward >= memory else "memory")
