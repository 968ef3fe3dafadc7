"""fixtures/serving_published.json, the rows bench/serving.py scores: each states its source (URL and the quoted
log line), a split fixed in the file, a model whose config and headers are in fixtures/hub, a GPU the catalogue
resolves, and settings ServingSettings accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hfmem.hardware.gpus import resolve_gpus
from hfmem.serving.capacity import ServingSettings

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
ROWS = json.loads((FIXTURES / "serving_published.json").read_text())["entries"]


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_a_row_states_where_it_comes_from_and_what_ran(row: dict) -> None:
    assert row["provenance"]["url"].startswith("https://") and row["provenance"]["quote"]
    assert row["split"] in {"fit", "held-out"}
    assert (FIXTURES / "hub" / row["model"] / "config.json").is_file()
    assert resolve_gpus([row["gpu"]])
    settings = ServingSettings(engine=row["engine"], **row["settings"])
    assert settings.context > 0 and row["version"]
    assert set(row["published"]) & {"kv_tokens", "kv_gib", "kv_self_mib"}


def test_rows_come_from_two_engines_and_several_sources() -> None:
    """At least 20 scored rows, vLLM's and SGLang's among them, from at least 10 sources."""
    scored = [r for r in ROWS if "excluded" not in r]
    assert len(scored) >= 20
    assert {r["engine"] for r in scored} >= {"vllm", "sglang", "llama.cpp"}
    assert min(sum(r["engine"] == e for r in scored) for e in ("vllm", "sglang")) >= 2
    assert len({r["provenance"]["url"] for r in scored}) >= 10
    assert len({r["id"] for r in ROWS}) == len(ROWS)
