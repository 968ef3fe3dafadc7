"""`hfmem gpus` prints the catalogue the fit matrix uses, and `hfmem --help` names every command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hfmem.cli.main import run
from hfmem.hardware.gpus import catalogue
from hfmem.render.markdown import escape


def test_gpus_lists_every_catalogue_gpu_with_its_aliases(capsys):
    assert run(["gpus", "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    for gpu in catalogue():
        row = next(line for line in out.splitlines() if line.startswith(f"| {gpu.name} |"))
        assert f"| {gpu.usable_gib:g} |" in row and all(escape(a) in row for a in gpu.aliases)


def test_gpus_json_is_the_catalogue(capsys):
    assert run(["gpus", "-f", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [g["name"] for g in data["gpus"]] == [g.name for g in catalogue()] and "usable_gib" in data["units"]


def test_gpus_table_and_a_bad_flag(capsys):
    assert run(["gpus"]) == 0
    assert "H100 80GB" in capsys.readouterr().out
    assert run(["gpus", "--format", "pdf"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["hfmem scan FILE", "hfmem gpus", "hfmem --version"])
def test_help_lists_every_command(capsys, command):
    assert run(["--help"]) == 0
    assert command in " ".join(capsys.readouterr().out.split())


def test_unknown_gpu_points_at_the_catalogue(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path))
    assert run(["example:gpt2", "-g", "tpu9"]) == 2
    assert "`hfmem gpus` lists them" in capsys.readouterr().err


def test_gpus_show_the_vendor_peaks_with_their_sources(capsys):
    """bf16/fp8 TFLOP/s and bandwidth as gpus.json states them (sources in the JSON); – where none is published."""
    raw = json.loads((Path(__file__).resolve().parent.parent / "hfmem" / "hardware" / "gpus.json").read_text())
    specs = {g["name"]: g.get("specs") or {} for g in raw["gpus"]}
    assert run(["gpus", "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    for name, spec in specs.items():
        row = next(line for line in out.splitlines() if line.startswith(f"| {escape(name)} |"))
        bf16 = spec.get("bf16_tflops")
        assert (f"| {bf16:g} |" if bf16 else "| – |") in row, name
    assert run(["gpus", "-f", "json"]) == 0
    listed = {g["name"]: g["specs"] for g in json.loads(capsys.readouterr().out)["gpus"]}
    assert all(s["sources"] for s in listed.values() if s["tflops"].get("bf16")), "a peak without a source"
