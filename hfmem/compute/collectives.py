"""Collective communication times by the standard α-β cost model: each of a collective's steps costs the link's
latency α, and each byte crossing the slowest link of the step costs 1/bandwidth.

With p ranks and a buffer of n bytes (the whole buffer: an all-reduce's tensor, a reduce-scatter's input, an
all-gather's output, each rank's send buffer of an all-to-all), at one direction of a link of bandwidth B:

    ring reduce-scatter, all-gather   (p-1)·α + (p-1)/p · n/B
    ring all-reduce                   2(p-1)·α + 2(p-1)/p · n/B
    tree all-reduce                   2⌈log2 p⌉·α + 2 · n/B
    all-to-all (pairwise exchange)    (p-1)·α + (p-1)/p · n/B
    point-to-point                    α + n/B

(Thakur, Rabenseifner and Gropp, "Optimization of Collective Communication Operations in MPICH", IJHPCA 2005; the
tree is NCCL's pipelined double binary tree, whose algorithm bandwidth is half the bus bandwidth: nccl
src/graph/tuning.cc, `ratio *= .5`.) Across nodes NCCL's ring stays one flat ring over all p ranks (NCCL_RING:
`nsteps` counts every rank, algorithm bandwidth = bus bandwidth · nRanks/nsteps), pipelined in chunks, so its
time is set by its slowest hop: the g ranks of the group in a node split the ring's channels over their g NICs, and a
rank's bus bandwidth is min(intra link, g · network per GPU); of its steps, 2(nodes-1) for an all-reduce (nodes-1
for a reduce-scatter or all-gather) cross the network at its α, the rest the intra link's. The tree runs
hierarchically: the reduce-scatter inside each node over NVLink/PCIe, the tree across the nodes among the GPUs of
the same local rank on 1/g of the buffer, then the all-gather inside the node. Pure functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hfmem.errors import InvalidInputError

NCCL_TUNING = "https://github.com/NVIDIA/nccl/blob/b6475625fbcaa2c3c0e50eed2fa1255d7514d4a2/src/graph/tuning.cc"
NCCL_RING = ("https://github.com/NVIDIA/nccl/blob/5067397c2676d5aed50042fc39e5c8ee96eb0027/src/graph/tuning.cc"
             "#L289-L291 (nsteps), #L379 (ratio nRanks/nsteps), #L411-L412 (nInterSteps)")
STEP_LATENCY_S = {"nvlink": 3.4e-6, "pcie": 5.7e-6, "network": 14.0e-6}
"""α per ring step of NCCL's Simple protocol (the one large buffers use), by link: NCCL_TUNING's hwLat table, Ring
Simple column (NVLink 3.4 µs, PCI 5.7 µs, NET 14.0 µs)."""
OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "p2p")
ALGORITHMS = ("ring", "tree")


@dataclass(frozen=True)
class Link:
    """One direction of a link as one GPU sees it."""

    bytes_per_s: float
    latency_s: float


@dataclass(frozen=True)
class Fabric:
    """The links one group of ranks talks over: `per_node` of its `ranks` share a node (intra link), the nodes talk
    over `inter` (None: the group fits in one node)."""

    ranks: int
    per_node: int
    intra: Link
    inter: Link | None = None

    @property
    def nodes(self) -> int:
        """Machines the group spans."""
        return math.ceil(self.ranks / self.per_node)


def ring_reduce_scatter(p: int, n: float, link: Link) -> float:
    """(p-1)·α + (p-1)/p · n/B; an all-gather of an n-byte output is the same."""
    return 0.0 if p < 2 else (p - 1) * link.latency_s + (p - 1) / p * n / link.bytes_per_s


def ring_all_reduce(p: int, n: float, link: Link) -> float:
    """2(p-1)·α + 2(p-1)/p · n/B: a reduce-scatter then an all-gather."""
    return 2 * ring_reduce_scatter(p, n, link)


def tree_all_reduce(p: int, n: float, link: Link) -> float:
    """2⌈log2 p⌉·α + 2 · n/B: a pipelined reduce up and broadcast down the tree."""
    return 0.0 if p < 2 else 2 * math.ceil(math.log2(p)) * link.latency_s + 2 * n / link.bytes_per_s


def all_to_all(p: int, n: float, link: Link) -> float:
    """(p-1)·α + (p-1)/p · n/B: every rank sends 1/p of its n bytes to each other rank."""
    return ring_reduce_scatter(p, n, link)


def point_to_point(n: float, link: Link) -> float:
    """α + n/B."""
    return link.latency_s + n / link.bytes_per_s


def _flat(op: str, p: int, n: float, link: Link, algorithm: str) -> float:
    """One `op` over `p` ranks on one link."""
    if op == "all_reduce":
        return tree_all_reduce(p, n, link) if algorithm == "tree" else ring_all_reduce(p, n, link)
    if op in {"reduce_scatter", "all_gather"}:
        return ring_reduce_scatter(p, n, link)
    if op == "all_to_all":
        return all_to_all(p, n, link)
    return point_to_point(n, link)


def collective_seconds(op: str, fabric: Fabric, n: float, *, algorithm: str = "ring") -> float:
    """Seconds of one `op` on an `n`-byte buffer over `fabric`: flat inside a node; across nodes NCCL's flat ring, or
    the hierarchical tree (a partly filled last node counts as a whole one)."""
    if op not in OPS or algorithm not in ALGORITHMS:
        raise InvalidInputError(f"unknown collective {op!r} ({algorithm!r}); expected one of {', '.join(OPS)}.")
    g, nodes = min(fabric.per_node, fabric.ranks), fabric.nodes
    if nodes == 1:
        return _flat(op, fabric.ranks, n, fabric.intra, algorithm)
    if fabric.inter is None:
        raise InvalidInputError(f"a group of {fabric.ranks} GPUs spans {nodes} nodes; no network figure.")
    inter = fabric.inter
    if op == "p2p":
        return point_to_point(n, inter)
    if op == "all_to_all":  # the node's own ranks over the intra link, every other node's over the network
        p = fabric.ranks
        return ((g - 1) * fabric.intra.latency_s + (g - 1) / p * n / fabric.intra.bytes_per_s
                + (p - g) * inter.latency_s + (p - g) / p * n / inter.bytes_per_s)
    if algorithm == "ring" or op != "all_reduce":  # NCCL runs reduce-scatter and all-gather as rings
        return ring_across_nodes(op, fabric.ranks, g, n, fabric.intra, inter)
    inside = ring_reduce_scatter(g, n, fabric.intra)
    return tree_all_reduce(nodes, n / g, inter) + 2 * inside


def ring_across_nodes(op: str, p: int, g: int, n: float, intra: Link, inter: Link) -> float:
    """NCCL's flat ring over `p` ranks, `g` per node (NCCL_RING): its (p-1)/p · n bytes per pass (twice for an
    all-reduce) at the bus bandwidth min(intra, g · network), and its steps' α, those crossing a node boundary at the
    network's."""
    nodes = math.ceil(p / g)
    passes = 2 if op == "all_reduce" else 1
    bus = g * inter.bytes_per_s if g == 1 else min(intra.bytes_per_s, g * inter.bytes_per_s)
    steps, crossing = passes * (p - 1), passes * (nodes - 1)
    latency = (steps - crossing) * intra.latency_s + crossing * inter.latency_s
    return latency + passes * (p - 1) / p * n / bus


SCHEDULES = {
    "gpipe": "Huang et al. 2019 (arXiv:1811.06965), GPipe: (p-1)/m",
    "1f1b": "Narayanan et al. 2021 (arXiv:2104.04473) 2.2.1, PipeDream-Flush: (p-1)/m",
    "interleaved": "Narayanan et al. 2021 2.2.2, v model chunks per GPU: (p-1)/(m·v)",
    "zb-h1": "Qi et al. 2023 (arXiv:2401.10241) 3, ZB-H1: a third of 1F1B's bubble (equal forward, input-gradient "
             "and weight-gradient times)",
}
"""Each pipeline schedule's bubble, as its paper states it (p stages, m micro-batches)."""


def pipeline_bubble(schedule: str, stages: int, micro_batches: int, chunks: int = 1) -> float:
    """The bubble of `schedule` over `stages` stages, `micro_batches` per step, `chunks` per GPU (interleaved): its
    idle time over the ideal compute time of the step (SCHEDULES)."""
    if schedule not in SCHEDULES:
        raise InvalidInputError(f"unknown pipeline schedule {schedule!r}; expected one of {', '.join(SCHEDULES)}.")
    if stages < 1 or micro_batches < 1 or chunks < 1:
        raise InvalidInputError("pipeline stages, micro-batches and chunks must be positive.")
    base = (stages - 1) / micro_batches
    if schedule == "interleaved":
        return base / chunks
    return base / 3 if schedule == "zb-h1" else base
