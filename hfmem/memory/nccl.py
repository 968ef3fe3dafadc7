"""NCCL's device memory per GPU: the buffers of the communicators a rank uses, allocated outside PyTorch's allocator.

nvidia-smi counts them and an out-of-memory counts them; torch.cuda.max_memory_allocated does not. Each
communicator, at NCCL v2.21.5 (the release PyTorch 2.5 and 2.6 ship, which connects its rings and trees when the
communicator is created), holds:

- per ring/tree channel and peer connection, a Simple (NCCL_BUFFSIZE, 4 MiB), an LL128 (4.69 MiB) and an LL
  (512 KiB) buffer (INIT L542-L544; P2P L356, L421: the receiver holds them, the sender the Simple one where NVLink
  reads it). Rings connect each rank's previous and next rank, trees its parent and children (INIT L1256-L1273); in a
  node's chain a tree reuses the ring's connection to one side and adds one more, so 2 connections a channel, 1
  between two ranks;
- the channels NCCL's search finds for an NVSwitch node of A100s or H100s: 6 rings at the top search speed
  (SEARCH L850, L855: 40 GB/s in A100's 12 NVLinks of 20 GB/s, 60 in H100's 18 of 20.6: TOPO L16-L17), doubled in
  the search (SEARCH L835-L846) and again in ncclTopoPostset (CONNECT L443): 24;
- per peer it sends to or receives from (pipeline stages, CP's ring, EP's all-to-all), p2p connections on
  nextPow2(24) = 32 channels inside a node, 2 to a peer across the network (PATHS L706-L717, L763);
- on an NVSwitch Hopper/Blackwell node, for a communicator of more than 2 GPUs of one node, NVLS buffers: per head
  (one per local GPU) 16 channels x 2 x (NCCL_NVLS_CHUNKSIZE 128 KiB x 8 steps + 2 MiB) (NVLS L229-L233, L310-L314;
  NCCL_NVLS_ENABLE).

NCCL 2.22 and later connect only the algorithms a run uses (NCCL_RUNTIME_CONNECT, on by default: INIT22 L47,
L1153), so they hold at most this. Which communicators a rank uses follows Megatron-LM's rank order tp-cp-ep-dp-pp:
the gradient group (DP x CP; FSDP, ZeRO and DDP: all ranks), TP, PP (its stages' sends and receives), CP, EP (its
all-to-all) and the expert-data-parallel group; with --nccl-groups megatron also Megatron-LM's world group and its
model-parallel group (each process group is its own communicator). The real figure moves with the NCCL version and
NCCL_BUFFSIZE, NCCL_NVLS_ENABLE, NCCL_MIN/MAX_NCHANNELS: --nccl-gib sets it, 0 switches it off. Left out, each
adding memory: a tree whose chain runs in another order than the ring (up to 2 more connections a channel), the
sending side's LL128 and Simple buffers of a connection over the network (net.cc registers them on both ends with
GPUDirect RDMA), NVLS trees across nodes, Megatron's embedding group between the first and last stages, and NCCL's
own kernels and structures.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from hfmem.hardware.capabilities import capabilities
from hfmem.hardware.gpus import Gpu
from hfmem.hardware.specs import gpu_specs
from hfmem.memory.settings import TrainingSettings
from hfmem.units import GIB

_NCCL = "https://github.com/NVIDIA/nccl/blob/ab2b89c4c339bd7f816fbc114a4b05d386b66290/src/"
SOURCES = {
    "INIT": _NCCL + "init.cc", "DEVICE": _NCCL + "include/device.h", "P2P": _NCCL + "transport/p2p.cc",
    "SEARCH": _NCCL + "graph/search.cc", "CONNECT": _NCCL + "graph/connect.cc", "PATHS": _NCCL + "graph/paths.cc",
    "NVLS": _NCCL + "transport/nvls.cc", "TOPO": _NCCL + "graph/topo.h",
    "INIT22": "https://github.com/NVIDIA/nccl/blob/178b6b759074597777ce13438efb0e0ba625e429/src/init.cc",
}
"""The NCCL source files (v2.21.5-1; v2.22.3-1 for INIT22) the constants below cite by line."""

NCCL_STEPS = 8
"""Slots of each connection's buffers (DEVICE L22)."""
LL_BUFFER = 8 * 512 * NCCL_STEPS * 16
"""NCCL_LL_LINES_PER_THREAD x NCCL_LL_MAX_NTHREADS x NCCL_STEPS x a 16-byte ncclLLFifoLine: 512 KiB (INIT L542)."""
LL128_BUFFER = 120 * 640 * NCCL_STEPS * 8
"""NCCL_LL128_ELEMS_PER_THREAD x NCCL_LL128_MAX_NTHREADS x NCCL_STEPS x 8 bytes: 4.69 MiB (INIT L543)."""
SIMPLE_BUFFER = 1 << 22
"""NCCL_BUFFSIZE's default, 4 MiB (INIT L544)."""
CONNECTION = LL_BUFFER + LL128_BUFFER + SIMPLE_BUFFER
"""One channel's connection to one peer: its three protocols' buffers, 9.19 MiB."""
COLL_CHANNELS = 24
"""Ring and tree channels on an NVSwitch A100 or H100 node (6 searched, doubled twice: see the module docstring)."""
NET_PEER_CHANNELS = 2
"""p2p channels to a peer across the network (NCCL_NCHANNELS_PER_NET_PEER unset: PATHS L713-L717)."""
NVLS_HEAD = 16 * 2 * (128 * 1024 * NCCL_STEPS + (1 << 21))
"""NVLS buffers per head: NCCL_NVLS_NCHANNELS 16 x 2 x (chunk x NCCL_STEPS + NVLS_MEM_ALIGN_SIZE), 96 MiB."""


@dataclass(frozen=True)
class Communicator:
    """One process group a rank uses: its ranks, the rank stride between them and the peers it sends to directly."""

    size: int
    stride: int
    peers: int = 0
    """p2p peers (0: collectives only)."""


def p2p_channels() -> int:
    """p2p channels to a peer inside a node: the collective channels rounded up to a power of two (PATHS L763)."""
    return 1 << (COLL_CHANNELS - 1).bit_length()


def local_ranks(comm: Communicator, per_node: int) -> int:
    """The communicator's ranks on one node: consecutive ranks fill a node, a stride spreads them."""
    return max(1, min(comm.size, per_node // comm.stride))


def communicator_bytes(comm: Communicator, per_node: int, nvls: bool) -> int:
    """The device bytes one rank holds for `comm`: ring and tree connections, NVLS heads, p2p connections."""
    if comm.size < 2:
        return 0
    local = local_ranks(comm, per_node)
    rings = COLL_CHANNELS * (1 if comm.size == 2 else 2) * CONNECTION
    heads = local * NVLS_HEAD if nvls and local > 2 else 0
    per_peer = p2p_channels() if local == comm.size else NET_PEER_CHANNELS
    return rings + heads + comm.peers * per_peer * CONNECTION


def communicators(s: TrainingSettings) -> tuple[Communicator, ...]:
    """The process groups a rank of the layout uses, in Megatron-LM's rank order tp-cp-ep-dp-pp (FSDP, ZeRO, DDP:
    the data-parallel group alone)."""
    etp = s.resolved_expert_tp
    cp_peers = {"ring": min(2, s.cp - 1), "all-gather": 0, "all-to-all": s.cp - 1}[s.cp_kind]
    return (Communicator(s.shard_ranks, s.tp),
            Communicator(s.tp, 1),
            Communicator(s.cp, s.tp, cp_peers),
            Communicator(s.ep, etp, s.ep - 1),
            Communicator(s.num_gpus // (s.pp * s.ep * etp), s.ep * etp) if s.ep > 1 else Communicator(1, 1),
            Communicator(s.pp, s.num_gpus // s.pp, min(2, s.pp - 1)),
            *(megatron_groups(s) if s.nccl_groups == "megatron" else ()))


def megatron_groups(s: TrainingSettings) -> tuple[Communicator, ...]:
    """Megatron-LM's groups beyond the layout's (the nccl_groups setting): the world group and, with TP x PP above 1
    and no distributed optimizer, the model-parallel group, a stage's TP ranks and the same ranks of the other stages,
    num_gpus / pp apart (its stride stands for how many of its ranks share a node)."""
    world = Communicator(s.num_gpus, 1)
    if s.tp * s.pp == 1 or (s.zero_stage or 0) > 0:
        return (world,)
    tp_local = min(s.tp, s.gpus_per_node)
    stages_local = max(1, min(s.pp, s.gpus_per_node // max(1, s.num_gpus // s.pp)))
    return world, Communicator(s.tp * s.pp, max(1, s.gpus_per_node // (tp_local * stages_local)))


def nvls_board(gpu: Gpu) -> bool:
    """Whether NCCL sets NVLS up on the GPU's board: NVLink multicast needs NVSwitch and Hopper or later (SEARCH
    L893: no NVS node or compute capability below 9.0, no NVLS graph): a catalogue card whose NVLink joins 8."""
    specs = gpu_specs(gpu)
    return (capabilities(gpu).arch in ("hopper", "blackwell") and (specs.link or "").startswith("NVLink ")
            and (specs.link_gpus or 0) > 2)


def nvls_for(s: TrainingSettings, gpus: Iterable[Gpu]) -> TrainingSettings:
    """The settings with nccl_nvls decided by the GPUs where it is unset and they all agree (a fit cell's one GPU, a
    plan whose GPUs are all NVSwitch boards or none is); as given otherwise."""
    boards = {nvls_board(g) for g in gpus}
    if s.overhead.nccl_nvls is not None or len(boards) != 1:
        return s
    return replace(s, overhead=replace(s.overhead, nccl_nvls=boards.pop()))


def nccl_bytes(s: TrainingSettings) -> int:
    """NCCL's device bytes per GPU: 0 on one GPU (no communicator), else the setting where given, else the sum over
    the rank's communicators."""
    if s.num_gpus < 2:
        return 0
    if s.overhead.nccl_gib is not None:
        return round(s.overhead.nccl_gib * GIB)
    return sum(communicator_bytes(c, s.gpus_per_node, bool(s.overhead.nccl_nvls)) for c in communicators(s))
