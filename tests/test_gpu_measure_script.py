"""bench/gpu_measure.py runs end to end: its --dry-run trains scaled-down models on CPU through the same code
path the GPU run uses, so the prepared script cannot rot while no GPU is at hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "gpu_measure.py"


def test_dry_run_trains_every_case_without_error(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(out)], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["settings"]["method"], r["loop"]) for r in rows] == [
        ("full", "plain"), ("lora", "plain"), ("lora", "trainer"), ("lora", "plain")]
    for row in rows:
        assert "error" not in row and "skipped" not in row, row
        assert row["bytes"]["peak"] == 0  # nothing is measured on a CPU
        assert row["step_seconds"] > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the script measures instead")
def test_without_a_gpu_it_says_so_in_one_line() -> None:
    run = subprocess.run([sys.executable, str(SCRIPT), "--measure"], capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert run.stderr.strip().splitlines() == ["gpu_measure: no CUDA device here (use --dry-run to check the script on a CPU)"]
