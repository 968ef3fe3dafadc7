"""Setups spanning machines through the CLI: timed at the GPU class's common server's network or --network-gbps, or
saying which input is missing; each GPU's cells held to its server's host RAM; the picks skip glacial setups and
ones short of host RAM; --max-gpus bounds the search."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from hfmem.cli.main import run
from hfmem.memory.record import cells, picks
from hfmem.reporting.picks import Candidate, fastest_and_cheapest


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))


def _report(capsys, model: str, *args: str) -> dict:
    capsys.readouterr()
    code = run([model, "--format", "json", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_a_setup_across_machines_is_timed_at_the_server_s_network(capsys) -> None:
    """Llama-2-70B full on H100 needs 19 GPUs: three DGX H100s at 400 Gb/s per GPU; a slower network is slower."""
    dgx = _report(capsys, "example:Llama-2-70b-hf", "-m", "full", "-g", "h100", "--tokens", "1e9")
    cell = cells(dgx)[0]
    assert cell["time"]["setup"] == "gpus" and cell["time"]["tokens_per_s"] > 0
    assert cell["time"]["cost_usd"] > 0 and dgx["nodes"]["by_gpu"]["H100 80GB"] == {
        "network_gbps": 400, "host_ram_gib": 2048, "nvme_gib": 28610, "server": "NVIDIA DGX H100"}
    fixed = _report(capsys, "example:Llama-2-70b-hf", "-m", "full", "-g", "h100", "--num-gpus", "64", "--zero", "3",
                    "--gradient-checkpointing", "full", "--tokens", "1e9")
    slow = _report(capsys, "example:Llama-2-70b-hf", "-m", "full", "-g", "h100", "--num-gpus", "64", "--zero", "3",
                   "--gradient-checkpointing", "full", "--tokens", "1e9", "--network-gbps", "10")
    fast, crawl = cells(fixed)[0]["time"], cells(slow)[0]["time"]
    assert cells(fixed)[0]["verdict"] == "fits" and fast["setup"] == "asked"
    assert crawl["tokens_per_s"] < fast["tokens_per_s"] and slow["nodes"]["given"] == ["network_gbps"]
    assert any(k.startswith("exposed_") and v > 0 for k, v in picks(slow)["fastest"]["time"]["terms"].items())


def test_a_gpu_without_a_network_figure_says_which_input_is_missing(capsys) -> None:
    """RTX 4090s have no datacenter network: 16 of them are two machines, untimed until --network-gbps says."""
    args = ("example:gpt2", "-m", "full", "-g", "4090", "--num-gpus", "16", "--zero", "3")
    missing = cells(_report(capsys, *args))[0]
    assert missing["verdict"] == "fits" and missing["time"]["seconds"] is None
    assert "RTX 4090 has no network figure: give --network-gbps" in missing["time"]["reason"]
    given = cells(_report(capsys, *args, "--network-gbps", "100"))[0]
    assert given["time"]["tokens_per_s"] > 0


def test_offload_beyond_the_servers_host_ram_does_not_fit(capsys) -> None:
    """Llama-2-70B full on one T4 offloads about 1.1 TB: more than the 384 GiB of an AWS g4dn.metal, unless
    --host-ram-gib says the machine has it; where its NVMe (--nvme-gib) cannot take it either, the cell says both
    and asks for GPUs instead."""
    default = _report(capsys, "example:Llama-2-70b-hf", "-m", "full", "-g", "t4", "--nvme-gib", "1000")
    cell = cells(default)[0]
    assert cell["verdict"] == "gpus" and default["nodes"]["by_gpu"]["T4"] == {
        "network_gbps": 12.5, "host_ram_gib": 384, "nvme_gib": 1000, "server": "AWS g4dn.metal"}
    assert cell["advice"]["kind"] == "gpus" and cell["advice"]["num_gpus"] > 8
    # data parallelism alone: every rank's own checkpoint copy would not fit the machine, rank 0's alone does
    assert cell["multi_gpu_with_checkpointing"]["model_loading"] == "rank0"
    short = cell["host_ram_short"]  # ZeRO-Infinity: what the ✗ would have taken
    assert (short["mitigation"], short["host_ram_gib"]) == ("zero3_offload_params", 384)
    assert 1024 < short["needed_gib"] < 1300
    assert short["nvme"]["nvme_gib"] == 1000 and 1000 < short["nvme"]["needed_gib"] < short["needed_gib"]
    assert run(["example:Llama-2-70b-hf", "-m", "full", "-g", "t4", "--nvme-gib", "1000", "--details"]) == 0
    assert ("host RAM short for offload: full ZeRO-Inf. 1,156 GiB/machine, on NVMe 1,154 GiB NVMe + 128 GiB "
            "RAM/machine (T4 384, 1,000 NVMe)") in " ".join(capsys.readouterr().out.split())
    offload = ("--zero", "3", "--offload-optimizer", "--offload-params")
    asked = cells(_report(capsys, "example:gpt2", "-m", "full", "-g", "t4", *offload, "--host-ram-gib", "1"))[0]
    assert asked["short_of"].startswith("host RAM: ")
    roomy = cells(_report(capsys, "example:Llama-2-70b-hf", "-m", "full", "-g", "t4", "--host-ram-gib", "2048"))[0]
    assert roomy["verdict"] == "change" and "offload" in roomy["advice"]["mitigation"]
    assert roomy["host_ram_short"] is None


def test_max_gpus_bounds_the_search(capsys) -> None:
    wide = cells(_report(capsys, "example:Llama-2-70b-hf", "-m", "full", "-g", "h100"))[0]
    # 20 while ZeRO-3 was taken to hold two 0.86B-parameter layers gathered; DeepSpeed's rules hold 1.12B elements
    assert wide["multi_gpu_with_checkpointing"]["num_gpus"] == 19
    narrow = cells(_report(capsys, "example:Llama-2-70b-hf", "-m", "full", "-g", "h100", "--max-gpus", "8"))[0]
    assert not narrow["multi_gpu_with_checkpointing"] and (narrow["multi_gpu"] or {}).get("num_gpus", 1) <= 8


def test_the_picks_skip_glacial_setups_and_ones_short_of_host_ram() -> None:
    """A 1-GPU offload at 1% of the fastest is cheapest by cost but no pick; the floor is per method; a setup
    needing host RAM its machine lacks is neither; at equal cost the quicker wins."""
    found = [Candidate("full", 1000, 500), Candidate("full", 10, 100), Candidate("full", 400, 300),
             Candidate("qlora", 50, 200)]
    assert fastest_and_cheapest(found) == {"fastest": 0, "cheapest": 1}
    assert fastest_and_cheapest(found, 0.1) == {"fastest": 0, "cheapest": 3}  # QLoRA is its method's fastest
    short = [replace(c, host_ok=i not in (3,)) for i, c in enumerate(found)]
    assert fastest_and_cheapest(short, 0.1) == {"fastest": 0, "cheapest": 2}
    short = [replace(c, host_ok=i == 1) for i, c in enumerate(found)]
    assert fastest_and_cheapest(short, 0.1) == {"fastest": 1, "cheapest": 1}
    assert fastest_and_cheapest([Candidate("full", 0.0)], 0.1) == {"fastest": None, "cheapest": None}
    tie = [Candidate("full", 100, 50, hours=2.0), Candidate("full", 200, 50, hours=1.0)]
    assert fastest_and_cheapest(tie)["cheapest"] == 1
    one_and_many = [Candidate("qlora", 1000, 58.0, num_gpus=1), Candidate("qlora", 120_000, 58.5, num_gpus=128)]
    assert fastest_and_cheapest(one_and_many, 0.1) == {"fastest": 1, "cheapest": 0}  # the floor is per GPU


def test_the_report_s_picks_are_the_best_of_every_gpu_s_layouts(capsys) -> None:
    """One rule on every surface: with layouts searched, the overall fastest and cheapest are the fastest and the
    cheapest of the per-GPU layout picks, and the text names the same setups."""
    report = _report(capsys, "example:Llama-2-70b-hf", "-m", "full", "-g", "h100", "-g", "a100", "--tokens", "1e9")
    overall, per_gpu = report["fastest_and_cheapest"], report["layout_picks"]
    fastest = max((e["fastest"] for e in per_gpu), key=lambda t: t["tokens_per_s"])
    cheapest = min((e["cheapest"] for e in per_gpu), key=lambda t: t["cost_usd"])
    assert overall["fastest"]["time"]["tokens_per_s"] == fastest["tokens_per_s"] > max(
        c["time"]["tokens_per_s"] for c in report["fit"])  # beyond the fewest-GPU cells of the table
    assert overall["cheapest"]["time"]["cost_usd"] == cheapest["cost_usd"]
    assert overall["fastest"]["layout"] == fastest["layout"] and overall["fastest"]["time"]["setup"] == "layout"
    assert run(["example:Llama-2-70b-hf", "-m", "full", "-g", "h100", "-g", "a100", "--tokens", "1e9"]) == 0
    text = capsys.readouterr().out.replace("\n", " ")
    assert f"fastest: full fine-tune on {fastest['num_gpus']}× {overall['fastest']['gpu']} ({fastest['layout']})" \
        in text


def test_gpus_lists_each_class_s_machine(capsys) -> None:
    assert run(["gpus", "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "| AWS g4dn.metal | 12.5 | 384 | 1,676 | – |" in out and "| NVIDIA DGX H100 | 400 | 2,048 | 28,610 |" in out
    assert run(["gpus", "-f", "json"]) == 0
    listed = {g["name"]: g["node"] for g in json.loads(capsys.readouterr().out)["gpus"]}
    assert listed["A100 40GB"]["host_ram_gib"] == 1024 and listed["A100 40GB"]["sources"]["host_ram_gib"]
