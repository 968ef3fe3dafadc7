"""One verdict per fit cell, one mark for it and one legend, on every surface: the JSON, `hfmem.fit()`, the terminal
table, markdown and the pull-request comment (the JSON once said "fits with a change" where the table said "needs
14 GPUs")."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

import hfmem
from hfmem.cli.main import run
from hfmem.memory.fit import VERDICTS
from hfmem.memory.record import cells
from hfmem.render.comment import LEGEND, Item, render
from hfmem.render.common import EMOJI, MARKS, legend
from hfmem.render.diff import verdict as diff_cell
from hfmem.render.labels import advice_text, multi_gpu_text
from hfmem.render.markdown import render as render_markdown
from hfmem.render.table import fit_cell, render as render_table

ROOT = Path(__file__).resolve().parent.parent
MODELS = [f"example:{p.name}" for p in sorted((ROOT / "hfmem" / "examples").iterdir())] + [
    str(p) for p in sorted((ROOT / "fixtures" / "configs").glob("*/*/config.json"))]
"""Every built-in example and every fixture model's config.json."""
GPUS = ("rtx4090", "t4", "h100")
"""A GeForce card without a network figure, the fp16 card with its own defaults, an NVSwitch node's GPU."""


def _report(capsys, tmp_path, monkeypatch, model: str = "example:Meta-Llama-3-8B") -> dict:
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))
    assert run([model, *(a for g in GPUS for a in ("-g", g)), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def _markdown_cells(markdown: str, methods: list[str]) -> dict[tuple[str, str], str]:
    """(method, GPU) -> the markdown table's cell text."""
    out = {}
    for line in markdown.splitlines():
        parts = [p.strip() for p in line.strip("|").split(" | ")]
        if len(parts) == len(methods) + 1 and " GiB)" in parts[0]:
            gpu = parts[0].rsplit(" (", 1)[0]
            out |= {(m, gpu): text for m, text in zip(methods, parts[1:], strict=True)}
    return out


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.removeprefix(str(ROOT) + "/"))
def test_the_json_verdict_is_the_tables_the_markdowns_and_the_apis(model, capsys, tmp_path, monkeypatch):
    report = _report(capsys, tmp_path, monkeypatch, model)
    found = cells(report)
    methods = list(dict.fromkeys(c["method"] for c in found))
    api = {(f.method, f.gpu.name): f for f in hfmem.fit(model, list(methods), gpus=list(GPUS))}
    markdown = _markdown_cells(render_markdown(report), methods)
    assert len(api) == len(found) == len(markdown)
    for cell in report["fit"]:
        key = (cell["method"], cell["gpu"])
        kind = cell["verdict"]
        assert kind in VERDICTS and api[key].verdict == kind and api[key].advice == cell["advice"]
        assert cell["fits"] == (kind == "fits")
        table_text = fit_cell(next(c for c in found if (c["method"], c["gpu"]["name"]) == key)).plain
        assert table_text.startswith(MARKS[kind] + " ") and markdown[key].startswith(MARKS[kind] + " ")
        advice = cell["advice"]
        if kind == "gpus":  # the table names the GPUs the JSON's advice asks for, nothing else
            assert advice["kind"] == "gpus" and ("→ " + multi_gpu_text(advice)) in table_text
        elif kind == "change":  # a change on the GPUs asked, with the GiB it needs
            assert advice["kind"] == "change" and advice["num_gpus"] == cell["num_gpus"]
            assert ("→ " + advice_text(cell)) in table_text
        else:
            assert (advice is None) == (kind in ("fits", "none"))


def test_each_cell_has_the_same_verdict_everywhere(capsys, tmp_path, monkeypatch):
    report = _report(capsys, tmp_path, monkeypatch)
    kinds = {fit["verdict"] for fit in cells(report)}
    assert {"fits", "change", "gpus"} <= kinds  # LoRA on an RTX 4090 needs checkpointing; full needs several GPUs
    for fit in cells(report):
        kind = fit["verdict"]
        assert fit_cell(fit).plain.startswith(MARKS[kind] + " ")
        assert diff_cell(fit).startswith(EMOJI[kind])
    assert legend() in render_markdown(report)


def test_one_legend_under_every_table(capsys, tmp_path, monkeypatch):
    report = _report(capsys, tmp_path, monkeypatch)
    out = io.StringIO()
    render_table(report, Console(file=out, width=200))
    assert legend() in out.getvalue()
    comment = render([Item("example:Meta-Llama-3-8B", "model", head=report)], "settings", 65_536)
    assert LEGEND == legend(EMOJI, batch=False) and LEGEND in comment
    assert all(legend(marks, batch).count(" · ") == 2 for marks in (MARKS, EMOJI) for batch in (True, False))
