"""Defaults follow what each GPU can run: no bf16 or FlashAttention-2 on Volta and Turing, stated values stand."""

from __future__ import annotations

import json

from hfmem.cli.main import run
from hfmem.hardware.capabilities import ARCHS, capabilities
from hfmem.hardware.gpus import catalogue
from hfmem.memory.record import cells


def _report(capsys, *args: str) -> dict:
    assert run(["example:Meta-Llama-3-8B", "-f", "json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def _cells(report: dict, gpu: str) -> list[dict]:
    return [c for c in cells(report) if c["gpu"]["name"] == gpu]


def test_every_catalogue_gpu_has_a_known_generation():
    assert all(g.arch in ARCHS for g in catalogue())
    by_name = {g.name: capabilities(g) for g in catalogue()}
    assert not by_name["T4"].bf16 and not by_name["V100 32GB"].flash_attention_2  # Turing, Volta
    assert by_name["A100 80GB"].bf16 and not by_name["A100 80GB"].fp8 and by_name["H100 80GB"].fp8


def test_a_t4_cell_trains_in_fp16_with_sdpa_and_says_so(capsys):
    report = _report(capsys, "-g", "t4", "-g", "a100")
    for cell in _cells(report, "T4"):
        assert (cell["settings"]["dtype"], cell["settings"]["attention"]) == ("fp16", "sdpa")
        assert cell["gpu_defaults"]["changes"] == {"dtype": "fp16", "attention": "sdpa"}
    for cell in _cells(report, "A100 80GB"):
        assert (cell["settings"]["dtype"], cell["settings"]["attention"]) == ("bf16", "flash_attention_2")
        assert cell["gpu_defaults"] is None
    # the T4's cells are timed on its fp16 peak (it has no bf16 one), not left untimed
    assert any((c["time"] or {}).get("dtype") == "fp16" for c in _cells(report, "T4"))
    assert run(["example:Meta-Llama-3-8B", "-g", "t4", "-g", "a100"]) == 0
    assert "· fp16, sdpa on T4" in " ".join(capsys.readouterr().out.split())


def test_a_stated_setting_stands_with_a_warning(capsys):
    report = _report(capsys, "-g", "t4", "-g", "v100", "--dtype", "bf16")
    for cell in _cells(report, "T4") + _cells(report, "V100 32GB"):
        assert (cell["settings"]["dtype"], cell["settings"]["attention"]) == ("bf16", "sdpa")
    assert any("T4, V100 32GB have no bf16" in w for w in report["warnings"])


def test_a_user_defined_gpu_keeps_the_defaults(capsys):
    report = _report(capsys, "-g", "mycard=40")
    assert all(c["gpu_defaults"] is None and c["settings"]["dtype"] == "bf16" for c in cells(report))


def test_the_catalogue_says_what_each_gpu_runs(capsys):
    assert run(["gpus", "--format", "markdown"]) == 0
    rows = {line.split("|")[1].strip(): line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")}
    assert "fp16 SDPA\\-mem" in rows["T4"] and "bf16 fp8 FA2 FA3" in rows["H100 80GB"]
    assert "NPU\\-FA" in rows["Ascend 910B 64GB"]
