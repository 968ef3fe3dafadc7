"""The napkin rule "6 × params(B) GB" is shown as a contrast only: in GiB like the table, beside each method's own
figure from the table, with each method's own bytes per parameter (it was one line about full fine-tuning, mixing GB and GiB)."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from hfmem.cli.main import run
from hfmem.render.labels import short_gib
from hfmem.memory.record import cells, estimates
from hfmem.render.common import napkin_line
from hfmem.render.table import render
from hfmem.units import GIB


@pytest.fixture
def report(capsys, tmp_path, monkeypatch) -> dict:
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))
    assert run(["example:Meta-Llama-3-8B", "-g", "h100", "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_napkin_line_is_in_gib_beside_each_methods_table_figure(report):
    line = napkin_line(report)
    assert " GB;" not in line and line.endswith(" GiB") and "napkin: 44.9 GiB" in line
    for fit in cells(report):
        assert short_gib(fit["total_bytes"]) in line
    out = io.StringIO()
    render(report, Console(file=out, width=80))
    assert line in out.getvalue().replace("\n", " ") or line in out.getvalue()


def test_napkin_is_the_models_own_count_for_every_method(report):
    params = report["parameters"]["total"]
    napkins = {e["rule_of_thumb"]["napkin_gib"] for e in estimates(report)}
    assert napkins == {round(6 * params / GIB, 2)}


def test_bytes_per_parameter_fit_the_method(report):
    """Mixed-precision AdamW holds 16 bytes per trained parameter; LoRA and QLoRA hold the frozen base and little else."""
    by_method = {e["method"]: e["rule_of_thumb"] for e in estimates(report)}
    assert by_method["full"]["model_state_bytes_per_param"] == pytest.approx(16, abs=0.01)
    assert by_method["qlora"]["model_state_bytes_per_param"] < by_method["lora"]["model_state_bytes_per_param"] < 6
