"""fixtures/published_throughput.json: every row carries its provenance, the split holds out a fifth, the figures
derived from GPU hours follow from the hours and tokens the source states."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hfmem.compute.flops import CHECKPOINTING
from hfmem.compute.roofline import SHARDINGS
from hfmem.hardware.gpus import find_gpu

ROOT = Path(__file__).resolve().parent.parent
DATA = json.loads((ROOT / "fixtures" / "published_throughput.json").read_text())
ROWS = DATA["rows"]


def test_enough_rows_from_enough_sources() -> None:
    assert len(ROWS) >= 25 and len({r["source"] for r in ROWS}) >= 4
    assert len({r["id"] for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_each_row_has_its_provenance(row: dict) -> None:
    source = DATA["sources"][row["source"]]
    assert row["url"].startswith("https://github.com/") and "/blob/" in row["url"] and source["date"][:2] == "20"
    assert row["table"] and row["framework"] and find_gpu(row["gpu"]).name == row["gpu"]
    assert row["model"] in DATA["models"] and row["checkpointing"] in CHECKPOINTING
    assert row["sharding"] is None or row["sharding"] in SHARDINGS
    assert row["published"]["tokens_per_s_per_gpu"] > 0 and row["split"] in {"fit", "held_out"}
    if "gpu_hours" in row["published"]:
        hours, tokens = row["published"]["gpu_hours"], row["published"]["tokens"]
        assert row["published"]["tokens_per_s_per_gpu"] == pytest.approx(tokens / (hours * 3600), abs=0.1)


def test_a_fifth_is_held_out_in_every_large_source() -> None:
    held = [r for r in ROWS if r["split"] == "held_out"]
    assert abs(len(held) - len(ROWS) / 5) <= 1
    assert {r["source"] for r in held} >= {"llm-foundry", "torchtitan"}


def test_model_files_exist() -> None:
    for spec in DATA["models"].values():
        assert isinstance(spec, dict) or (ROOT / spec).is_file()
