"""One verdict per fit cell, one mark for it and one legend, on every surface: the terminal table, markdown and the
pull-request comment (a cell that fits with a one-GPU change was ✗ in the terminal and ⚠️ in the comment)."""

from __future__ import annotations

import io
import json

from rich.console import Console

from hfmem.cli.main import run
from hfmem.memory.advice import VERDICTS, verdict
from hfmem.render.comment import LEGEND, Item, render
from hfmem.render.common import EMOJI, MARKS, legend
from hfmem.render.diff import verdict as diff_cell
from hfmem.render.markdown import render as render_markdown
from hfmem.render.table import fit_cell, render as render_table
from hfmem.memory.record import cells


def _report(capsys, tmp_path, monkeypatch) -> dict:
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))
    assert run(["example:Meta-Llama-3-8B", "-g", "rtx4090", "-g", "h100", "-g", "t4", "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_each_cell_has_the_same_verdict_everywhere(capsys, tmp_path, monkeypatch):
    report = _report(capsys, tmp_path, monkeypatch)
    kinds = {verdict(fit) for fit in cells(report)}
    assert {"fits", "change", "gpus"} <= kinds  # LoRA on an RTX 4090 needs checkpointing; full needs several GPUs
    for fit in cells(report):
        kind = verdict(fit)
        assert kind in VERDICTS
        assert fit_cell(fit).plain.startswith(MARKS[kind] + " ")
        assert diff_cell(fit).startswith(EMOJI[kind])
    markdown = render_markdown(report)
    for fit in cells(report):
        assert f"| {MARKS[verdict(fit)]} " in markdown
    assert legend() in markdown


def test_one_legend_under_every_table(capsys, tmp_path, monkeypatch):
    report = _report(capsys, tmp_path, monkeypatch)
    out = io.StringIO()
    render_table(report, Console(file=out, width=200))
    assert legend() in out.getvalue()
    comment = render([Item("example:Meta-Llama-3-8B", "model", head=report)], "settings", 65_536)
    assert LEGEND == legend(EMOJI, batch=False) and LEGEND in comment
    assert all(legend(marks, batch).count(" · ") == 2 for marks in (MARKS, EMOJI) for batch in (True, False))
