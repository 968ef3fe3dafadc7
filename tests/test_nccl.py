"""NCCL's device memory per GPU (hfmem.memory.nccl): the arithmetic from NCCL v2.21.5's cited defaults, the
communicators each layout uses, and where the term counts (nvidia-smi's total, never the allocator's peaks)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from tiny_models import reference_model

from hfmem.cli.main import run
from hfmem.hardware.gpus import find_gpu
from hfmem.memory.estimate import estimate
from hfmem.memory.fit import fit_one
from hfmem.memory.nccl import communicators, nccl_bytes, nvls_board, nvls_for
from hfmem.memory.record import estimates
from hfmem.memory.settings import Overhead, TrainingSettings
from hfmem.units import GIB

LLAMA3 = reference_model("meta-llama/Meta-Llama-3-8B")
KIB, MIB = 1 << 10, 1 << 20
CONNECTION = 512 * KIB + 4_915_200 + 4 * MIB
"""LL (8 lines x 512 threads x 8 steps x 16 B) + LL128 (120 x 640 x 8 x 8 B) + Simple (NCCL_BUFFSIZE) per channel."""


def _settings(nvls: bool | None = False, gib: float | None = None, **layout: object) -> TrainingSettings:
    return TrainingSettings(**layout, overhead=Overhead(nccl_gib=gib, nccl_nvls=nvls)).validated()


def test_one_ring_between_two_nvlink_gpus_is_24_channels_of_one_connection() -> None:
    assert nccl_bytes(_settings(num_gpus=2, sharding="ddp")) == 24 * CONNECTION  # 220.5 MiB
    # more than two ranks: each channel's tree adds one connection beside the ring's
    assert nccl_bytes(_settings(num_gpus=8, sharding="ddp")) == 24 * 2 * CONNECTION


def test_nvls_on_an_8_gpu_h100_node_adds_a_head_per_gpu() -> None:
    h100, a100 = find_gpu("h100"), find_gpu("a100")
    assert nvls_board(h100) and not nvls_board(a100) and not nvls_board(find_gpu("rtx 3090"))
    on_h100 = nvls_for(_settings(nvls=None, num_gpus=8, sharding="ddp"), (h100,))
    heads = 8 * 16 * 2 * (128 * KIB * 8 + 2 * MIB)  # 8 heads x 16 channels x 2 x (chunk x NCCL_STEPS + 2 MiB)
    assert on_h100.overhead.nccl_nvls and nccl_bytes(on_h100) == 24 * 2 * CONNECTION + heads == 1209 * MIB
    on_a100 = nvls_for(_settings(nvls=None, num_gpus=8, sharding="ddp"), (a100,))
    assert nccl_bytes(on_a100) == 24 * 2 * CONNECTION
    assert nvls_for(_settings(nvls=None, num_gpus=8), (h100, a100)).overhead.nccl_nvls is None  # the GPUs disagree
    # two GPUs of a node get no NVLS (nvls.cc: NVLS needs more than 2)
    assert nccl_bytes(_settings(nvls=True, num_gpus=2, sharding="ddp")) == 24 * CONNECTION


def test_pipeline_peers_across_nodes_use_two_p2p_channels_each() -> None:
    s = _settings(num_gpus=32, tp=8, pp=4, sharding="zero1")
    groups = {(c.size, c.stride, c.peers) for c in communicators(s) if c.size > 1}
    assert groups == {(8, 1, 0), (4, 8, 2)}  # TP inside a node; PP's stages a node apart, two neighbours
    pp = 24 * 2 * CONNECTION + 2 * 2 * CONNECTION
    assert nccl_bytes(s) == 24 * 2 * CONNECTION + pp
    # EP's all-to-all inside a node: each of the 7 peers on nextPow2(24) = 32 p2p channels
    ep = _settings(num_gpus=8, ep=8, sharding="zero1")
    assert nccl_bytes(ep) == 24 * 2 * CONNECTION + (24 * 2 + 7 * 32) * CONNECTION


def test_megatron_groups_add_the_world_and_the_model_parallel_communicators() -> None:
    """Megatron-LM's world group (pretrain's start-time all-reduce) and, without the distributed optimizer, its
    model-parallel group (found-inf all-reduce, gradient norm) are communicators of their own beside the layout's."""
    tp8 = _settings(num_gpus=8, tp=8, sharding="ddp")
    assert nccl_bytes(tp8) == 24 * 2 * CONNECTION  # the TP group; the DP group is one rank
    assert nccl_bytes(replace(tp8, nccl_groups="megatron")) == 3 * 24 * 2 * CONNECTION
    dp8 = _settings(num_gpus=8, sharding="ddp", nccl_groups="megatron")
    assert nccl_bytes(dp8) == 2 * 24 * 2 * CONNECTION  # DP and world: the model-parallel group is one rank
    pp = _settings(num_gpus=32, tp=8, pp=4, sharding="ddp", nccl_groups="megatron")
    assert [(c.size, c.stride) for c in communicators(pp)[-2:]] == [(32, 1), (32, 1)]
    stages = replace(pp, tp=1)  # the model-parallel group is the 4 stages, a node apart: no rank shares a node
    assert [(c.size, c.stride) for c in communicators(stages)[-2:]] == [(32, 1), (4, 8)]
    distributed = replace(pp, sharding="zero1")
    assert [c.size for c in communicators(distributed)][-1:] == [32] and len(communicators(distributed)) == 7


def test_one_gpu_has_none_and_the_setting_replaces_or_switches_it_off() -> None:
    assert nccl_bytes(_settings(num_gpus=1)) == nccl_bytes(_settings(gib=3.0, num_gpus=1)) == 0
    assert nccl_bytes(_settings(gib=3.0, num_gpus=8, sharding="ddp")) == 3 * GIB
    assert nccl_bytes(_settings(gib=0.0, nvls=True, num_gpus=8, sharding="ddp")) == 0


def test_nvidia_smi_total_includes_nccl_and_the_allocator_peaks_do_not() -> None:
    model = LLAMA3
    counted = estimate(*model, _settings(nvls=True, num_gpus=8, sharding="zero3")).per_gpu_bytes
    off = estimate(*model, _settings(gib=0.0, num_gpus=8, sharding="zero3")).per_gpu_bytes
    assert counted.nccl == 1209 * MIB and off.nccl == 0
    assert counted.allocated_peak == off.allocated_peak and counted.reserved_peak == off.reserved_peak
    added = (counted.total - off.total, counted.required - off.required, counted.overhead - off.overhead)
    assert added == (counted.nccl,) * 3


def test_the_fit_verdict_counts_it_on_the_cells_gpu() -> None:
    model = LLAMA3
    s = _settings(nvls=None, num_gpus=8, sharding="zero3")
    h100 = find_gpu("h100")
    need = fit_one(*model, s, h100, "full").asked
    assert need["per_gpu_bytes"]["nccl"] == 1209 * MIB  # the cell resolves NVLS from its GPU
    without = need["required_bytes"] - need["per_gpu_bytes"]["nccl"]
    card = replace(h100, usable_gib=(without + need["required_bytes"]) / 2 / GIB)
    assert not fit_one(*model, s, card, "full").fits  # fits without NCCL's buffers, not with them


@pytest.mark.parametrize(("args", "nccl"), [(("--nccl-gib", "2"), 2 * GIB), (("--nccl-gib", "0"), 0),
                                            (("--no-nccl-nvls",), 24 * 2 * CONNECTION), ((), 1209 * MIB)])
def test_the_flags_reach_the_json(capsys, tmp_path, monkeypatch, args: tuple[str, ...], nccl: int) -> None:
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path))
    code = run(["example:Meta-Llama-3-8B", "-m", "lora", "-g", "h100", "--num-gpus", "8", "--zero", "ddp",
                "--format", "json", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    (est,) = estimates(json.loads(out))
    assert est["per_gpu_bytes"]["nccl"] == nccl


def test_a_negative_figure_is_a_one_line_error(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path))
    code = run(["example:Meta-Llama-3-8B", "--nccl-gib", "-1"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and "nccl" in err.lower() and "Traceback" not in err
