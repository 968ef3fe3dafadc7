"""The roofline's arithmetic on cases worked by hand from the vendors' datasheet figures, its monotonicity, and the
catalogue's vendor specs: every figure is null or names its source."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from hfmem.compute.flops import TrainingFlops
from hfmem.compute.roofline import (
    DDP_BUCKET_BYTES,
    DEFAULT_HFU,
    HFU_BY_STACK,
    SHARDINGS,
    UTILISATION_SOURCES,
    Traffic,
    data_parallel_transfers,
    hfu_for,
    hbm_traffic,
    machine,
    offload_transfers,
    step_time,
    weight_passes,
)
from hfmem.constants import HFU_STACKS
from hfmem.errors import InvalidInputError
from hfmem.frameworks import profile
from hfmem.hardware.gpus import catalogue, find_gpu, parse_gpu_spec
from hfmem.hardware.specs import gpu_specs
from hfmem.memory.settings import SHARDINGS as SETTING_SHARDINGS

GPUS_JSON = Path(__file__).resolve().parent.parent / "hfmem" / "hardware" / "gpus.json"
FIGURES = ("bf16_tflops", "fp16_tflops", "fp8_tflops", "fp4_tflops", "memory_gbps", "link_gbps", "link_gpus", "pcie_gen")

# From the vendor pages, typed here by hand: H100 SXM "BFLOAT16 Tensor Core 1,979 teraFLOPS*" (* with sparsity),
# "GPU memory bandwidth 3.35TB/s", "NVLink: 900GB/s"; L4 "BF16 242 teraFLOPS*", "300GB/s", PCIe Gen4 x16 64GB/s.
H100_BF16 = 1979e12 / 2
H100_HBM = 3.35e12
H100_NVLINK_ONE_WAY = 900e9 / 2
L4_BF16, L4_HBM, L4_PCIE_ONE_WAY = 242e12 / 2, 300e9, 64e9 / 2
NVLINK_STEP, NETWORK_STEP = 3.4e-6, 14.0e-6
"""NCCL's per-step latency of a ring over NVLink and over the network (src/graph/tuning.cc, hwLat, Ring Simple)."""

PARAMS = 7e9
DENSE = TrainingFlops(forward=2 * PARAMS, backward_input=2 * PARAMS, backward_weight=2 * PARAMS, recompute=0.0,
                      base_forward=2 * PARAMS)
"""6N per token: the dense-transformer approximation of a 7B model, enough for the arithmetic."""


def test_every_vendor_figure_is_null_or_sourced() -> None:
    gpus = json.loads(GPUS_JSON.read_text())["gpus"]
    assert {g["name"] for g in gpus} == {g.name for g in catalogue()}
    for gpu in gpus:
        specs = gpu["specs"]
        for name in FIGURES:
            value, source = specs[name], specs["sources"].get(name)
            if value is None:
                assert source is None, f"{gpu['name']} {name}: a source for a missing figure"
            else:
                assert value > 0 and isinstance(source, str) and source.startswith("https://"), f"{gpu['name']} {name}"
        assert set(specs["sources"]) <= set(FIGURES)


def test_the_catalogue_reads_into_specs() -> None:
    h100 = gpu_specs(find_gpu("h100"))
    assert h100.peak_flops("bf16") == H100_BF16 and h100.memory_gbps * 1e9 == H100_HBM and h100.pcie_gbps == 128
    assert gpu_specs(find_gpu("t4")).peak_flops("bf16") is None  # Turing has no bf16 tensor cores
    assert gpu_specs(parse_gpu_spec("mine=40")).tflops == {}


def test_the_switches_are_the_settings_values() -> None:
    assert SHARDINGS == SETTING_SHARDINGS


def test_compute_bound_step_by_hand() -> None:
    """One H100, 4096 tokens, 6N FLOPs per token at the default utilisation: time = FLOPs / (HFU x peak)."""
    node = machine(gpu_specs(find_gpu("h100")), "bf16", 1)
    step = step_time(DENSE, node, tokens_per_micro_batch=4096)
    expected = 4096 * 6 * PARAMS / (DEFAULT_HFU * H100_BF16)
    assert step.seconds == pytest.approx(expected) and step.bound == "compute"
    assert step.tokens_per_s == pytest.approx(4096 / expected) and step.mfu == pytest.approx(DEFAULT_HFU)


def test_memory_bound_step_by_hand() -> None:
    """One token per micro-batch on an L4: reading 14 GB of bf16 weights twice outlasts the matmuls."""
    node = machine(gpu_specs(find_gpu("l4")), "bf16", 1)
    traffic = hbm_traffic(weight_bytes=2 * PARAMS, passes=weight_passes("off"), gradient_bytes=0, optimizer_bytes=0)
    step = step_time(DENSE, node, tokens_per_micro_batch=1, traffic=traffic)
    assert step.bound == "memory" and step.seconds == pytest.approx(2 * 2 * PARAMS / L4_HBM)
    assert step.terms["compute_forward"] == pytest.approx(2 * PARAMS / (DEFAULT_HFU * L4_BF16))


def test_ddp_all_reduce_shows_beyond_the_backward() -> None:
    """8 H100 over NVLink: 2·7/8 of 14 GB of bf16 gradients at 450 GB/s, in 25 MiB buckets of 14 ring steps each,
    hidden behind the backward's 4N FLOPs."""
    node = machine(gpu_specs(find_gpu("h100")), "bf16", 8)
    transfers = data_parallel_transfers("ddp", 8, parameter_bytes=2 * PARAMS, trainable_bytes=2 * PARAMS,
                                        gradient_bytes=2 * PARAMS)
    step = step_time(DENSE, node, tokens_per_micro_batch=512, num_gpus=8, hfu=0.5, transfers=transfers)
    buckets = math.ceil(2 * PARAMS / DDP_BUCKET_BYTES)
    all_reduce = 2 * 7 / 8 * 2 * PARAMS / H100_NVLINK_ONE_WAY + buckets * 2 * 7 * NVLINK_STEP
    backward = 512 * 4 * PARAMS / (0.5 * H100_BF16)
    assert step.terms["exposed_ddp_all_reduce"] == pytest.approx(all_reduce - backward)
    assert step.seconds == pytest.approx(512 * 6 * PARAMS / (0.5 * H100_BF16) + all_reduce - backward)
    long = step_time(DENSE, node, tokens_per_micro_batch=8192, num_gpus=8, hfu=0.5, transfers=transfers)
    last = 2 * 7 / 8 * DDP_BUCKET_BYTES / H100_NVLINK_ONE_WAY + 2 * 7 * NVLINK_STEP
    assert long.terms["exposed_ddp_all_reduce"] == pytest.approx(last)
    assert long.tokens_per_s == pytest.approx(8 * 8192 / long.seconds)


def test_zero3_gathers_every_micro_batch() -> None:
    """ZeRO-3 on 8 H100, 4 micro-batches of 256 tokens: each gathers the weights twice and reduce-scatters once,
    unit by unit (32 units: each collective pays its 7 ring steps)."""
    node = machine(gpu_specs(find_gpu("h100")), "bf16", 8)
    transfers = data_parallel_transfers("zero3", 8, parameter_bytes=2 * PARAMS, trainable_bytes=2 * PARAMS,
                                        gradient_bytes=2 * PARAMS, units=32)
    step = step_time(DENSE, node, tokens_per_micro_batch=256, micro_batches=4, num_gpus=8, hfu=0.5, transfers=transfers)
    piece = 7 / 8 * 2 * PARAMS / H100_NVLINK_ONE_WAY + 32 * 7 * NVLINK_STEP
    forward, backward = 256 * 2 * PARAMS / (0.5 * H100_BF16), 256 * 4 * PARAMS / (0.5 * H100_BF16)
    expected = 4 * (forward + backward + max(0, piece - forward) + max(0, 2 * piece - backward))
    assert step.seconds == pytest.approx(expected)


def test_zero3_across_machines_is_one_ring() -> None:
    """ZeRO-3 on 32 H100 in four DGX H100s at 400 Gb/s per GPU, 40 units: each unit's gather is NCCL's flat ring,
    31/32 of it at min(NVLink, 8 x 50 GB/s), 28 steps at NVLink's α and 3 at the network's; the first unit's gather
    and the last one's reduce-scatter show whatever the window; a slower network shows more."""
    node = machine(gpu_specs(find_gpu("h100")), "bf16", 32, network_gbps=400)
    transfers = data_parallel_transfers("zero3", 32, parameter_bytes=2 * PARAMS, trainable_bytes=2 * PARAMS,
                                        gradient_bytes=2 * PARAMS, units=40)

    def unit(n: float) -> float:  # one unit's gather or reduce-scatter of n bytes
        return 31 / 32 * n / min(H100_NVLINK_ONE_WAY, 8 * 50e9) + 28 * NVLINK_STEP + 3 * NETWORK_STEP

    gather, first = 40 * unit(2 * PARAMS / 40), unit(2 * PARAMS / 40)
    for tokens in (64, 4096):
        step = step_time(DENSE, node, tokens_per_micro_batch=tokens, num_gpus=32, hfu=0.5, transfers=transfers)
        forward, backward = tokens * 2 * PARAMS / (0.5 * H100_BF16), tokens * 4 * PARAMS / (0.5 * H100_BF16)
        shown_forward, shown_backward = max(first, gather - forward), max(first, 2 * gather - backward)
        assert step.terms["exposed_all_gather_forward"] == pytest.approx(shown_forward)
        assert step.seconds == pytest.approx(forward + backward + shown_forward + shown_backward)
    slow = machine(gpu_specs(find_gpu("h100")), "bf16", 32, network_gbps=100)
    assert step_time(DENSE, slow, tokens_per_micro_batch=64, num_gpus=32, hfu=0.5,
                     transfers=transfers).seconds > step_time(DENSE, node, tokens_per_micro_batch=64, num_gpus=32,
                                                              hfu=0.5, transfers=transfers).seconds


def test_the_terms_add_up() -> None:
    node = machine(gpu_specs(find_gpu("a100")), "bf16", 4)
    transfers = data_parallel_transfers("zero2", 4, parameter_bytes=1e9, trainable_bytes=1e9, gradient_bytes=1e9)
    transfers += offload_transfers(4, offload_optimizer=True, offload_params=False, parameter_bytes=1e9,
                                   trainable_bytes=1e9, gradient_bytes=1e9)
    traffic = hbm_traffic(weight_bytes=1e9, passes=3, gradient_bytes=1e9, optimizer_bytes=8e9, activation_bytes=5e9)
    step = step_time(DENSE, node, tokens_per_micro_batch=2048, micro_batches=2, num_gpus=4, traffic=traffic,
                     transfers=transfers)
    exposed = sum(v for k, v in step.terms.items() if k.startswith("exposed_"))
    assert step.seconds == pytest.approx(step.terms["roofline"] + step.terms["optimizer_traffic"] + exposed)
    assert step.terms["optimizer_traffic"] == pytest.approx(16e9 / 2039e9)  # A100 80GB SXM: 2,039 GB/s
    assert {"exposed_zero_reduce_scatter", "exposed_offload_weights_to_gpu"} <= set(step.terms)


def test_qlora_dequantisation_is_traffic_per_pass() -> None:
    plain = hbm_traffic(weight_bytes=3.6e9, passes=weight_passes("full"), gradient_bytes=0, optimizer_bytes=0)
    qlora = hbm_traffic(weight_bytes=3.6e9, passes=weight_passes("full"), gradient_bytes=0, optimizer_bytes=0,
                        dequantised_weights=PARAMS)
    assert qlora.per_micro_batch["dequantisation"] == 3 * 2 * 2 * PARAMS
    assert sum(qlora.per_micro_batch.values()) > sum(plain.per_micro_batch.values())


def test_monotone() -> None:
    node = machine(gpu_specs(find_gpu("h100")), "bf16", 8)
    transfers = data_parallel_transfers("zero3", 8, parameter_bytes=2e9, trainable_bytes=2e9, gradient_bytes=2e9)
    traffic = Traffic({"weights": 4e9}, {"optimizer": 3e10})

    def seconds(**kw) -> float:
        args = {"tokens_per_micro_batch": 1024, "micro_batches": 2, "num_gpus": 8, "hfu": 0.4, "traffic": traffic,
                "transfers": transfers} | kw
        return step_time(DENSE, node, **args).seconds

    for key, values in (("tokens_per_micro_batch", [1, 64, 1024, 8192]), ("micro_batches", [1, 2, 8])):
        times = [seconds(**{key: v}) for v in values]
        assert times == sorted(times) and times[0] < times[-1], key
    times = [seconds(hfu=h) for h in (0.2, 0.4, 0.8)]
    assert times == sorted(times, reverse=True)
    ddp = [data_parallel_transfers("ddp", n, parameter_bytes=1, trainable_bytes=1, gradient_bytes=1e9)[0].seconds(
        machine(gpu_specs(find_gpu("h100")), "bf16", n, network_gbps=400)) for n in (2, 4, 8, 64)]
    assert ddp == sorted(ddp) and ddp[-1] < 2 * 2e9 / 50e9  # under two passes of the buffer over the network
    across = data_parallel_transfers("zero3", 16, parameter_bytes=2e9, trainable_bytes=2e9, gradient_bytes=2e9)
    slow = step_time(DENSE, machine(gpu_specs(find_gpu("h100")), "bf16", 16, network_gbps=10),
                     tokens_per_micro_batch=1024, num_gpus=16, transfers=across).seconds
    fast = step_time(DENSE, machine(gpu_specs(find_gpu("h100")), "bf16", 16, network_gbps=400),
                     tokens_per_micro_batch=1024, num_gpus=16, transfers=across).seconds
    assert slow > fast


def test_links_follow_the_gpu_count() -> None:
    """An NVLink bridge joins two RTX 3090s; four talk over PCIe 4.0; beyond a node the network is needed."""
    rtx = gpu_specs(find_gpu("3090"))
    assert machine(rtx, "bf16", 2).intra.bytes_per_s == 112.5e9 / 2
    assert machine(rtx, "bf16", 4).intra.bytes_per_s == 64e9 / 2 and machine(rtx, "bf16", 4).inter is None
    assert machine(gpu_specs(find_gpu("l4")), "bf16", 1).pcie_bytes_per_s == L4_PCIE_ONE_WAY
    h100 = machine(gpu_specs(find_gpu("h100")), "bf16", 64, network_gbps=400)
    assert h100.intra.bytes_per_s == H100_NVLINK_ONE_WAY and h100.inter.bytes_per_s == 50e9
    assert h100.fabric(64).per_node == 8 and h100.fabric(8, stride=8).per_node == 1  # a group one per machine
    with pytest.raises(InvalidInputError, match="--network-gbps"):
        machine(gpu_specs(find_gpu("h100")), "bf16", 64)


@pytest.mark.parametrize("call", [
    lambda: machine(gpu_specs(find_gpu("t4")), "bf16", 1),
    lambda: machine(gpu_specs(find_gpu("910b")), "fp16", 1),
    lambda: data_parallel_transfers("zero4", 2, parameter_bytes=1, trainable_bytes=1, gradient_bytes=1),
    lambda: weight_passes("sometimes"),
    lambda: step_time(DENSE, machine(gpu_specs(find_gpu("h100")), "bf16", 1), tokens_per_micro_batch=1, hfu=1.5),
    lambda: machine(gpu_specs(find_gpu("5090")), "bf16", 1),
], ids=["no-bf16-on-t4", "no-figures-for-910b", "bad-sharding", "bad-checkpointing", "hfu-above-1", "no-5090-peak"])
def test_bad_inputs_are_one_line_errors(call) -> None:
    with pytest.raises(InvalidInputError) as err:
        call()
    assert "\n" not in str(err.value)


def test_the_default_utilisation_is_the_sources_median() -> None:
    assert all(s.url.startswith("https://arxiv.org/") and 0 < s.hfu <= 1 for s in UTILISATION_SOURCES)
    ordered = sorted(s.hfu for s in UTILISATION_SOURCES)
    assert len(ordered) == 7 and DEFAULT_HFU == round(ordered[3], 3)


def test_each_architecture_is_timed_at_its_own_sources_median() -> None:
    """Hopper at Llama 3's H100 figures (430, 400 and 380 TFLOPs of 989.5), Ampere at Megatron-LM's, Volta at
    Megatron-LM 2019's 15.1 PFLOP/s on 512 V100 of a 130 TFLOP/s peak; a GPU of an architecture no source measured
    (Ada, Blackwell, CDNA...) at the median of all."""
    assert hfu_for("hopper") == round(400 / 989.5, 3) == 0.404
    assert hfu_for("volta") == round(15.1e15 / 512 / 130e12, 3) == hfu_for(find_gpu("v100").arch)
    assert hfu_for("ampere") == round((0.421 * 4 / 3 + 0.52) / 2, 3)
    assert hfu_for("ada") == hfu_for(None) == DEFAULT_HFU
    assert hfu_for(find_gpu("h100").arch) < hfu_for(find_gpu("a100").arch)


def test_the_megatron_stack_is_timed_at_megatron_s_own_published_utilisation() -> None:
    """hfu_stack megatron: on Hopper the median of Megatron-LM's README table (9 H100 runs, 408.8-489.1 TFLOP/s of
    989.5; the 70B-to-462B rows' 432.8 and 459.6 straddle it), elsewhere its papers (the only sources there); the
    megatron and nemo profiles set it, the default pool is unchanged."""
    tflops = sorted((408.8, 465.9, 489.1, 459.6, 419.7, 420.5, 432.8, 474.4, 459.9))
    assert hfu_for("hopper", "megatron") == round(tflops[4] / 989.5, 3) == 0.464
    assert hfu_for("hopper") == 0.404 and hfu_for("ampere", "megatron") == hfu_for("ampere")
    assert hfu_for("ada", "megatron") == DEFAULT_HFU
    assert {p.values("full").get("hfu_stack") for p in (profile("megatron"), profile("nemo"))} == {"megatron"}
    assert profile("torchtitan").values("full").get("hfu_stack") is None


def test_every_stack_a_source_names_is_a_choice_of_the_setting() -> None:
    """The hfu_stack setting's choices (constants.HFU_STACKS) are "any" and exactly the stacks the sources tag."""
    assert {stack for stack, _ in HFU_BY_STACK} == set(HFU_STACKS) - {"any"}
