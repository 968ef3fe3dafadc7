"""`hfmem gpus` prints the catalogue the fit matrix uses, and `hfmem --help` names every command."""

from __future__ import annotations

import json
import re
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


PRICES = json.loads((Path(__file__).resolve().parent.parent / "hfmem" / "hardware" / "prices.json").read_text())


def test_every_default_price_is_a_catalogue_gpu_s_with_a_dated_source_and_its_listed_figure():
    """Each price is the listed figure per GPU, or the listed instance price over its GPU count; as_of is the oldest
    date read; every source is a public URL with a date."""
    names = {g.name for g in catalogue()}
    for name, entry in PRICES["prices"].items():
        assert name in names, name
        source = PRICES["sources"][entry["source"]]
        assert source["url"].startswith("https://") and re.fullmatch(r"\d{4}-\d{2}-\d{2}", source["read"])
        per_gpu = re.fullmatch(r".*: \$([0-9.]+) per GPU per hour", entry["listed"])
        instance = re.fullmatch(r".*: \$([0-9.]+) per hour, ([0-9]+) GPUs?", entry["listed"])
        assert per_gpu or instance, entry["listed"]
        listed = float(per_gpu[1]) if per_gpu else float(instance[1]) / int(instance[2])
        assert entry["usd_per_gpu_hour"] == pytest.approx(listed, abs=1e-9), name
    assert PRICES["as_of"] == min(s["read"] for s in PRICES["sources"].values())


def test_gpus_show_the_default_prices_their_date_and_sources(capsys):
    assert run(["gpus", "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    for gpu in catalogue():
        row = next(line for line in out.splitlines() if line.startswith(f"| {escape(gpu.name)} |"))
        entry = PRICES["prices"].get(gpu.name)
        assert row.endswith(f"| {entry['usd_per_gpu_hour']:g} | {escape(', '.join(gpu.aliases))} |" if entry
                            else f"| – | {escape(', '.join(gpu.aliases))} |"), gpu.name
    text = " ".join(out.split())
    assert f"table of {escape(PRICES['as_of'])}" in text
    assert all(escape(s["url"]) in text and escape(s["read"]) in text for s in PRICES["sources"].values())
    assert run(["gpus", "-f", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["prices"]["as_of"] == PRICES["as_of"]
    assert {g["name"]: g["price"] for g in data["gpus"] if g["price"]} == PRICES["prices"]


def test_a_given_price_replaces_the_default_and_a_gpu_without_one_has_no_cost(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path))
    unpriced = next(g.name for g in catalogue() if g.name not in PRICES["prices"])
    priced = next(g.name for g in catalogue() if g.name in PRICES["prices"])
    capsys.readouterr()
    assert run(["example:gpt2", "-f", "json", "--tokens", "1e8", "-g", priced, "-g", unpriced]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["prices"]["by_gpu"] == {priced: [PRICES["prices"][priced]["usd_per_gpu_hour"],
                                                   PRICES["prices"][priced]["source"]]}
    assert run(["example:gpt2", "-f", "json", "--tokens", "1e8", "-g", priced, "--price", f"{priced}=0.5"]) == 0
    assert json.loads(capsys.readouterr().out)["prices"]["by_gpu"] == {priced: [0.5, "given"]}
