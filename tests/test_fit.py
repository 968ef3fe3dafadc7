"""The fit search: answers that are consistent with the estimate, the cheapest sharding, speed, JSON shape."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from tiny_models import reference_model

from hfmem.errors import InvalidInputError
from hfmem.memory.breakdown import MemoryBreakdown
from hfmem.memory.estimate import estimate
from hfmem.memory.fit import fit_matrix, fit_one
from hfmem.hardware.gpus import catalogue, find_gpu, parse_gpu_spec
from hfmem.memory.settings import TrainingSettings
from hfmem.units import GIB





LLAMA3 = reference_model("meta-llama/Meta-Llama-3-8B")
SETTINGS = TrainingSettings()


def _required(model, settings) -> int:
    return estimate(*model, settings).per_gpu_bytes.required


def test_a_full_matrix_evaluates_each_part_once_per_distinct_input(monkeypatch) -> None:
    """The matrix's searches share memoised parts: model state once per distinct sharding setup, activations once per
    distinct (settings, sequence) probe; wall time is bench/fit_speed.py's to report."""
    import hfmem.memory.fit as fit_module

    seen: dict[str, list] = {"state": [], "activations": []}
    real_state, real_acts = fit_module.state_for, fit_module.activations_for

    def state_for(ctx, s):
        seen["state"].append(s.memo_key("state"))
        return real_state(ctx, s)

    def activations_for(ctx, s, seq):
        seen["activations"].append(s.memo_key("activations") + (seq,))
        return real_acts(ctx, s, seq)

    monkeypatch.setattr(fit_module, "state_for", state_for)
    monkeypatch.setattr(fit_module, "activations_for", activations_for)
    fits = fit_matrix(*LLAMA3, SETTINGS, catalogue()[:15])
    assert len(fits) == 45
    for part, keys in seen.items():
        assert keys and len(keys) == len(set(keys)), f"{part}: {len(keys) - len(set(keys))} repeated evaluations"


def _monotone(kind: str, rng: random.Random) -> tuple:
    """A non-decreasing byte count over x and a limit somewhere along it: affine (activations in the batch), convex
    (eager attention in the sequence), stepped (buckets) or with a jump."""
    a, b, c = rng.randint(0, 10**9), rng.randint(1, 10**6), rng.randint(1, 3)
    value = {"affine": lambda x: a + b * x, "convex": lambda x: a + b * x + c * x * x,
             "stepped": lambda x: a + b * ((x + 3) // 4), "jump": lambda x: a + b * x + (x > 300) * 10**8}[kind]
    return value, rng.randint(a - 10, a + b * 3_000)


@pytest.mark.parametrize("kind", ["affine", "convex", "stepped", "jump"])
def test_the_searches_give_bisections_answer(kind: str) -> None:
    """`_largest` and `_smallest` return exactly the edge a scan of every x finds, on affine, convex, stepped and
    jumping totals; on an affine total they need at most three evaluations past the doubling, not one per bit."""
    from hfmem.memory.fit import _largest, _smallest

    rng = random.Random(kind)
    past_doubling = []
    for _ in range(100):
        value, limit = _monotone(kind, rng)
        hi = rng.choice([64, 2048])
        probed: set[int] = set()
        got = _largest(1, hi, lambda x: probed.add(x) or value(x), limit)
        assert got == max((x for x in range(1, hi + 1) if value(x) <= limit), default=0)
        past_doubling.append(len(probed - {1 << k for k in range(12)} - {hi}))
        base, per_gpu = rng.randint(0, 10**6), rng.randint(1, 10**7)
        room = rng.randint(0, 2 * 10**6 + per_gpu)
        want = next((n for n in range(1, 1025) if base + per_gpu // n <= room), None)
        assert _smallest(1, 1024, lambda n: base + per_gpu // n, room) == want
    if kind == "affine":
        assert max(past_doubling) <= 3


@pytest.mark.parametrize("method", ["full", "lora", "qlora"])
def test_max_batch_and_sequence_are_the_edge_of_fitting(method: str) -> None:
    for gpu in (find_gpu("RTX 4090"), find_gpu("A100 80GB"), find_gpu("H200")):
        fit = fit_one(*LLAMA3, SETTINGS, gpu, method)
        base = TrainingSettings(**{**SETTINGS.__dict__, "method": method, "optimizer": None})
        limit = gpu.usable_bytes
        if fit.max_micro_batch_size:
            b = fit.max_micro_batch_size
            assert _required(LLAMA3, replace(base, micro_batch_size=b)) <= limit
            assert _required(LLAMA3, replace(base, micro_batch_size=b + 1)) > limit
        else:
            assert not fit.fits
        if fit.max_seq_len and not fit.max_seq_len_capped:
            s = fit.max_seq_len
            assert _required(LLAMA3, replace(base, seq_len=s)) <= limit
            assert _required(LLAMA3, replace(base, seq_len=s + 1)) > limit
        assert fit.fits == (_required(LLAMA3, base) <= limit)


def test_multi_gpu_count_is_the_smallest_with_the_cheapest_sharding() -> None:
    gpu = find_gpu("A100 40GB")
    fit = fit_one(*LLAMA3, SETTINGS, gpu, "full")
    multi = fit.multi_gpu
    assert multi is not None and multi["num_gpus"] > 1 and not multi["offload_optimizer"]
    n, sharding = multi["num_gpus"], multi["sharding"]
    assert _required(LLAMA3, replace(SETTINGS, num_gpus=n, sharding=sharding)) <= gpu.usable_bytes
    for cheaper in ("ddp", "zero1", "zero2", "zero3"):
        fits_n = _required(LLAMA3, replace(SETTINGS, num_gpus=n, sharding=cheaper)) <= gpu.usable_bytes
        if cheaper == sharding:
            break
        assert not fits_n  # no cheaper sharding works at this count
    for fewer in ("ddp", "zero1", "zero2", "zero3"):
        assert _required(LLAMA3, replace(SETTINGS, num_gpus=n - 1, sharding=fewer)) > gpu.usable_bytes


def test_a_small_model_fits_without_sharding() -> None:
    gpt2 = reference_model("openai-community/gpt2")
    fit = fit_one(*gpt2, SETTINGS, find_gpu("T4"), "full")
    assert fit.verdict == "fits" and fit.advice is None and fit.multi_gpu["num_gpus"] == 1 and fit.multi_gpu["sharding"] == "none"
    assert fit.max_seq_len_capped and fit.max_seq_len == 1024  # GPT-2's maximum


def test_mitigations_make_it_fit() -> None:
    gpu = find_gpu("RTX 4090")
    fit = fit_one(*LLAMA3, replace(SETTINGS, micro_batch_size=4), gpu, "lora")
    assert not fit.fits and fit.verdict == "change" and fit.advice["mitigation"] == fit.mitigations[0]["name"]
    names = [m["name"] for m in fit.mitigations]
    assert names[0] in {"gradient_checkpointing", "smaller_micro_batch", "checkpointing_and_smaller_micro_batch"}
    for m in fit.mitigations:
        assert m["total_bytes"] <= gpu.usable_bytes
        trial = TrainingSettings(**{**replace(SETTINGS, micro_batch_size=4, method="lora").__dict__, **m["settings_changes"]})
        assert _required(LLAMA3, trial) <= gpu.usable_bytes
    seventy = reference_model("meta-llama/Llama-2-70b-hf")
    big = fit_one(*seventy, SETTINGS, find_gpu("H100"), "full")
    assert not big.fits and "qlora" in [m["name"] for m in big.mitigations]


def test_user_defined_gpu_and_json_shape() -> None:
    gpus = [parse_gpu_spec("lab-card=20"), find_gpu("h100")]
    fits = fit_matrix(*LLAMA3, SETTINGS, gpus, ("qlora", "lora"))
    assert [(f.method, f.gpu.name) for f in fits] == [("qlora", "lab-card"), ("qlora", "H100 80GB"),
                                                      ("lora", "lab-card"), ("lora", "H100 80GB")]
    data = json.loads(json.dumps([f.to_dict() for f in fits]))
    for entry in data:
        assert {"gpu", "method", "verdict", "fits", "total_bytes", "required_bytes", "headroom_bytes",
                "max_micro_batch_size", "max_seq_len", "multi_gpu", "advice", "mitigations"} <= set(entry)
        assert entry["verdict"] in {"fits", "change", "gpus", "none"}
        assert isinstance(entry["gpu"], str) and entry["fits"] == (entry["verdict"] == "fits")
    assert all(f.assumptions["dtype"] == "bf16" for f in fits)
    with pytest.raises(InvalidInputError):
        fit_matrix(*LLAMA3, SETTINGS, gpus, ("dpo",))


PER_GPU_ORDER = ["weights", "gradients", "optimizer", "activations", "overhead", "total", "required", "master_weights",
                 "optimizer_states", "sharding_buffers", "activations_stored", "activation_transient", "loss_peak",
                 "recompute", "backward_working", "optimizer_step_transient", "autocast_weight_copies",
                 "paged_optimizer", "gradient_activation_overlap", "allocated_peak", "reserved_peak", "cuda_context",
                 "fragmentation", "host_per_node", "load", "evaluation", "generation", "save",
                 "parallel_buffers", "quantized_weight_copies", "scaling_state", "nccl", "nvme_per_node"]


def test_breakdown_serialises_as_the_report_always_has() -> None:
    settings = TrainingSettings(method="qlora")
    est = estimate(*LLAMA3, settings)
    assert isinstance(est.per_gpu_bytes, MemoryBreakdown) and est.per_gpu_bytes.paged_optimizer > 0
    data = json.loads(json.dumps(est.to_dict()))
    assert list(data["per_gpu_bytes"]) == PER_GPU_ORDER
    required = est.per_gpu_bytes.required
    assert data["per_gpu_bytes"]["required"] == required == est.total - est.per_gpu_bytes.paged_optimizer
    fit = json.loads(json.dumps(fit_one(*LLAMA3, settings, find_gpu("rtx4090"), "qlora").to_dict()))
    assert fit["per_gpu_bytes"] == data["per_gpu_bytes"]
    assert fit["total_bytes"] == est.total  # one total everywhere: the cell shows what the estimate shows
    assert fit["required_bytes"] == required < est.total  # the check leaves the paged states out


def test_each_cell_is_the_verdict_for_the_setup_asked() -> None:
    """--zero 3 --num-gpus 2: the cell answers for 2 GPUs with ZeRO-3, with the estimate's own per-GPU figure."""
    asked = TrainingSettings(method="full", sharding="zero3", num_gpus=2, gradient_checkpointing="full").validated()
    single = TrainingSettings(method="full", gradient_checkpointing="full").validated()
    est, one = estimate(*LLAMA3, asked), estimate(*LLAMA3, single)
    gpu = parse_gpu_spec(f"card={(est.total + one.total) / 2 / GIB:.3f}")  # between the two setups' needs
    fit = fit_one(*LLAMA3, asked, gpu, "full").to_dict()
    assert fit["verdict"] == "fits" and fit["fits"]
    assert (fit["num_gpus"], fit["sharding"]) == (2, "zero3")
    assert fit["total_bytes"] == est.total
    typed = fit_one(*LLAMA3, asked, gpu, "full")
    assert (typed.settings["num_gpus"], typed.settings["sharding"]) == (2, "zero3")
    assert typed.assumptions["sharding"] == "zero3" and typed.assumptions["num_gpus"] == 2
    alone = fit_one(*LLAMA3, single, gpu, "full").to_dict()  # the same card alone does not hold it
    assert not alone["fits"] and alone["num_gpus"] == 1


def test_estimate_json_shape_and_how_the_terms_add_up() -> None:
    for settings in (SETTINGS, TrainingSettings(method="lora"), TrainingSettings(method="qlora"),
                     TrainingSettings(num_gpus=4, sharding="zero3", gradient_checkpointing="full"),
                     TrainingSettings(dtype="amp-bf16", optimizer="adamw_foreach", gradient_accumulation_steps=4),
                     TrainingSettings(dtype="fp8-te")):
        data = json.loads(json.dumps(estimate(*LLAMA3, settings).to_dict()))
        b = data["per_gpu_bytes"]
        assert {"weights", "gradients", "optimizer", "activations", "overhead", "total"} <= set(b)
        assert b["total"] == (b["weights"] + b["gradients"] + b["optimizer"] + b["activations"] + b["sharding_buffers"]
                              + b["optimizer_step_transient"] + b["autocast_weight_copies"] + b["overhead"]
                              + b["quantized_weight_copies"] + b["scaling_state"] - b["gradient_activation_overlap"])
        assert b["overhead"] == b["cuda_context"] + b["fragmentation"] + b["nccl"]
        for key in ("dtype", "optimizer", "micro_batch_size", "seq_len", "gradient_checkpointing", "attention", "overhead"):
            assert key in data["assumptions"]
        assert data["settings"]["seq_len"] == 2048
        assert data["activations"]["per_layer"][0]["bytes"] > 0
