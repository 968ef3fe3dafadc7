"""The Python API returns the objects the CLI renders, with the CLI's figures and its one-line errors."""

from __future__ import annotations

import json

import pytest

import hfmem
from hfmem.cli.main import run
from hfmem.errors import InvalidInputError
from hfmem.memory.record import cells, estimates


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))


def cli_report(capsys, *args: str) -> dict:
    assert run([*args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_estimate_is_the_clis_estimate(capsys):
    est = hfmem.estimate("example:Qwen2.5-0.5B", method="lora", seq_len=1024, micro_batch_size=2, lora_rank=8)
    cli = cli_report(capsys, "example:Qwen2.5-0.5B", "-m", "lora", "--seq-len", "1024", "-b", "2", "--lora-rank", "8",
                     "-g", "h100")
    want, (read,) = est.to_dict(), estimates(cli)
    read = {k: v for k, v in read.items() if k != "flops_per_token"}  # the report adds the FLOPs beside memory
    assert json.loads(json.dumps(want)) == read  # written complete: no field left for a reader to rebuild
    assert est.per_gpu_bytes.total == read["per_gpu_bytes"]["total"]


def test_fit_is_the_clis_matrix(capsys):
    fits = hfmem.fit("example:gpt2", ["lora", "qlora"], gpus=["t4", "h100"], gradient_checkpointing="full")
    cli = cli_report(capsys, "example:gpt2", "-m", "lora,qlora", "-g", "t4", "-g", "h100", "--gradient-checkpointing",
                     "full")
    read = cli["fit"]
    assert len(read) == len(fits)
    for fit, cell in zip(fits, read, strict=True):
        want = fit.to_dict()
        if "per_gpu_bytes" not in cell:  # written where it differs from the method's estimate only
            assert want.pop("per_gpu_bytes") == cli["estimates"][fit.method]["per_gpu_bytes"]
        assert want == {k: cell[k] for k in want} and cell["verdict"] == fit.verdict
    assert all("time" in cell for cell in read)  # the report adds each fitting cell's step time


def test_report_is_what_the_cli_prints(capsys):
    report = hfmem.report("example:gpt2", gpus=["h100"])
    assert json.loads(json.dumps(report)) == cli_report(capsys, "example:gpt2", "-g", "h100")


def test_bad_settings_raise_the_clis_error():
    with pytest.raises(InvalidInputError, match="dtype must be one of"):
        hfmem.estimate("example:gpt2", dtype="fp7")
    with pytest.raises(TypeError):
        hfmem.estimate("example:gpt2", not_a_setting=1)
    with pytest.raises(AttributeError):
        hfmem.no_such_function
