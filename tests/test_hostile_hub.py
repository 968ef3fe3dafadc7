"""A hostile Hub, end to end through `hfmem MODEL` and `hfmem scan`: bounded in time and memory, the right exit code.

Each misbehaviour comes from the test Hub (`tests/hubserver.py`, `Fault`), so the real huggingface_hub client
runs: bodies trickled a byte at a time, endless chunked bodies, gzip bombs, HTML or lists where JSON objects
belong, fields of the wrong type, headers with non-ASCII digits, and credentials in `HF_ENDPOINT`.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest

from hfmem.cli.main import run
from hfmem.hub.files import MAX_JSON_BYTES

MODEL = "openai-community/gpt2"
API = "/api/models/*"
CONFIG = "*/resolve/*/config.json"
HEADER = "*/model.safetensors"
BOUND_S = 20.0
TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256}


def hfmem(capsys, *args: str) -> tuple[int, str, float]:
    """Run the CLI; the exit code, stderr and seconds taken, stderr checked to be one error line without a traceback
    (after the status lines of requests that stalled past 2 s)."""
    capsys.readouterr()
    start = time.monotonic()
    code = run(list(args))
    elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    if code not in (0, 1):  # 1: a scan with failed models, which reports its progress too
        *waits, last = err.splitlines()
        assert last.startswith("hfmem: error:") and err.endswith("\n") and "Traceback" not in err, err
        assert all(w.startswith("hfmem: waiting ") for w in waits), err
    return code, err, elapsed


def tiny_repo(hub, repo_id: str, header: bytes | None = None, index: dict | None = None) -> str:
    """A tiny llama repo on the test Hub with the given safetensors file or index."""
    files = {"config.json": json.dumps(TINY).encode()}
    if header is not None:
        files["model.safetensors"] = header
    if index is not None:
        files["model.safetensors.index.json"] = json.dumps(index).encode()
    hub.add_repo(repo_id, files)
    return repo_id


def raw_header(table: dict) -> bytes:
    raw = json.dumps(table).encode()
    return struct.pack("<Q", len(raw)) + raw


# ---------------------------------------------------------------------- 1. an overall deadline

@pytest.mark.parametrize("pattern, host", [(API, "hub"), (HEADER, "cdn")], ids=["api", "header"])
def test_a_trickled_body_meets_the_deadline(hub, capsys, pattern, host):
    """A byte every 0.2 s never trips a 1 s read timeout; the deadline (4 x --timeout) ends it."""
    hub.inject(pattern, host=host, trickle=0.2, times=None)
    code, err, elapsed = hfmem(capsys, MODEL, "--timeout", "1")
    assert code == 6, err
    assert "127.0.0.1" in err and "gave up after" in err
    assert elapsed < BOUND_S, f"took {elapsed:.1f}s"


# ---------------------------------------------------------------------- 2. bodies capped while they stream

def test_an_endless_model_info_is_cut_at_the_cap(hub, capsys):
    hub.inject(API, endless=MAX_JSON_BYTES * 2, body=b'{"id": "a/b"}  ', times=None)
    code, err, _ = hfmem(capsys, MODEL)
    assert code == 6 and f"larger than {MAX_JSON_BYTES:,} bytes" in err, err


def test_a_gzip_bomb_as_model_info_is_cut_at_the_cap(hub, capsys):
    """Valid JSON once decoded (so before the cap it was read whole and answered)."""
    hub.inject(API, gzip_bomb=MAX_JSON_BYTES * 3, body=b'{"id": "openai-community/gpt2", "pad": "', times=None)
    code, err, _ = hfmem(capsys, MODEL)
    assert code == 6 and f"larger than {MAX_JSON_BYTES:,} bytes" in err, err


@pytest.mark.parametrize("effects", [dict(endless=MAX_JSON_BYTES * 2), dict(gzip_bomb=MAX_JSON_BYTES * 3)],
                         ids=["endless", "gzip-bomb"])
def test_a_hostile_config_json_is_refused_and_nothing_is_left_on_disk(hub, capsys, tmp_path, effects):
    hub.inject(CONFIG, method="GET", times=None, **effects)
    code, err, _ = hfmem(capsys, MODEL)
    assert code == 7 and f"larger than {MAX_JSON_BYTES:,} bytes" in err, err
    written = [p for p in (tmp_path / "hf_home").rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in written) < 1_000_000, written


def test_an_endless_model_list_is_cut_at_the_cap(hub, capsys, tmp_path):
    hub.inject("/api/models", endless=MAX_JSON_BYTES * 2, body=b'[{"id": "a/b"},' + b" " * 64, times=None)
    code, err, _ = hfmem(capsys, "scan", "--author", "openai-community", "-o", str(tmp_path / "out.jsonl"))
    assert code == 6 and f"larger than {MAX_JSON_BYTES:,} bytes" in err, err


# ---------------------------------------------------------------------- 3. the right exit code for bad input

@pytest.mark.parametrize("body, content_type", [
    (b"<!doctype html><html><body>Hugging Face is down</body></html>", "text/html"),
    (b'[{"id": "openai-community/gpt2"}]', "application/json"),
    (b'{"id": "../../x", "sha": "' + b"a" * 40 + b'", "siblings": []}', "application/json"),
    (b'{"id": "openai-community/gpt2", "sha": "' + b"a" * 40 + b'", "siblings": 5}', "application/json"),
    (b'{"id": "openai-community/gpt2", "sha": "' + b"a" * 40 + b'", "siblings": [{"rfilename": 7}]}',
     "application/json"),
    (b'{"id": "openai-community/gpt2", "sha": "../../../etc", "siblings": []}', "application/json"),
    (b'{"id": ["x"], "sha": 5}', "application/json"),
], ids=["html", "list", "id-traversal", "siblings-int", "rfilename-int", "sha-traversal", "wrong-types"])
def test_a_model_info_that_is_not_one_is_a_network_error(hub, capsys, body, content_type):
    hub.inject(API, body=body, content_type=content_type, times=None)
    code, err, _ = hfmem(capsys, MODEL)
    assert code == 6, err


def test_a_non_ascii_digit_in_content_range(hub, capsys):
    """`int("²")` fails though `"²".isdigit()` holds: an unreadable total is no total, never an internal error."""
    hub.inject(HEADER, host="cdn", headers={"Content-Range": "bytes 0-99999/\u00b2"}, times=None)
    code, err, _ = hfmem(capsys, MODEL, "--format", "json")
    assert code in (0, 6, 8), err


def test_a_dtype_that_is_a_list_is_a_malformed_checkpoint(hub, capsys):
    header = raw_header({"w": {"dtype": ["F32"], "shape": [2], "data_offsets": [0, 8]}})
    code, err, _ = hfmem(capsys, tiny_repo(hub, "acme/list-dtype", header=header))
    assert code == 8 and "dtype" in err, err


def test_a_nul_in_a_shard_name_is_a_malformed_checkpoint(hub, capsys):
    index = {"metadata": {}, "weight_map": {"w": "model\x00-1.safetensors"}}
    code, err, _ = hfmem(capsys, tiny_repo(hub, "acme/nul-shard", index=index))
    assert code == 8 and "shard name" in err, err


def test_a_nul_in_a_local_shard_name_is_a_malformed_checkpoint(capsys, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "a\x00.safetensors"}}))
    code, err, _ = hfmem(capsys, str(tmp_path))
    assert code == 8, err


@pytest.mark.parametrize("model", ["a" * 10_000, "org/" + "a" * 300, "a" * 300 + "/b@main"], ids=["10k", "300", "rev"])
def test_a_very_long_model_id_is_invalid_input(capsys, model):
    code, err, _ = hfmem(capsys, model)
    assert code == 2 and len(err) < 400, err


# ---------------------------------------------------------------------- 5. no credentials shown or stored

def test_credentials_in_the_endpoint_are_never_printed_or_stored(hub, capsys, monkeypatch, tmp_path):
    secret_endpoint = hub.url.replace("http://", "http://alice:s3cr3t-pw@")
    monkeypatch.setenv("HF_ENDPOINT", secret_endpoint)
    code, err, _ = hfmem(capsys, "acme/does-not-exist")
    assert code == 3 and hub.url in err, err
    hub.inject(API, drop=True, times=None)
    code, err, _ = hfmem(capsys, MODEL, "--timeout", "0.5")
    assert code == 6, err
    hub.clear_faults()
    out = tmp_path / "out.jsonl"
    models = tmp_path / "models.txt"
    models.write_text(f"{MODEL}\nacme/does-not-exist\n")
    code, scan_err, _ = hfmem(capsys, "scan", str(models), "-o", str(out), "--csv", str(tmp_path / "out.csv"))
    text = out.read_text() + (tmp_path / "out.csv").read_text() + scan_err + err
    assert "s3cr3t" not in text and "alice" not in text
    assert hub.url in out.read_text()
    assert all(not Path(p).is_file() or "s3cr3t" not in Path(p).read_text(errors="replace")
               for p in tmp_path.rglob("*.json*"))
