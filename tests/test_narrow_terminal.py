"""The fit matrix reads without wrapped rows at 80 columns: the grid where it fits, else one method at a time."""

from __future__ import annotations

import pytest

from hfmem.cli.main import run
from hfmem.hardware.gpus import catalogue

MARKS = ("✓", "⚠", "✗")


def _table(capsys, monkeypatch, columns: int) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(columns))
    assert run(["example:Llama-2-70b-hf"]) == 0
    out = capsys.readouterr().out.splitlines()
    return out[:next(i for i, line in enumerate(out) if line.startswith("✓ fits"))]  # up to the legend


@pytest.mark.parametrize("columns", [80, 60])
def test_every_row_of_a_narrow_terminal_is_one_line(capsys, monkeypatch, columns):
    lines = _table(capsys, monkeypatch, columns)
    names = [g.name for g in catalogue()]
    cells = [line for line in lines if any(m in line for m in MARKS)]
    assert all(len(line) <= columns for line in lines)
    assert cells and all(any(name in line for name in names) for line in cells), "a wrapped row"
    assert all("→" not in line or any(m in line for m in MARKS) for line in lines), "a suggestion on a line of its own"
    for name in names:  # each GPU once per method
        assert sum(line.lstrip().startswith(name + " ") for line in cells) == 3


def test_a_wide_terminal_keeps_the_grid(capsys, monkeypatch):
    lines = _table(capsys, monkeypatch, 130)
    assert any("GPU (usable GiB)" in line and "QLoRA" in line for line in lines)
    assert sum(line.lstrip().startswith("H100 80GB ") for line in lines) == 1
