"""The collectives' α-β costs against their closed forms (Thakur, Rabenseifner and Gropp 2005; NCCL's tree), the
hierarchical form across machines, each pipeline schedule's bubble, the model-parallel transfers a layout sends,
and the catalogue's default machines: every figure null or sourced."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from hfmem.compute.collectives import (
    SCHEDULES,
    STEP_LATENCY_S,
    Fabric,
    Link,
    all_to_all,
    collective_seconds,
    pipeline_bubble,
    point_to_point,
    ring_all_reduce,
    ring_reduce_scatter,
    tree_all_reduce,
)
from hfmem.compute.flops import TrainingFlops
from hfmem.compute.roofline import layout_transfers, machine, step_time
from hfmem.errors import InvalidInputError
from hfmem.hardware.gpus import find_gpu, parse_gpu_spec
from hfmem.hardware.specs import gpu_specs, node_specs

GPUS_JSON = Path(__file__).resolve().parent.parent / "hfmem" / "hardware" / "gpus.json"
A, B = 5e-6, 25e9
"""α (seconds per step) and one direction's bandwidth (bytes/s) of a made-up link."""
LINK = Link(B, A)
NET = Link(50e9, 14e-6)
N = 3e9


@pytest.mark.parametrize("p", [2, 3, 8, 64])
def test_flat_collectives_are_their_closed_forms(p: int) -> None:
    assert ring_reduce_scatter(p, N, LINK) == pytest.approx((p - 1) * A + (p - 1) / p * N / B)
    assert ring_all_reduce(p, N, LINK) == pytest.approx(2 * (p - 1) * A + 2 * (p - 1) / p * N / B)
    assert tree_all_reduce(p, N, LINK) == pytest.approx(2 * math.ceil(math.log2(p)) * A + 2 * N / B)
    assert all_to_all(p, N, LINK) == pytest.approx((p - 1) * A + (p - 1) / p * N / B)
    assert point_to_point(N, LINK) == pytest.approx(A + N / B)
    one = Fabric(p, p, LINK)
    assert collective_seconds("all_gather", one, N) == ring_reduce_scatter(p, N, LINK)
    assert collective_seconds("all_reduce", one, N, algorithm="tree") == tree_all_reduce(p, N, LINK)


def test_one_rank_sends_nothing() -> None:
    assert ring_all_reduce(1, N, LINK) == tree_all_reduce(1, N, LINK) == ring_reduce_scatter(1, N, LINK) == 0


def test_the_tree_wins_on_latency_and_the_ring_on_bandwidth() -> None:
    """Small buffers on many ranks: 2·log2 p steps beat 2(p-1); large ones on few: the ring moves 2(p-1)/p < 2
    buffers."""
    assert tree_all_reduce(1024, 1e3, NET) < ring_all_reduce(1024, 1e3, NET)
    assert ring_all_reduce(16, 1e10, NET) < tree_all_reduce(16, 1e10, NET)


def test_across_machines_the_ring_is_flat_and_the_tree_hierarchical() -> None:
    """32 ranks in 4 machines of 8: NCCL's ring passes (p-1)/p of the buffer at min(intra, 8 x network), 3 of its
    31 steps (6 of 62 for an all-reduce) at the network's α; the tree reduces inside over LINK on the whole buffer
    and across over NET on an eighth of it."""
    fabric = Fabric(32, 8, LINK, NET)
    ring = 28 * A + 3 * NET.latency_s + 31 / 32 * N / min(B, 8 * NET.bytes_per_s)
    assert collective_seconds("reduce_scatter", fabric, N) == pytest.approx(ring)
    assert collective_seconds("all_gather", fabric, N) == pytest.approx(ring)
    assert collective_seconds("all_reduce", fabric, N) == pytest.approx(2 * ring)
    slow_net = Fabric(32, 8, LINK, Link(1e9, NET.latency_s))  # 8 x 1 GB/s < 25 GB/s: the network bounds the ring
    assert collective_seconds("all_gather", slow_net, N) == pytest.approx(
        28 * A + 3 * NET.latency_s + 31 / 32 * N / 8e9)
    inside = 7 * A + 7 / 8 * N / B
    tree = 2 * math.ceil(math.log2(4)) * NET.latency_s + 2 * (N / 8) / NET.bytes_per_s
    assert collective_seconds("all_reduce", fabric, N, algorithm="tree") == pytest.approx(2 * inside + tree)
    assert collective_seconds("all_gather", fabric, N, algorithm="tree") == pytest.approx(ring)  # no tree for it
    a2a = 7 * A + 7 / 32 * N / B + 24 * NET.latency_s + 24 / 32 * N / NET.bytes_per_s
    assert collective_seconds("all_to_all", fabric, N) == pytest.approx(a2a)
    assert collective_seconds("p2p", fabric, N) == pytest.approx(point_to_point(N, NET))
    assert collective_seconds("p2p", Fabric(2, 2, LINK, NET), N) == pytest.approx(point_to_point(N, LINK))


def test_one_gpu_per_machine_is_all_network() -> None:
    assert collective_seconds("all_reduce", Fabric(16, 1, LINK, NET), N) == pytest.approx(ring_all_reduce(16, N, NET))


def test_a_group_spanning_machines_needs_the_network() -> None:
    with pytest.raises(InvalidInputError, match="no network"):
        collective_seconds("all_reduce", Fabric(16, 8, LINK), N)
    with pytest.raises(InvalidInputError):
        collective_seconds("broadcast", Fabric(8, 8, LINK), N)


@pytest.mark.parametrize(("schedule", "chunks", "expected"), [
    ("gpipe", 1, 7 / 16), ("1f1b", 1, 7 / 16), ("interleaved", 4, 7 / 64), ("zb-h1", 1, 7 / 48),
])
def test_each_schedule_s_bubble(schedule: str, chunks: int, expected: float) -> None:
    """8 stages, 16 micro-batches: (p-1)/m, (p-1)/(m·v) interleaved over v chunks, a third of it for ZB-H1."""
    assert pipeline_bubble(schedule, 8, 16, chunks) == pytest.approx(expected)
    assert pipeline_bubble(schedule, 1, 16, chunks) == 0  # one stage idles never
    assert schedule in SCHEDULES


def test_more_micro_batches_shrink_the_bubble() -> None:
    bubbles = [pipeline_bubble("1f1b", 4, m) for m in (1, 4, 16, 64)]
    assert bubbles == sorted(bubbles, reverse=True) and bubbles[0] == 3


@pytest.mark.parametrize("call", [lambda: pipeline_bubble("dualpipe", 4, 8), lambda: pipeline_bubble("1f1b", 0, 8)])
def test_bad_pipelines_are_one_line_errors(call) -> None:
    with pytest.raises(InvalidInputError) as err:
        call()
    assert "\n" not in str(err.value)


def test_the_bubble_stretches_the_step() -> None:
    flops = TrainingFlops(forward=2e9, backward_input=2e9, backward_weight=2e9, recompute=0.0, base_forward=2e9)
    node = machine(gpu_specs(find_gpu("h100")), "bf16", 8)
    plain = step_time(flops, node, tokens_per_micro_batch=4096, micro_batches=16)
    bubbled = step_time(flops, node, tokens_per_micro_batch=4096, micro_batches=16,
                        bubble=pipeline_bubble("1f1b", 4, 16))
    assert bubbled.seconds == pytest.approx(plain.seconds * (1 + 3 / 16))
    assert bubbled.terms["pipeline_bubble"] == pytest.approx(plain.seconds * 3 / 16)


def test_a_layout_s_transfers_run_over_their_own_groups() -> None:
    """TP 8 inside a DGX H100 over NVLink, PP across machines over the network, each its closed form."""
    node = machine(gpu_specs(find_gpu("h100")), "bf16", 64, network_gbps=400)
    nvlink = Link(450e9, STEP_LATENCY_S["nvlink"])
    net = Link(50e9, STEP_LATENCY_S["network"])
    act = 4096 * 8192 * 2
    sent = {t.name: t for t in layout_transfers(dp=4, tp=8, pp=2, tp_bytes=act, tp_collectives=4 * 40,
                                                pp_bytes=act)}
    assert sent["tp_all_reduce"].seconds(node) == pytest.approx(160 * ring_all_reduce(8, act, nvlink))
    assert sent["pp_send_recv"].seconds(node) == pytest.approx(2 * point_to_point(act, net))
    sp = {t.name for t in layout_transfers(tp=8, sequence_parallel=True, tp_bytes=act, tp_collectives=4)}
    assert sp == {"tp_all_gather", "tp_reduce_scatter"}
    cp = {t.name: t for t in layout_transfers(tp=8, cp=2, cp_bytes=act)}
    assert cp["cp_ring_forward"].hidden_by == "forward" and cp["cp_ring_forward"].seconds(node) == pytest.approx(
        point_to_point(act, net))  # the ring's neighbour is 8 ranks away: the next machine
    ep = layout_transfers(ep=8, ep_bytes=act, ep_collectives=4)[0]
    assert ep.seconds(node) == pytest.approx(4 * all_to_all(8, act, nvlink))
    assert layout_transfers() == ()


def test_every_default_machine_figure_is_null_or_sourced() -> None:
    for gpu in json.loads(GPUS_JSON.read_text())["gpus"]:
        node = gpu.get("node")
        if node is None:
            continue
        for name in ("network_gbps", "host_ram_gib"):
            value, source = node[name], node["sources"].get(name)
            assert (value is None) == (source is None), f"{gpu['name']} {name}"
            assert value is None or value > 0 and source.startswith("https://"), f"{gpu['name']} {name}"
    dgx = node_specs(find_gpu("h100"))
    assert (dgx.server, dgx.network_gbps, dgx.host_ram_gib) == ("NVIDIA DGX H100", 400, 2048)
    assert node_specs(find_gpu("t4")).host_ram_gib == 384  # AWS g4dn.metal
    assert node_specs(parse_gpu_spec("mine=40")).host_ram_gib is None
