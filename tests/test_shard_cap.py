"""A checkpoint index naming more shards than any real model (constants.MAX_SHARDS), and a model whose reads pass
the request budget (constants.MAX_HUB_REQUESTS): each a one-line error, exit 8, after a handful of requests rather
than 40,003. The real Hub client runs against the test Hub (tests/hubserver.py)."""

from __future__ import annotations

import json
import struct
import time

import pytest

from hfmem import constants
from hfmem.cli.main import run
from hfmem.errors import ExitCode

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256}


def shard(name: str) -> bytes:
    """A real safetensors file holding one small tensor called `name` (its data zeros)."""
    raw = json.dumps({name: {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    return struct.pack("<Q", len(raw)) + raw + bytes(16)


def sharded_repo(hub, repo_id: str, shards: int) -> None:
    """A tiny llama whose index names `shards` real shard files, one tensor each."""
    names = [f"model-{n:05d}-of-{shards:05d}.safetensors" for n in range(1, shards + 1)]
    weight_map = {f"extra.{n}.weight": name for n, name in enumerate(names)}
    files = {"config.json": json.dumps(TINY).encode(),
             "model.safetensors.index.json": json.dumps({"metadata": {}, "weight_map": weight_map}).encode()}
    files |= {name: shard(tensor) for tensor, name in weight_map.items()}
    hub.add_repo(repo_id, files)


def hfmem(capsys, *args: str) -> tuple[int, str]:
    """Run the CLI; its exit code and its one error line (checked to be one line, no traceback)."""
    capsys.readouterr()
    code = run(list(args))
    err = capsys.readouterr().err
    if code:
        assert err.count("\n") == 1 and err.startswith("hfmem: error:") and "Traceback" not in err, err
    return code, err


def test_an_index_naming_20000_real_shards_is_refused_before_any_header(hub, capsys):
    sharded_repo(hub, "hostile/many-shards", 20_000)
    started = time.monotonic()
    code, err = hfmem(capsys, "hostile/many-shards", "--format", "json")
    assert code == ExitCode.MALFORMED_CHECKPOINT == 8, err
    assert f"names 20,000 shard files, over the {constants.MAX_SHARDS:,}" in err
    assert not hub.requests("*.safetensors")  # no header was read
    assert hub.total_requests() <= 4  # resolve, config.json, the index (and nothing more)
    assert time.monotonic() - started < 20  # 37 s before the cap, on a 2-core machine


def test_a_local_index_naming_too_many_shards_is_refused(tmp_path, capsys):
    """The cap is in the index reader the Hub and local directories share."""
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    weight_map = {f"w.{n}": f"model-{n:05d}-of-09999.safetensors" for n in range(constants.MAX_SHARDS + 1)}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    code, err = hfmem(capsys, str(tmp_path), "--format", "json")
    assert code == 8 and f"names {constants.MAX_SHARDS + 1:,} shard files" in err, err


def test_every_hub_request_counts_against_the_budget_retries_too(hub, capsys, monkeypatch, tmp_path):
    """Four shards take 7 requests (resolve, config.json, index, four headers, each of those four following the
    test Hub's redirect to its CDN: 11 HTTP requests); ten 429s answered at once are ten retries more, 17 requests
    in all: past a budget the model fails, within the default it is analysed. The cold run's budget is 6: every
    header thread would need more than that to spend its own five attempts, so the budget is met first however the
    threads interleave (with 12, one thread could spend its five attempts on 429s first: exit 6, seen under load)."""
    from hfmem.hub import client

    sharded_repo(hub, "hostile/four-shards", 4)
    code, err = hfmem(capsys, "hostile/four-shards", "--format", "json")
    assert code == 0, err
    assert hub.total_requests() == 3 + 2 * 4
    monkeypatch.setattr(client, "MAX_HUB_REQUESTS", 12)
    hub.reset_log()
    code, err = hfmem(capsys, "hostile/four-shards", "--format", "json")  # hfmem's cache answers after resolving
    assert code == 0 and hub.total_requests() == 1, err
    hub.reset_log()
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cold"))  # a cold cache: every file is read again
    monkeypatch.setattr(client, "MAX_HUB_REQUESTS", 6)
    hub.inject("*.safetensors", status=429, retry_after=0, times=10)
    code, err = hfmem(capsys, "hostile/four-shards", "--format", "json")
    assert code == 8, err
    assert "hostile/four-shards: over 6 Hub requests for one model, retries included" in err
    assert len(hub.requests("*/resolve/*")) <= 12 + 4  # threads already past the count finish their request


@pytest.mark.parametrize("shards", [1, 40])
def test_real_shard_counts_still_read(hub, capsys, shards):
    sharded_repo(hub, f"ok/shards-{shards}", shards)
    code, err = hfmem(capsys, f"ok/shards-{shards}", "--format", "json")
    assert code == 0, err
