"""NVMe offload (DeepSpeed ZeRO-Infinity, offload_device nvme): the flag and the config keys that set it, the NVMe
and pinned host bytes of its swap buffers, a machine whose NVMe is too small, and the NVMe terms of the step time."""

from __future__ import annotations

import json

import pytest

from hfmem.cli.main import run
from hfmem.compute.flops import TrainingFlops
from hfmem.compute.roofline import machine, offload_transfers, step_time
from hfmem.configs import read_config
from hfmem.errors import InvalidInputError
from hfmem.hardware.gpus import find_gpu
from hfmem.hardware.specs import gpu_specs
from hfmem.memory.record import cells

NVME = ("--zero", "3", "--offload-optimizer", "--offload-params", "--offload-device", "nvme")
"""ZeRO-Infinity with both offloads on NVMe."""


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))


def _report(capsys, *args: str) -> dict:
    capsys.readouterr()
    code = run([*args, "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def _gpt2(capsys, *args: str) -> dict:
    """gpt2's full fine-tune estimate on a T4 with `args`."""
    return next(iter(_report(capsys, "example:gpt2", "-m", "full", "-g", "t4", *args)["estimates"].values()))


def test_deepspeed_and_accelerate_configs_set_the_device_and_the_swap_sizes(tmp_path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {
        "stage": 3, "sub_group_size": 5e8,
        "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 6, "pipeline_read": True},
        "offload_param": {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 3, "buffer_size": 2e8,
                          "max_in_cpu": 0}}, "aio": {"block_size": 1048576}}))
    config = read_config(ds)
    assert {k: config.values[k] for k in ("offload_optimizer", "offload_params", "offload_device",
                                           "optimizer_swap_buffers", "sub_group_size", "param_swap_buffers",
                                           "param_swap_buffer_size", "param_max_in_cpu")} == {
        "offload_optimizer": True, "offload_params": True, "offload_device": "nvme", "optimizer_swap_buffers": 6,
        "sub_group_size": 500_000_000, "param_swap_buffers": 3, "param_swap_buffer_size": 200_000_000,
        "param_max_in_cpu": 0}
    assert config.unknown == ()
    assert config.unmodelled == ("zero_optimization.offload_optimizer.pipeline_read",)  # overlap: not timed
    mixed = tmp_path / "mixed.json"  # one offload_device holds both: the parameters' other device is unmodelled
    mixed.write_text(json.dumps({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"},
                                                       "offload_param": {"device": "cpu"}}}))
    config = read_config(mixed)
    assert config.values["offload_device"] == "nvme"
    assert config.unmodelled == ("zero_optimization.offload_param.device",)
    for device in ("cpu", "nvme"):  # ZeRO-2 offloads to host RAM whatever the device
        two = tmp_path / f"{device}.json"
        two.write_text(json.dumps({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": device}}}))
        assert read_config(two).values["offload_device"] == "cpu"
    acc = tmp_path / "accelerate.yaml"
    acc.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
                   "  zero_stage: 3\n  offload_optimizer_device: nvme\n  offload_optimizer_nvme_path: /nvme\n"
                   "  offload_param_device: nvme\n  offload_param_nvme_path: /nvme\n")
    config = read_config(acc)
    assert (config.values["offload_device"], config.values["offload_params"]) == ("nvme", True)
    assert config.sources["offload_device"].endswith("deepspeed_config.offload_optimizer_device")


def test_the_flag_is_checked_in_one_line(capsys) -> None:
    for bad in (("--offload-device", "disk"), ("--zero", "2", "--offload-optimizer", "--offload-device", "nvme")):
        capsys.readouterr()
        assert run(["example:gpt2", "-m", "full", "-g", "t4", *bad]) != 0
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "offload_device nvme needs zero3" in err


def test_nvme_holds_the_states_and_host_ram_the_swap_buffers(capsys) -> None:
    """gpt2 (124M) full on one GPU: fp32 masters, Adam's two moments and fp32 gradient partitions (16 bytes a
    parameter) go to NVMe; host RAM keeps 4 fp32 optimizer swap buffers of the whole (sub-1e9) shard, the bf16
    weights (below max_in_cpu) and 5 parameter buffers of 1e8 bf16 elements."""
    cpu = _gpt2(capsys, *NVME[:-1], "cpu")
    nvme = _gpt2(capsys, *NVME)
    n = nvme["parameters"]["trainable"]
    assert cpu["per_gpu_bytes"].get("nvme_per_node", 0) == 0
    assert nvme["per_gpu_bytes"]["nvme_per_node"] == pytest.approx(16 * n, abs=4)
    assert nvme["cpu_bytes"] == pytest.approx(4 * n * 4 + 2 * n + 5 * 1e8 * 2, abs=4)
    assert nvme["per_gpu_bytes"]["total"] == cpu["per_gpu_bytes"]["total"]  # the GPU holds the same
    # parameters beyond max_in_cpu go to NVMe too; a smaller sub-group shrinks the optimizer's buffers: a sub-group
    # closes at the first parameter that reaches sub_group_size, so at most that and the largest parameter (the
    # embedding), down to the largest parameter alone where each parameter is a sub-group of its own
    largest = nvme["parameters"]["largest_trainable"]
    swapped = _gpt2(capsys, *NVME, "--param-max-in-cpu", "0", "--sub-group-size", "5e7")
    assert swapped["per_gpu_bytes"]["nvme_per_node"] == pytest.approx(18 * n, abs=4)
    assert swapped["cpu_bytes"] == pytest.approx(4 * (5e7 + largest) * 4 + 5 * 1e8 * 2, abs=4)
    each = _gpt2(capsys, *NVME, "--param-max-in-cpu", "0", "--sub-group-size", "0")
    assert each["cpu_bytes"] == pytest.approx(4 * largest * 4 + 5 * 1e8 * 2, abs=4)
    # every rank of a machine writes its shard to the machine's NVMe
    two = _gpt2(capsys, *NVME, "--num-gpus", "2")
    assert two["per_gpu_bytes"]["nvme_per_node"] == pytest.approx(16 * n, rel=1e-3)


def test_a_machine_short_of_nvme_does_not_fit_and_says_why(capsys) -> None:
    asked = cells(_report(capsys, "example:gpt2", "-m", "full", "-g", "t4", *NVME, "--nvme-gib", "1"))[0]
    assert asked["verdict"] != "fits" and asked["short_of"].startswith("NVMe: 1.9 GiB per machine needed")
    # Llama-2-70B full on a T4: host RAM (384 GiB) cannot take ZeRO-Infinity's 1.1 TB, the g4dn.metal's NVMe
    # (2 x 900 GB) can: unasked, the cell asks for GPUs and its shortfall says NVMe would hold it; asked
    # (--offload-device nvme), the cell suggests ZeRO-Infinity on NVMe, untimed without an NVMe bandwidth
    unasked = cells(_report(capsys, "example:Llama-2-70b-hf", "-m", "full", "-g", "t4"))[0]
    assert unasked["verdict"] == "gpus" and unasked["host_ram_short"]["nvme"]["fits"]
    assert round(unasked["host_ram_short"]["nvme"]["needed_gib"]) == 1154
    t4 = cells(_report(capsys, "example:Llama-2-70b-hf", "-m", "full", "-g", "t4", "--offload-device", "nvme"))[0]
    assert (t4["verdict"], t4["advice"]["mitigation"], t4["host_ram_short"]) == ("change", "zero3_nvme", None)
    assert t4["advice"]["settings_changes"]["offload_device"] == "nvme"
    # the suggestion states what it needs of the machine: 1,154 GiB of NVMe, 128 GiB of RAM (the load-time copy)
    assert round(t4["advice"]["nvme_per_node_bytes"] / 2**30) == 1154
    assert round(t4["advice"]["host_per_node_bytes"] / 2**30) == 128
    roomy = cells(_report(capsys, "example:Llama-2-70b-hf", "-m", "full", "-g", "t4", "--host-ram-gib", "2048"))[0]
    assert roomy["advice"]["mitigation"] == "zero3_offload_params" and "nvme_per_node_bytes" not in roomy["advice"]
    assert round(roomy["advice"]["host_per_node_bytes"] / 2**30) == 1156
    assert "--nvme-read-gbps" in t4["time"]["reason"]
    timed = cells(_report(capsys, "example:Llama-2-70b-hf", "-m", "full", "-g", "t4", "--offload-device", "nvme",
                          "--nvme-read-gbps", "4", "--nvme-write-gbps", "2"))[0]
    assert timed["time"]["seconds"] > 16 * 69e9 * (1 / 4e9 + 1 / 2e9)  # the optimizer's swaps alone
    assert timed["time"]["offload_gbps"] == {"pcie": 16.0, "nvme_read": 4.0, "nvme_write": 2.0}  # PCIe 3 x16, one way


def test_the_nvme_terms_are_bytes_over_the_machine_s_share_of_bandwidth() -> None:
    """8 GPUs share a machine's 20 GB/s read and 10 GB/s write: each reads its 1 GB of states at 2.5 GB/s and writes
    them back at 1.25 GB/s, exposed; its swapped parameters are read in forward and backward and written once."""
    node = machine(gpu_specs(find_gpu("h100")), "bf16", 8, nvme_gbps={"read": 20, "write": 10})
    transfers = offload_transfers(8, offload_optimizer=True, offload_params=True, parameter_bytes=8e9,
                                  trainable_bytes=8e9, gradient_bytes=8e9, nvme_optimizer_bytes=1e9,
                                  nvme_param_bytes=1e8)
    by_name = {t.name: t.seconds(node) for t in transfers}
    assert by_name["nvme_read_optimizer"] == pytest.approx(1e9 / 2.5e9)
    assert by_name["nvme_write_optimizer"] == pytest.approx(1e9 / 1.25e9)
    assert by_name["nvme_write_params"] == pytest.approx(1e8 / 1.25e9)
    flops = TrainingFlops(forward=2e9, backward_input=2e9, backward_weight=2e9, recompute=0.0, base_forward=2e9)
    step = step_time(flops, node, tokens_per_micro_batch=1, transfers=transfers)
    assert step.terms["exposed_nvme_read_optimizer"] == pytest.approx(0.4)
    assert step.terms["exposed_nvme_write_optimizer"] == pytest.approx(0.8)
    # the forward is far shorter than a parameter read: the read shows all but that window
    assert step.terms["exposed_nvme_read_params_forward"] == pytest.approx(0.04 - step.terms["compute_forward"])
    assert step.seconds > 0.4 + 0.8 + 0.08
    bare = machine(gpu_specs(find_gpu("h100")), "bf16", 8)
    read = next(t for t in transfers if t.name == "nvme_read_optimizer")
    with pytest.raises(InvalidInputError, match="--nvme-read-gbps"):
        read.seconds(bare)
