"""The layout pick (hfmem.reporting.layout_search): its pruned search names the layouts a brute force over the same
space names, its rules keep host-RAM-short and glacial layouts out, and the CLI names a fastest and a cheapest layout
per GPU for a token budget."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from tiny_models import reference_model

from hfmem.cli.main import run
from hfmem.hardware.gpus import find_gpu
from hfmem.memory.estimate import estimate
from hfmem.memory.layouts import Limits
from hfmem.memory.settings import TrainingSettings
from hfmem.reporting.layout_search import (
    Layout,
    Timed,
    choose,
    frontier,
    gpu_counts,
    search,
    shapes,
    space,
)
from hfmem.reporting.plan import machine_room
from hfmem.render.charts import frontier_chart
from hfmem.reporting.timing import flops_for, flops_of, step_for, throughput_bound
from hfmem.units import budget


def _timed(n: int, tokens_per_s: float, *, host_ok: bool = True, price: float = 2.0) -> Timed:
    hours = 1e9 / tokens_per_s / 3600
    return Timed(Layout(n), host_ok, {"tokens_per_s": tokens_per_s, "hours": hours,
                                               "cost_usd": hours * n * price})


def test_the_picks_skip_host_ram_short_and_glacial_layouts() -> None:
    short = _timed(1, 1150.0, host_ok=False)  # one GPU, cheapest of all, but its machine lacks the host RAM
    slow = _timed(1, 600.0)  # the fewest GPUs, at 600 tokens/s per GPU: dearer than 8 GPUs at 1,000 each
    glacial = _timed(1, 60.0, price=0.02)  # $93 at a tiny price: cheapest, but 6% of the best rate per GPU
    fast, faster = _timed(8, 8000.0), _timed(16, 12000.0)  # $556 and $741
    picked = choose([short, slow, glacial, fast, faster], floor=0.1)
    assert picked == {"fewest": slow, "fastest": faster, "cheapest": fast}
    assert choose([short, slow, glacial, fast, faster], floor=0.0)["cheapest"] == glacial
    assert choose([short], floor=0.1) == {"fewest": None, "fastest": None, "cheapest": None}
    assert frontier([short, slow, fast, faster]) == [faster, fast]
    double = _timed(16, 16000.0)  # the same cost as `fast` in half the hours: the quicker wins the tie
    assert choose([fast, double], floor=0.1)["cheapest"] is double


def test_the_space_counts_shapes_and_schedules() -> None:
    assert gpu_counts(19, 128) == [19, 32, 64, 128] and gpu_counts(1, 4) == [1, 2, 4]
    limits = Limits(heads=64, kv_heads=8, layers=80, seq_len=4096, tp_domain=8)
    found = set(shapes(16, limits, micro_batches=4))
    assert (8, 2, 1, 1) in found and (8, 2, 1, 2) in found  # 4 micro-batches split into 2 stages: interleaved too
    assert (4, 4, 1, 2) in found and not any(t > 8 for t, *_ in found) and all(c == 1 for *_, c, _ in found)
    assert (4, 4, 1, 2) not in set(shapes(16, limits, micro_batches=2))  # Megatron: micro-batches a multiple of PP
    long = Limits(heads=64, kv_heads=8, layers=80, seq_len=32768, tp_domain=8)
    assert {cp for _, _, cp, _ in shapes(16, long, 1)} == {1, 2, 4}
    groups = space(TrainingSettings(), limits, 16)
    assert all(len({lay.micro_batch for lay in g}) == 3 and len({replace(lay, micro_batch=1) for lay in g}) == 1
               for g in groups)
    assert all(lay.offload_optimizer for g in space(TrainingSettings(), limits, 16, offload=True) for lay in g)


@pytest.fixture(scope="module")
def llama70b():
    return reference_model("meta-llama/Llama-2-70b-hf")


def test_the_search_picks_what_a_brute_force_picks(llama70b) -> None:
    """Llama 2 70B full on H100s, 16 to 32 GPUs, 4 micro-batches: every layout of the space estimated and timed
    (no micro-batch or bound skipped; offload at the fewest count where no other layout fits there, as the space
    defines it) gives the same fewest, fastest, cheapest and frontier as the search, which times fewer."""
    arch, inventory = llama70b
    gpu = find_gpu("h100")
    base = TrainingSettings(seq_len=4096, gradient_accumulation_steps=4, max_gpus=32).validated()
    memo: dict = {}

    def estimate_of(s: TrainingSettings):
        if s not in memo:
            memo[s] = estimate(arch, inventory, s)
        return memo[s]

    def time_of(est):
        return step_for(est, flops_of(arch, inventory, est), gpu, arch)

    def host_ok(est):
        return machine_room(est, gpu)

    def bound_of(s: TrainingSettings):
        return throughput_bound(flops_for(arch, inventory, s, 4096, "sdpa"), s, 4096, gpu, arch)

    found = search(base, arch, gpu, fewest=16, tokens=1e9, price=4.0, estimate_of=estimate_of, time_of=time_of,
                   host_ok=host_ok, bound_of=bound_of)
    limits = Limits.of(arch, 4096, 8)
    brute = []
    for n in gpu_counts(16, 32):
        for offload in (False, True):
            if offload and (n != 16 or any(t.layout.num_gpus == n for t in brute)):
                continue
            for layout in (lay for g in space(base, limits, n, offload=offload) for lay in g):
                try:
                    est = estimate_of(replace(base, **layout.changes()))
                except Exception:  # noqa: BLE001 - a layout the settings refuse is not in the space
                    continue
                if est.fits(gpu.usable_bytes):
                    step = time_of(est)
                    brute.append(Timed(layout, host_ok(est), step | budget(step.get("tokens_per_s"), n, 1e9, 4.0)))
    assert 0 < len(found) < len(brute)
    for label, want in choose(brute, 0.1).items():
        got = choose(found, 0.1)[label]
        assert want is not None and got is not None, label
        assert (got.layout.num_gpus, got.tokens_per_s) == (want.layout.num_gpus, want.tokens_per_s), label
    assert [(t.time["hours"], t.time["cost_usd"]) for t in frontier(found)] == [
        (t.time["hours"], t.time["cost_usd"]) for t in frontier(brute)]
    for t in brute:  # the bound holds: no layout beats its compute and critical-path transfers through its bubble
        bound = bound_of(replace(base, **t.layout.changes()))
        assert bound is not None and t.tokens_per_s <= bound * (1 + 1e-9)


def test_the_cli_names_a_fastest_and_a_cheapest_layout_per_gpu(capsys) -> None:
    code = run(["example:Llama-2-70b-hf", "-m", "full", "-g", "h100", "-g", "a100", "--tokens", "1e9",
                "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)
    picks = {e["gpu"]: e for e in report["layout_picks"]}
    assert set(picks) == {"H100 80GB", "A100 80GB"}
    for entry in picks.values():
        fastest, cheapest, fewest = entry["fastest"], entry["cheapest"], entry["fewest"]
        for chosen in (fastest, cheapest, fewest):
            assert chosen["host_ram_ok"] and chosen["tokens_per_s"] > 0 and chosen["cost_usd"] > 0
            assert chosen["num_gpus"] <= 1024 and chosen["hours"] == pytest.approx(
                1e9 / chosen["tokens_per_s"] / 3600, rel=1e-3)
        assert fastest["tokens_per_s"] >= cheapest["tokens_per_s"] >= 0.1 * fastest["tokens_per_s"]
        assert cheapest["cost_usd"] <= min(f["cost_usd"] for f in entry["frontier"])
        assert fewest["num_gpus"] == 16 and entry["not_timed"] == []
    assert run(["example:Meta-Llama-3-8B", "-m", "lora", "-g", "rtx4090", "--tokens", "1e9", "--max-gpus", "32",
                "--format", "json"]) == 0  # a GeForce box: one machine of 8 is timed, beyond it says what is missing
    (desk,) = json.loads(capsys.readouterr().out)["layout_picks"]
    assert desk["fastest"]["num_gpus"] <= 8 and desk["cheapest"] is None  # no default price for it
    assert [u["num_gpus"] for u in desk["not_timed"]] == [[16, 32]] and "--network-gbps" in desk["not_timed"][0][
        "reason"]
    chart = frontier_chart(report)  # the HTML report's cost-against-time chart draws each GPU's layout frontier
    for i, entry in enumerate(report["layout_picks"]):
        for j, point in enumerate(entry["frontier"]):
            assert f'data-src="layout_picks.{i}.frontier.{j}.cost_usd"' in chart
            assert f"{entry['gpu']}, {point['layout']}" in chart
    assert run(["example:Llama-2-70b-hf", "-m", "full", "-g", "h100", "--tokens", "1e9"]) == 0
    text = capsys.readouterr().out.replace("\n", " ")  # rich wraps the line
    h100 = picks["H100 80GB"]
    assert "layouts, full fine-tune on H100 80GB" in text
    assert f"cheapest {h100['cheapest']['layout']}:" in text and f"fastest {h100['fastest']['layout']}:" in text
