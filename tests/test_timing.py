"""Step time, token budget and cost of the fitting setups through the CLI: the roofline's inputs are the estimate's
own tokens and sharding, a budget scales as it must, a price is the user's, and a cell without peaks says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import hfmem

from hfmem.cli.main import run
from hfmem.compute.roofline import hfu_for, low_precision_hfu
from hfmem.hardware.gpus import find_gpu
from hfmem.hardware.specs import gpu_specs
from hfmem.memory.record import cells, estimates, picks, ranked
from hfmem.units import FIGURE_DIGITS

DIGITS = 10.0 ** (1 - FIGURE_DIGITS)
"""How close two reported figures that follow from each other are: each is rounded to FIGURE_DIGITS."""


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))


def _report(capsys, *args: str) -> dict:
    capsys.readouterr()
    code = run(["example:Meta-Llama-3-8B", "--format", "json", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_a_budget_scales_with_tokens_and_a_given_price_replaces_the_default(capsys) -> None:
    given = _report(capsys, "-m", "lora", "-g", "h100", "--tokens", "1e9", "--price", "h100=2.5")
    default = _report(capsys, "-m", "lora", "-g", "h100", "--tokens", "4e9")
    small, large = cells(given)[0]["time"], cells(default)[0]["time"]
    assert small["tokens_per_s"] == large["tokens_per_s"] > 0
    assert large["hours"] == pytest.approx(4 * small["hours"], rel=DIGITS)
    assert small["hours"] == pytest.approx(1e9 / small["tokens_per_s"] / 3600, rel=DIGITS)
    assert small["cost_usd"] == pytest.approx(small["gpu_hours"] * 2.5, rel=DIGITS)
    assert given["prices"]["by_gpu"]["H100 80GB"] == [2.5, "given"] and given["prices"]["sources"] == {}
    table = json.loads((Path(hfmem.__file__).parent / "hardware" / "prices.json").read_text())
    shipped = table["prices"]["H100 80GB"]
    assert default["prices"]["by_gpu"]["H100 80GB"] == [shipped["usd_per_gpu_hour"], shipped["source"]]
    assert shipped["usd_per_gpu_hour"] == large["usd_per_gpu_hour"]
    assert default["prices"]["default_as_of"] == table["as_of"]
    assert default["prices"]["sources"][shipped["source"]]["url"] == table["sources"][shipped["source"]]["url"]
    assert large["cost_usd"] == pytest.approx(large["gpu_hours"] * shipped["usd_per_gpu_hour"], rel=DIGITS)


def test_the_step_moves_the_tokens_the_settings_say(capsys) -> None:
    report = _report(capsys, "-m", "lora", "-g", "h100", "-b", "2", "--grad-accum", "3", "--seq-len", "1024",
                     "--num-gpus", "4", "--zero", "3")
    cell = cells(report)[0]
    assert cell["fits"]
    t = cell["time"]
    assert t["tokens_per_s"] * t["seconds"] == pytest.approx(4 * 2 * 3 * 1024, rel=2 * DIGITS)
    terms = picks(report)["fastest"]["time"]["terms"]  # the one cell's time with its terms
    assert any(k.startswith("exposed_all_gather") for k in terms)  # ZeRO-3 gathers the weights every pass
    single = _report(capsys, "-m", "lora", "-g", "h100", "-b", "2", "--grad-accum", "3", "--seq-len", "1024")
    terms = picks(single)["fastest"]["time"]["terms"]
    assert not any(k.startswith("exposed_all_gather") for k in terms)


def test_no_time_without_peaks_and_the_fastest_is_the_fastest(capsys) -> None:
    report = _report(capsys, "-m", "qlora", "-g", "lab=48", "-g", "h100", "-g", "a100")
    by_gpu = {c["gpu"]["name"]: c["time"] for c in cells(report)}
    assert by_gpu["lab"]["seconds"] is None and by_gpu["lab"]["reason"]
    fastest = picks(report)["fastest"]
    best = max((t for t in by_gpu.values() if t and t.get("tokens_per_s")), key=lambda t: t["tokens_per_s"])
    assert {k: best[k] for k in ("setup", "seconds", "tokens_per_s")}.items() <= fastest["time"].items()
    assert picks(report)["cheapest"] is None  # no token budget: no cost, so no cheapest
    fp32 = cells(_report(capsys, "-m", "lora", "-g", "h200", "--dtype", "fp32"))[0]["time"]
    assert fp32["seconds"] is None and "fp32" in fp32["reason"]


@pytest.mark.parametrize("bad", [["--price", "h100"], ["--price", "h100=-1"], ["--price", "nope=2"], ["--tokens", "0"]])
def test_bad_budgets_are_one_line_errors(capsys, bad) -> None:
    capsys.readouterr()
    code = run(["example:Meta-Llama-3-8B", *bad])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_a_cell_that_needs_more_gpus_is_timed_on_its_suggested_setup(capsys) -> None:
    report = json.loads(_json_of(capsys, "example:Llama-2-70b-hf", "-m", "lora", "-g", "h100", "--tokens", "1e9"))
    cell = cells(report)[0]
    assert not cell["fits"] and cell["time"]["setup"] == "gpus"
    multi = min((m for m in (cell["multi_gpu"], cell["multi_gpu_with_checkpointing"]) if m), key=lambda m: m["num_gpus"])
    seq = estimates(report)[0]["settings"]["seq_len"]
    assert cell["time"]["tokens_per_s"] * cell["time"]["seconds"] == pytest.approx(multi["num_gpus"] * seq, rel=2 * DIGITS)
    (searched,) = report["layout_picks"]  # the cell's setup is the layouts' fewest; the report's fastest is theirs
    assert searched["fewest"]["num_gpus"] == multi["num_gpus"]
    assert picks(report)["fastest"]["time"]["tokens_per_s"] == searched["fastest"]["tokens_per_s"]
    capsys.readouterr()
    assert run(["example:Llama-2-70b-hf", "-m", "lora", "-g", "h100", "--tokens", "1e9"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Time per fitting setup" in out and f"{multi['num_gpus']}×ZeRO-3" in out


def _json_of(capsys, *args: str) -> str:
    capsys.readouterr()
    assert run([*args, "--format", "json"]) == 0
    return capsys.readouterr().out


def test_epochs_over_a_dataset_are_a_budget_and_rank_orders_the_setups(capsys) -> None:
    by_tokens = _report(capsys, "-g", "h100", "-g", "a100", "--tokens", "1e9", "--price", "h100=2.5",
                        "--price", "a100=1.6")
    by_epochs = _report(capsys, "-g", "h100", "-g", "a100", "--epochs", "2", "--dataset-tokens", "5e8",
                        "--price", "h100=2.5", "--price", "a100=1.6", "--rank", "cost")
    assert by_epochs["plan"]["tokens"] == 1e9
    assert [c["time"] for c in cells(by_epochs)] == [c["time"] for c in cells(by_tokens)]
    costs = [p["time"]["cost_usd"] for p in ranked(by_epochs)]
    priced = [c for c in cells(by_tokens) if c["time"] and "cost_usd" in c["time"]]
    assert costs == sorted(costs) and {c["time"]["cost_usd"] for c in priced} <= set(costs)
    searched = [e["cheapest"]["cost_usd"] for e in by_epochs["layout_picks"]]  # the layouts searched are ranked too
    assert set(searched) <= set(costs) and len(costs) > len(priced)
    cheapest = picks(by_epochs)["cheapest"]
    assert ranked(by_epochs)[0] == cheapest | {"time": {k: v for k, v in cheapest["time"].items() if k != "terms"}}
    by_gpus = ranked(_report(capsys, "-g", "h100", "-g", "a100", "--rank", "gpus"))
    assert [p["num_gpus"] for p in by_gpus] == sorted(p["num_gpus"] for p in by_gpus)
    assert ranked(by_tokens) is None and by_tokens["fit_ranking"] is None


@pytest.mark.parametrize("bad", [["--epochs", "2"], ["--epochs", "2", "--dataset-tokens", "1e9", "--tokens", "1e9"],
                                 ["--rank", "speed"]])
def test_bad_budget_combinations_are_one_line_errors(capsys, bad) -> None:
    capsys.readouterr()
    code = run(["example:Meta-Llama-3-8B", *bad])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_a_gpu_without_a_host_link_figure_is_untimed_not_an_error(capsys) -> None:
    report = _report(capsys, "-m", "full", "--zero", "3", "--num-gpus", "2", "--offload-optimizer", "--offload-params")
    b200 = next(c for c in cells(report) if c["gpu"]["name"] == "B200 180GB")  # no PCIe generation in its datasheet
    assert b200["time"]["seconds"] is None and "PCIe" in b200["time"]["reason"]
    assert any(c["time"] and c["time"].get("seconds") for c in cells(report))  # the others are timed


def test_a_cell_that_fits_with_a_change_is_timed_with_that_change(capsys, monkeypatch) -> None:
    report = _report_of(capsys, "example:Llama-2-70b-hf", "-g", "h100", "-g", "a100", "--tokens", "1e9",
                        "--price", "h100=2.5")
    by = {(c["method"], c["gpu"]["name"]): c for c in cells(report)}
    qlora = by[("qlora", "H100 80GB")]
    assert qlora["verdict"] == "change" and qlora["advice"]["mitigation"] == "gradient_checkpointing"
    t = qlora["time"]
    assert t["setup"] == "change" and t["tokens_per_s"] > 0 and t["cost_usd"] > 0
    single = _report_of(capsys, "example:Llama-2-70b-hf", "-m", "qlora", "-g", "h100", "--tokens", "1e9",
                        "--price", "h100=2.5", "--gradient-checkpointing", "full")
    asked = cells(single)[0]
    assert asked["verdict"] == "fits" and asked["time"]["setup"] == "asked"
    assert {k: asked["time"][k] for k in ("seconds", "tokens_per_s", "cost_usd")} == {
        k: t[k] for k in ("seconds", "tokens_per_s", "cost_usd")}  # the change, timed as if asked
    assert by[("qlora", "A100 80GB")]["time"]["usd_per_gpu_hour"] == report["prices"]["by_gpu"]["A100 80GB"][0]
    full = by[("full", "H100 80GB")]["time"]  # 16 GPUs in two DGX H100s, at their 400 Gb/s NIC per GPU
    assert full["setup"] == "gpus" and full["tokens_per_s"] > 0 and full["cost_usd"] > 0
    monkeypatch.setenv("COLUMNS", "300")  # the time table's cells on one line each
    capsys.readouterr()
    assert run(["example:Llama-2-70b-hf", "-g", "h100", "-g", "a100", "--tokens", "1e9", "--price", "h100=2.5"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "+ckpt: " in out and "16×FSDP2·TP8: " in out and "not timed" not in out
    assert "H100 80GB 2.5 (--price); A100 80GB" in out
    assert f"default table of {report['prices']['default_as_of']}" in out


def _report_of(capsys, *args: str) -> dict:
    return json.loads(_json_of(capsys, *args))


def test_a_given_utilisation_replaces_the_architecture_s_and_fp8_keeps_its_speedup_over_it(capsys) -> None:
    """--hfu is the bf16 utilisation the roofline times compute at; FP8 runs the cited speedup over the given one."""
    base = _report(capsys, "-m", "lora", "-g", "h100")["fit"][0]["time"]
    given = _report(capsys, "-m", "lora", "-g", "h100", "--hfu", "0.6")["fit"][0]["time"]
    assert base["hfu_assumed"] == hfu_for("hopper") and given["hfu_assumed"] == 0.6
    assert given["tokens_per_s"] > base["tokens_per_s"]
    fp8 = _report(capsys, "-m", "full", "-g", "h100", "--dtype", "fp8-te", "--hfu", "0.6")["fit"][0]["time"]
    h100 = gpu_specs(find_gpu("h100"))
    gemms = fp8["low_precision"]
    expected = low_precision_hfu(0.6, h100.peak_flops("bf16"), h100.peak_flops("fp8"), gemms["gemm_speedup"],
                                 gemms["quantized_share"])
    assert fp8["hfu_assumed"] == pytest.approx(expected, rel=1e-3) and expected < 0.6


def test_the_megatron_stack_s_utilisation_is_reachable_from_its_flag_and_its_profiles(capsys) -> None:
    """--hfu-stack megatron, and the nemo profile that sets it, time an H100 at Megatron-LM's own published
    utilisation."""
    for args in ((), ("--hfu-stack", "megatron"), ("--framework", "nemo")):
        (cell,) = _report(capsys, "-m", "lora", "-g", "h100", *args)["fit"]
        assert cell["time"]["hfu_assumed"] == hfu_for("hopper", "megatron" if args else "any")
    assert hfu_for("hopper", "megatron") > hfu_for("hopper")


def test_a_recipe_s_gemm_speedup_is_said_beside_the_utilisation_on_every_pick(capsys) -> None:
    """An FP8 run's fastest/cheapest line names the recipe and its GEMM speedup, read from the pick's time."""
    report = _report(capsys, "-m", "full", "-g", "h100", "--dtype", "fp8-te")
    fastest = picks(report)["fastest"]["time"]["low_precision"]
    assert fastest["recipe"] == "fp8-te" and fastest["gemm_speedup"] == 1.69
    assert run(["example:Meta-Llama-3-8B", "-m", "full", "-g", "h100", "--dtype", "fp8-te"]) == 0
    assert "fp8-te linears at 1.69x bf16" in " ".join(capsys.readouterr().out.split())
