"""The JSON record (hfmem.memory.record): every output kind against hfmem/report.schema.json, its size, and that
reading it back gives each fit cell exactly as the fit search found it."""

from __future__ import annotations

import json
from dataclasses import fields
from importlib import resources
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from hfmem.cli.main import run
from hfmem.hardware.gpus import catalogue
from hfmem.hub.modelref import parse_model_ref
from hfmem.memory.breakdown import MemoryBreakdown
from hfmem.memory.fit import VERDICTS, fit_matrix
from hfmem.memory.record import COMPACT_ROW, cells, estimates, picks, ranked, suggestion
from hfmem.memory.settings import METHODS, TrainingSettings
from hfmem.model.load import SCHEMA_VERSION, analyse
from hfmem.reporting.plan import Plan, node_fits
from hfmem.units import FIGURE_DIGITS
from hfmem.scan.runner import iter_records

EXAMPLES = sorted(p.name for p in (Path(__file__).resolve().parent.parent / "hfmem" / "examples").iterdir())
SCHEMA = json.loads(resources.files("hfmem").joinpath("report.schema.json").read_text(encoding="utf-8"))
FULL_LIMIT = 137_000
"""Bytes of `hfmem example:NAME -f json` at most, also with a token budget, a ranking and 8×ZeRO-3 (schema_version 2
wrote 346-420 kB per example, 4 26.7-32.6 kB; 5 17.1-19.2 kB, up to 37.9 kB with a budget and a ranking; 6 wrote
16.5-18.0 kB, at most 19.7 kB with all three, positional and decoded by hfmem alone; 7 names every field: 123.3 kB for
Llama-2-70b-hf with all three, 130.5 kB once each cell and setting names NCCL's term and its two settings, 135.2 kB
with the stack utilisation, NCCL group, FP8-weight, optimizer-dtype, master-remainder and MoE-probability settings)."""
COMPACT_LIMIT = 4_000
"""Bytes of one `hfmem scan --compact` JSONL line at most (3.8 kB for Meta-Llama-3-8B on the whole catalogue)."""


def check(kind: str, value: dict) -> None:
    """`value` is valid as the schema's `$defs[kind]`."""
    validator = Draft202012Validator({"$defs": SCHEMA["$defs"], "$ref": f"#/$defs/{kind}"})
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}"[:300] for e in errors[:5]]


def hfmem_json(capsys, *args: str) -> tuple[str, dict]:
    capsys.readouterr()
    assert run(list(args)) == 0
    out = capsys.readouterr().out
    return out, json.loads(out)


def test_the_schema_is_valid_and_names_the_code_s_columns():
    Draft202012Validator.check_schema(SCHEMA)
    d = SCHEMA["$defs"]
    assert d["cell"]["properties"]["verdict"]["enum"] == list(VERDICTS)
    assert d["compact_report"]["properties"]["fit"]["properties"]["columns"]["const"] == list(COMPACT_ROW)
    assert d["compact_report"]["properties"]["fit"]["properties"]["verdicts"]["const"] == list(VERDICTS)
    assert d["breakdown"]["propertyNames"]["enum"] == [f.name for f in fields(MemoryBreakdown)]
    assert d["report"]["properties"]["schema_version"]["const"] == SCHEMA_VERSION


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_s_record_is_valid_and_small(capsys, name):
    out, report = hfmem_json(capsys, f"example:{name}", "-f", "json")
    check("report", report)
    assert len(out.encode()) <= FULL_LIMIT, len(out.encode())
    assert len(cells(report)) == len(METHODS) * len(catalogue())


@pytest.mark.parametrize("name", EXAMPLES)
def test_a_budget_a_ranking_and_eight_gpus_stay_small(capsys, name):
    """What a budget and a ranking add is read back from the rows (tokens from the plan, prices from `prices`):
    every priced cell's hours, GPU-hours and cost follow from its throughput, and the ranking is every priced
    cell, cheapest first, the cheapest pick first."""
    out, report = hfmem_json(capsys, f"example:{name}", "-f", "json", "--num-gpus", "8", "--zero", "3",
                             "--tokens", "2e9", "--rank", "cost")
    check("report", report)
    assert len(out.encode()) <= FULL_LIMIT, len(out.encode())
    digits = 10.0 ** (1 - FIGURE_DIGITS)
    priced = [c for c in cells(report) if c["time"] and "cost_usd" in c["time"]]
    assert priced
    for c in priced:
        t = c["time"]
        gpus = c["advice"]["num_gpus"] if t["setup"] == "gpus" else 8
        assert t["tokens"] == 2e9 and t["usd_per_gpu_hour"] == report["prices"]["by_gpu"][c["gpu"]["name"]][0]
        assert t["hours"] == pytest.approx(2e9 / t["tokens_per_s"] / 3600, rel=digits)
        assert t["gpu_hours"] == pytest.approx(t["hours"] * gpus, rel=digits)
        assert t["cost_usd"] == pytest.approx(t["gpu_hours"] * t["usd_per_gpu_hour"], rel=digits)
    best = ranked(report)
    assert [p["time"]["cost_usd"] for p in best] == sorted(t["time"]["cost_usd"] for t in priced)
    cheapest = picks(report)["cheapest"]
    assert (best[0]["method"], best[0]["gpu"]) == (cheapest["method"], cheapest["gpu"])
    assert cheapest["time"]["terms"] and cheapest["time"]["cost_usd"] == best[0]["time"]["cost_usd"]


def test_a_budget_and_prices_stay_valid(capsys):
    _, report = hfmem_json(capsys, "example:Meta-Llama-3-8B", "-f", "json", "--tokens", "1e9", "--price",
                           "h100=2.5", "--rank", "cost", "-g", "h100", "-g", "mycard=40", "-g", "t4")
    check("report", report)
    priced = [(c["gpu"]["name"], c["time"]) for c in cells(report) if c["time"] and "cost_usd" in c["time"]]
    by_gpu = report["prices"]["by_gpu"]
    assert {name for name, _ in priced} == {"H100 80GB", "T4"} and by_gpu["H100 80GB"] == [2.5, "given"]
    assert "mycard" not in by_gpu and by_gpu["T4"][1] in report["prices"]["sources"]  # T4: the default table's
    assert all(t["usd_per_gpu_hour"] == by_gpu[name][0] for name, t in priced)
    digits = 10.0 ** (1 - FIGURE_DIGITS)  # both figures are rounded to FIGURE_DIGITS
    assert all(t["cost_usd"] == pytest.approx(t["gpu_hours"] * t["usd_per_gpu_hour"], rel=digits) for _, t in priced)


def test_scan_records_full_and_compact_are_valid_and_agree(tmp_path, monkeypatch):
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))
    models = tmp_path / "models.txt"
    models.write_text("".join(f"example:{n}\n" for n in EXAMPLES))
    full, compact = tmp_path / "full.jsonl", tmp_path / "compact.jsonl"
    assert run(["scan", str(models), "-o", str(full)]) == 0
    assert run(["scan", str(models), "-o", str(compact), "--compact"]) == 0
    by_model = {r["model"]: r for r in iter_records(full)}
    for line in compact.read_text().splitlines():
        assert len(line.encode()) <= COMPACT_LIMIT, len(line.encode())
        record = json.loads(line)
        check("scan_record", record)
        check("compact_report", record["report"])
        other = by_model[record["model"]]
        check("scan_record", other)
        check("report", other["report"])
        small, large = cells(record["report"]), cells(other["report"])
        assert [(c["method"], c["gpu"]["name"], c["verdict"], c["total_bytes"], c["gpus_needed"],
                 c["suggestion"]) for c in small] == [
            (c["method"], c["gpu"]["name"], c["verdict"], c["total_bytes"], (c["multi_gpu"] or {}).get("num_gpus"),
             suggestion(c)) for c in large]


def test_reading_the_record_back_gives_each_cell_as_the_search_found_it(capsys):
    """The cells hfmem.memory.fit computes, against the record's rows read back: every figure and every
    suggestion, on the GPUs that run other defaults (T4, V100) too."""
    _, report = hfmem_json(capsys, "example:Mixtral-8x7B-v0.1", "-f", "json")
    result = analyse(parse_model_ref("example:Mixtral-8x7B-v0.1"), None)
    found = node_fits(result.architecture, result.inventory, Plan(), catalogue(), {})  # each GPU's host RAM
    read = cells(report)
    assert len(read) == len(found)
    for fit, cell in zip(found, read, strict=True):
        want = json.loads(json.dumps(fit.to_dict()))
        assert (cell["method"], cell["gpu"]["name"]) == (want["method"], want["gpu"])
        assert cell["gpu"]["usable_bytes"] == fit.gpu.usable_bytes and cell["gpu_defaults"] == fit.gpu_defaults
        for key in set(want) - {"gpu"}:
            assert cell[key] == want[key], (fit.method, fit.gpu.name, key)
        assert cell["settings"] == json.loads(json.dumps(fit.settings)) | {"seq_len": cell["settings"]["seq_len"]}
    assert {c["gpu"]["name"] for c in read if c["gpu_defaults"]} >= {"T4", "V100 32GB"}


def test_reading_the_estimates_back_gives_each_as_estimated(capsys):
    """Each estimate is written complete: the record holds exactly what the estimate says, and its FLOPs."""
    from hfmem.memory.estimate import estimate
    from hfmem.reporting.timing import flops_of

    _, report = hfmem_json(capsys, "example:Mixtral-8x7B-v0.1", "-f", "json")
    result = analyse(parse_model_ref("example:Mixtral-8x7B-v0.1"), None)
    for method, read in zip(METHODS, estimates(report)):
        est = estimate(result.architecture, result.inventory, TrainingSettings(method=method))
        flops = flops_of(result.architecture, result.inventory, est).to_dict()
        assert json.loads(json.dumps(est.to_dict() | {"flops_per_token": flops})) == read, method


def test_one_total_per_cell(capsys):
    """The total a cell's row shows is its breakdown's (the estimate's, or its variant's where the GPU differs)."""
    _, report = hfmem_json(capsys, "example:Meta-Llama-3-8B", "-f", "json", "-g", "t4", "-g", "h100")
    by_method = {e["method"]: e for e in estimates(report)}
    for cell in cells(report):
        assert cell["total_bytes"] == cell["per_gpu_bytes"]["total"]
        if cell["gpu_defaults"] is None:
            assert cell["per_gpu_bytes"] == by_method[cell["method"]]["per_gpu_bytes"]
    t4 = [c for c in cells(report) if c["gpu"]["name"] == "T4"]
    assert all(c["settings"]["dtype"] == "fp16" and c["settings"]["attention"] == "sdpa" for c in t4)
    assert all(by_method[c["method"]]["settings"]["dtype"] == "bf16" for c in t4)


def test_settings_are_written_in_the_plan_and_each_estimate(capsys):
    """The plan's settings and each estimate's are complete; a cell names none (its GPU's defaults say what
    differs)."""
    _, report = hfmem_json(capsys, "example:gpt2", "-f", "json", "-m", "lora", "--lora-rank", "8")
    assert report["plan"]["training"]["lora_rank"] == 8
    assert "\"lora_rank\":" not in json.dumps(report["fit"])
    (full,) = estimates(report)
    assert full["settings"]["lora_rank"] == 8 and full["assumptions"]["lora"]["rank"] == 8
    assert all(c["settings"]["lora_rank"] == 8 for c in cells(report))


def test_each_gpu_is_timed_at_its_architecture_s_utilisation_and_another_version_exports_without_cells(capsys):
    """Each timed cell says the utilisation of its GPU's architecture (an H100 at Hopper's, an A100 at Ampere's); a
    record of another schema version (an older scan's file) exports its model line without reading its cells."""
    from hfmem.compute.roofline import hfu_for
    from hfmem.scan.export import summarise

    _, report = hfmem_json(capsys, "example:Qwen2.5-0.5B", "-g", "h100", "-g", "a100", "-f", "json")
    timed = {c["gpu"]["name"]: c["time"]["hfu_assumed"] for c in cells(report) if c["time"]["seconds"]}
    assert timed == {"H100 80GB": hfu_for("hopper"), "A100 80GB": hfu_for("ampere")}
    ((row, _),) = summarise([{"model": "m", "status": "ok", "settings_digest": "d", "report": report}], [])
    assert row["fits"]
    old = json.loads(json.dumps(report)) | {"schema_version": SCHEMA_VERSION - 1}
    ((row, _),) = summarise([{"model": "m", "status": "ok", "settings_digest": "d", "report": old}], [])
    assert row["model"] == "m" and not row["fits"]
