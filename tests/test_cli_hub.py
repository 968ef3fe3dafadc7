"""`hfmem MODEL` end to end against the test Hub: the real huggingface_hub client, real HTTP, real errors.

Ground truth is published: `fixtures/parameter_counts.json` holds the Hub's own safetensors
parameter counts of real models, which hfmem must reproduce exactly.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from hubserver import GRANTED_TOKEN, sha_of

from hfmem.cli.main import run

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PUBLISHED = json.loads((FIXTURES / "parameter_counts.json").read_text())
PUBLISHED = {k: v for k, v in PUBLISHED.items() if not k.startswith("_")}


def hfmem(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def report(capsys, *args: str) -> dict:
    """The JSON report; these tests read the analysis (parameters, cross-check, architecture), so one GPU (H100,
    unless the test names one) keeps the fit matrix small."""
    gpu = () if "-g" in args else ("-g", "h100")
    code, out, err = hfmem(capsys, *args, *gpu, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_llama_2_70b(granted, capsys):
    data = report(capsys, "meta-llama/Llama-2-70b-hf")
    assert data["parameters"]["total"] == 68_976_648_192
    assert data["parameters"]["checkpoint_total"] == 68_976_648_192
    assert data["parameters"]["checkpoint_files"] == 15
    assert data["crosscheck"]["status"] == "exact"
    assert data["sha"] == sha_of("meta-llama/Llama-2-70b-hf")
    arch = data["architecture"]
    assert (arch["num_layers"], arch["hidden_size"], arch["num_attention_heads"], arch["num_key_value_heads"],
            arch["intermediate_size"], arch["vocab_size"]) == (80, 8192, 64, 8, 28672, 32000)
    # headers only: one API call, config + index (huggingface_hub's HEAD, then one bounded GET), one Range GET per shard
    assert granted.weight_downloads() == []
    assert len(granted.requests("/api/models/*")) == 1
    assert len(granted.requests("*.safetensors", method="GET")) <= 2 * 15  # resolve + CDN redirect hop
    assert granted.total_bytes() < 2_000_000


def test_config_json_past_the_size_bound_is_refused_unread(hub, capsys, monkeypatch):
    """A JSON file past the bound is refused after one ranged GET of at most the bound and a byte: never read whole
    (the safetensors header, read alongside the config, is the only other body)."""
    from hfmem.hub import client

    monkeypatch.setattr(client, "MAX_JSON_BYTES", 100)
    code, out, err = hfmem(capsys, "openai-community/gpt2")
    assert code == 7 and "larger than 100 bytes" in err and out == ""
    [get] = hub.requests("*/config.json", method="GET")
    others = sum(e.bytes_sent for e in hub.log if not e.path.endswith(".safetensors"))
    assert get.bytes_sent == 101 and others < 2_000


def test_the_headers_are_read_while_config_json_downloads(hub, capsys):
    """One round trip fewer per model: with config.json slow to answer, the safetensors header is answered first
    (the server logs each answer as it sends it), and the count is checked against those headers as ever."""
    hub.inject("*/config.json", latency=0.5, times=1)
    code, out, err = hfmem(capsys, "openai-community/gpt2", "-f", "json")
    assert code == 0, err
    paths = [e.path for e in hub.requests()]
    config = next(i for i, p in enumerate(paths) if p.endswith("/config.json"))
    assert any(p.endswith(".safetensors") for p in paths[:config]), paths
    report = json.loads(out)
    assert report["parameters"]["total"] == report["parameters"]["checkpoint_total"] == 124_439_808


def test_the_model_description_asks_for_the_commit_and_files_only(hub, capsys):
    """A popular model's full description lists its Spaces, card and widgets (often hundreds of kB): resolve asks
    for `sha` and `siblings` alone."""
    from urllib.parse import parse_qs

    assert report(capsys, "openai-community/gpt2")["parameters"]["total"] == 124_439_808
    [api] = hub.requests("/api/models/*")
    assert sorted(parse_qs(api.query)["expand"]) == ["sha", "siblings"]


def test_huggingface_hub_globals_are_left_alone(hub, capsys):
    """hfmem's timeout and retries are its own: no huggingface_hub constant is reassigned, even with --timeout."""
    from huggingface_hub import constants

    before = {name: getattr(constants, name) for name in dir(constants) if name.isupper()}
    assert report(capsys, "openai-community/gpt2", "--timeout", "3")["parameters"]["total"] == 124_439_808
    assert {name: getattr(constants, name) for name in before} == before


def test_table_output_shows_the_count(granted, capsys):
    code, out, _ = hfmem(capsys, "meta-llama/Llama-2-70b-hf")
    assert code == 0
    assert "68,976,648,192" in out and "agree exactly" in out


@pytest.mark.parametrize("model_id", sorted(PUBLISHED))
def test_published_counts_reproduced_exactly(granted, capsys, model_id):
    data = report(capsys, model_id)
    assert data["parameters"]["total"] == PUBLISHED[model_id]


def test_second_run_uses_the_cache(granted, capsys):
    first = report(capsys, "mistralai/Mistral-7B-v0.1")
    granted.reset_log()
    again = report(capsys, "mistralai/Mistral-7B-v0.1")
    assert [e.path for e in granted.log] == ["/api/models/mistralai/Mistral-7B-v0.1"]  # one request
    granted.reset_log()
    pinned = report(capsys, f"mistralai/Mistral-7B-v0.1@{first['sha']}")
    assert granted.log == []  # a pinned commit answers from hfmem's cache with no request at all
    assert first["parameters"] == again["parameters"] == pinned["parameters"]


def test_offline_after_one_online_run(granted, capsys, monkeypatch):
    report(capsys, "Qwen/Qwen2.5-0.5B")
    granted.reset_log()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = report(capsys, "Qwen/Qwen2.5-0.5B")
    assert data["parameters"]["total"] == 494_032_768 and granted.log == []


def test_offline_without_cache_is_a_clear_error(hub, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = hfmem(capsys, "Qwen/Qwen2.5-0.5B")
    assert code == 10 and "HF_HUB_OFFLINE" in err and hub.log == []


@pytest.mark.parametrize("value", ["1", "true", "YES"])
def test_transformers_offline_counts_as_offline(granted, capsys, monkeypatch, value):
    """huggingface_hub reads TRANSFORMERS_OFFLINE like HF_HUB_OFFLINE, with the same truthy values; so does hfmem."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", value)
    code, _, _ = hfmem(capsys, "Qwen/Qwen2.5-0.5B")
    assert code == 10 and granted.log == []
    monkeypatch.delenv("TRANSFORMERS_OFFLINE")
    report(capsys, "Qwen/Qwen2.5-0.5B")
    granted.reset_log()
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", value)
    assert report(capsys, "Qwen/Qwen2.5-0.5B")["parameters"]["total"] == 494_032_768 and granted.log == []


def test_hf_hub_offline_off_wins_over_transformers_offline(hub, capsys, monkeypatch):
    """As in huggingface_hub, a set HF_HUB_OFFLINE decides, and TRANSFORMERS_OFFLINE only stands in when it is unset."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    assert report(capsys, "openai-community/gpt2")["parameters"]["total"] == 124_439_808
    assert len(hub.requests("/api/models/*")) == 1


def test_legacy_id_resolves_to_the_renamed_repo(hub, capsys):
    data = report(capsys, "gpt2")
    assert data["model"] == "openai-community/gpt2"
    assert data["parameters"]["total"] == 124_439_808


def test_float16_branch_with_duplicated_lm_head(granted, capsys):
    data = report(capsys, "google/gemma-2b-it", "--revision", "float16")
    assert data["parameters"]["total"] == 2_506_172_416
    assert data["crosscheck"]["status"] == "explained"
    assert data["crosscheck"]["difference"] == 524_288_000
    assert "tied weight stored twice" in " ".join(data["crosscheck"]["explanations"])
    assert data["parameters"]["checkpoint_bytes"] == 6_060_920_832  # the real index's total_size


def test_deepseek_v3_mtp_layer_explained(hub, capsys):
    data = report(capsys, "deepseek-ai/DeepSeek-V3")
    check = data["crosscheck"]
    assert data["parameters"]["total"] == 671_026_404_352
    assert check["status"] == "explained", check
    assert "multi-token-prediction" in " ".join(check["explanations"])
    assert data["architecture"]["attention_kind"] == "mla" and data["architecture"]["num_experts"] == 256


def test_no_safetensors_falls_back_to_config(hub, capsys):
    data = report(capsys, "hfmem-test/no-safetensors")
    assert data["parameters"]["checkpoint_total"] is None
    assert any("No safetensors" in note for note in data["notes"])
    assert hub.weight_downloads() == []


@pytest.mark.parametrize("args, code, words", [
    (["hfmem-test/does-not-exist"], 3, "not found"),
    (["meta-llama/Llama-2-7b-hf"], 4, "gated"),
    (["openai-community/gpt2", "--revision", "no-such-branch"], 5, "no revision"),
    (["hfmem-test/bad-config"], 7, "config.json"),
    (["hfmem-test/bad-header-json"], 8, "not valid JSON"),
    (["hfmem-test/bad-header-length"], 8, "exceeds"),
    (["not a valid id"], 2, "not a valid"),
])
def test_errors_are_one_line_with_distinct_codes(hub, capsys, args, code, words):
    status, out, err = hfmem(capsys, *args)
    assert status == code, err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err
    assert out == ""


def test_gated_with_a_refused_token(hub, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_not_granted_secret")
    status, out, err = hfmem(capsys, "meta-llama/Llama-2-7b-hf")
    assert status == 4 and "refused" in err
    assert "hf_not_granted_secret" not in out + err


def test_token_flag_is_used_and_never_printed(hub, capsys):
    status, out, err = hfmem(capsys, "meta-llama/Llama-2-7b-hf", "--token", GRANTED_TOKEN, "--format", "json")
    assert status == 0
    assert GRANTED_TOKEN not in out + err
    assert all(e.token == GRANTED_TOKEN for e in hub.log if e.host == "hub")


def test_429_with_retry_after_is_honoured(hub, capsys):
    hub.inject("/api/models/*", status=429, retry_after=1, times=1)
    data = report(capsys, "openai-community/gpt2")
    assert data["parameters"]["total"] == 124_439_808
    assert [e.status for e in hub.requests("/api/models/*")] == [429, 200]


def test_persistent_5xx_gives_up_with_a_network_error(hub, capsys):
    hub.inject("/api/models/*", status=503, times=None)
    status, _, err = hfmem(capsys, "openai-community/gpt2", "--timeout", "2")
    assert status == 6 and "503" in err
    assert len(hub.requests("/api/models/*")) == 5  # the first try and 4 bounded retries


def test_unreachable_endpoint(hub, capsys, monkeypatch):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    status, _, err = hfmem(capsys, "openai-community/gpt2", "--timeout", "1")
    assert status == 6 and "cannot reach" in err


def test_stalled_server_times_out(hub, capsys):
    hub.inject("/api/models/*", stall=3, times=None)
    status, _, err = hfmem(capsys, "openai-community/gpt2", "--timeout", "0.5")
    assert status == 6 and "after waiting" in err and "--timeout 0.5s per read" in err


def test_mxfp4_packed_experts_are_explained(hub, capsys):
    data = report(capsys, "openai/gpt-oss-20b", "-g", "h100")
    check = data["crosscheck"]
    assert data["parameters"]["total"] == 20_914_757_184
    assert check["status"] == "explained", check
    assert "packed 4-bit" in " ".join(check["explanations"])
    assert set(data["parameters"]["by_dtype"]) == {"U8", "BF16"}


def test_hybrid_mamba_attention_model(hub, capsys):
    data = report(capsys, "nvidia/Nemotron-H-56B-Base-8K", "-g", "h200")
    arch = data["architecture"]
    assert arch["num_layers"] == 118 and arch["layer_types"] == {"mamba": 54, "mlp": 54, "full_attention": 10}
    assert data["crosscheck"]["status"] == "exact" and data["parameters"]["by_component"]["ssm"] > 0
