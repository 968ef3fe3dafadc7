"""fixtures/parallel_published.json and fixtures/throughput_multinode.json: enough rows from enough sources, each
with its provenance and a layout that adds up, its run as flags that say the same layout, and the split rule."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from hfmem.compute.flops import CHECKPOINTING
from hfmem.compute.roofline import SHARDINGS
from hfmem.hardware.gpus import find_gpu

ROOT = Path(__file__).resolve().parent.parent
MEMORY = json.loads((ROOT / "fixtures" / "parallel_published.json").read_text())
THROUGHPUT = json.loads((ROOT / "fixtures" / "throughput_multinode.json").read_text())
ENTRIES, ROWS = MEMORY["entries"], THROUGHPUT["rows"]
METRICS = {"max_memory_allocated", "max_memory_reserved", "nvidia-smi", "capacity"}


def _split(row_id: str) -> str:
    """The documented rule: held out when the first byte of sha256(id) is divisible by 5."""
    return "held_out" if hashlib.sha256(row_id.encode()).digest()[0] % 5 == 0 else "fit"


def _flag(flags: list[str], name: str) -> str:
    """The value after `name` in a flag list."""
    return flags[flags.index(name) + 1]


def test_enough_rows_from_enough_sources() -> None:
    assert len(ENTRIES) >= 40 and len({e["id"].split("/")[0] for e in ENTRIES}) >= 4
    assert len(ROWS) >= 20 and len({r["source"] for r in ROWS}) >= 3
    assert len({e["id"] for e in ENTRIES}) == len(ENTRIES) and len({r["id"] for r in ROWS}) == len(ROWS)
    assert MEMORY["not_entered"] and THROUGHPUT["not_entered"]


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_each_memory_row_has_provenance_a_layout_and_its_flags(entry: dict) -> None:
    prov, layout, args = entry["provenance"], entry["layout"], entry["run"]["args"]
    assert prov["url"].startswith("https://") and prov["quote"] and prov["rank"] and prov["date_read"][:2] == "20"
    assert prov["metric"] in METRICS and entry["kind"] in {"measured", "lower_bound", "upper_bound"} and entry["measured_gib"] > 0
    assert (ROOT / entry["run"]["model"]).is_file() and entry["split"] == _split(entry["id"])
    assert layout["tp"] * layout["pp"] * layout["cp"] * layout["dp"] == layout["num_gpus"]
    assert layout["micro_batch"] * layout["dp"] * layout["grad_accum"] == layout["global_batch"]
    assert int(_flag(args, "--num-gpus")) == layout["num_gpus"] and int(_flag(args, "--tp")) == layout["tp"]
    assert int(_flag(args, "--pp")) == layout["pp"] and int(_flag(args, "--cp")) == layout["cp"]
    assert int(_flag(args, "--batch-size")) == layout["micro_batch"]
    assert int(_flag(args, "--grad-accum")) == layout["grad_accum"]
    assert ("--sequence-parallel" in args) == layout["sequence_parallel"]
    assert layout["schedule"] == (_flag(args, "--pp-schedule") if layout["pp"] > 1 else None)
    assert all({"setting", "value", "from"} <= set(i) for i in entry["inferred"])


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_each_throughput_row_has_provenance_a_layout_and_its_flags(row: dict) -> None:
    layout, flags = row["layout"], row["flags"]
    assert row["source"] in THROUGHPUT["sources"] and (ROOT / THROUGHPUT["models"][row["model"]]).is_file()
    assert row["provenance"]["quote"] and row["provenance"]["url"].startswith("https://")
    assert find_gpu(row["gpu"]).name == row["gpu"] and row["num_gpus"] > 8
    assert row["checkpointing"] in CHECKPOINTING and row["sharding"] in SHARDINGS
    published = row["published"]
    assert published["tokens_per_s_per_gpu"] or published["mfu"] or published["model_tflops_per_gpu"]
    assert row["split"] == _split(row["id"])
    product = layout["tp"] * layout["pp"] * layout["cp"] * layout["dp"]
    assert product == row["num_gpus"] or "inconsistent as printed" in row["notes"]
    if flags is not None:
        assert int(_flag(flags, "--num-gpus")) == row["num_gpus"] and int(_flag(flags, "--tp")) == layout["tp"]
        assert int(_flag(flags, "--batch-size")) == row["micro_batch"]
        assert int(_flag(flags, "--grad-accum")) == row["grad_accum"]
