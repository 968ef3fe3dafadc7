"""`hfmem serve MODEL` end to end against the test Hub (the real huggingface_hub client over HTTP): the weights are
the headers' bytes, the KV pool what the engine leaves, the cells name the change that would fit, and bad input
is one line and a non-zero exit. Every model family the issue names answers: Llama-3, Mixtral, DeepSeek (MLA),
Gemma-2 and Mistral (sliding windows), Nemotron-H (Mamba hybrid), gpt-oss (MXFP4), DeepSeek-V3 (FP8) and the
AWQ/GPTQ checkpoints."""

from __future__ import annotations

import json

import pytest

from hfmem.cli.main import run
from hfmem.errors import ExitCode
from hfmem.units import GIB


def hfmem(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def serve(capsys, *args: str) -> dict:
    code, out, err = hfmem(capsys, "serve", *args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_llama_3_8b_on_h100_and_l4(granted, capsys):
    data = serve(capsys, "meta-llama/Meta-Llama-3-8B", "-g", "h100", "-g", "l4", "--engine", "vllm",
                 "--context", "16000")
    assert data["sizes"]["weights_total_bytes"] == 16_060_522_496  # the BF16 headers, every tensor
    assert data["sizes"]["kv"]["full_bytes_per_token"] == 32 * 2 * 8 * 128 * 2
    h100, l4 = data["gpus"]
    for row in (h100, l4):
        terms = {t["name"]: t["bytes"] for t in row["terms"]}
        assert row["kv_bytes"] == pytest.approx(row["budget_bytes"] - sum(terms.values()), abs=1)
        assert row["kv_tokens"] == row["kv_bytes"] // (16 * 131072) * 16  # whole 16-token blocks
        assert row["concurrency_at_context"] == pytest.approx(row["kv_bytes"] / (16000 * 131072), rel=1e-3)
        assert row["cell"].startswith("✓") and row["cell"].endswith("at 16K")
    assert h100["kv_tokens"] > 8 * l4["kv_tokens"]


def test_the_text_explains_each_term(granted, capsys):
    code, out, _ = hfmem(capsys, "serve", "meta-llama/Meta-Llama-3-8B", "-g", "l4", "--context", "16000")
    assert code == 0
    for words in ("weights:", "activation peak:", "outside torch:", "gpu_memory_utilization=0.9", "KV tokens"):
        assert words in out


@pytest.mark.parametrize(("model", "gpu", "cell"), [
    ("mistralai/Mixtral-8x7B-v0.1", "h100", "✗ → TP2"),        # 87 GiB of weights
    ("deepseek-ai/DeepSeek-V2-Lite", "h100", "✓"),
    ("google/gemma-2-9b", "l4", "✗ → TP2"),                     # 17 GiB of weights, 1.7 GiB left for 16K tokens
    ("mistralai/Mistral-7B-v0.1", "l4", "✓"),
    ("nvidia/Nemotron-H-56B-Base-8K", "h100", "✗ → TP2"),
    ("openai/gpt-oss-20b", "l4", "✓"),
    ("hfmem-test/Meta-Llama-3-8B-AWQ", "l4", "✓"),
    ("hfmem-test/Meta-Llama-3-8B-GPTQ", "l4", "✓"),
])
def test_every_family_answers(granted, capsys, model, gpu, cell):
    data = serve(capsys, model, "-g", gpu, "--context", "16000")
    assert data["gpus"][0]["cell"].startswith(cell)


def test_a_cache_that_fits_in_fp8_says_so(granted, capsys):
    """Llama-3-8B on an L4 holds 35K tokens of a bf16 cache: 60K tokens fit only in fp8."""
    data = serve(capsys, "meta-llama/Meta-Llama-3-8B", "-g", "l4", "--context", "60000")
    assert data["gpus"][0]["cell"] == "⚠ → fp8 KV"


def test_vllm_keeps_a_window_and_a_chunk_per_sliding_layer(granted, capsys):
    """gpt-oss-20b's 128-token window: vLLM keeps window - 1 + max_num_batched_tokens (2048 on an L4) tokens and a
    block more per sliding layer, so one 16,000-token request costs 12 layers x 16,000 + 12 x 2,192 tokens."""
    data = serve(capsys, "openai/gpt-oss-20b", "-g", "l4", "--context", "16000")
    row, kv = data["gpus"][0], data["sizes"]["kv"]
    per_request = kv["full_bytes_per_token"] * 16000 + kv["window_bytes_per_token"] * (137 * 16)
    assert row["concurrency_at_context"] == pytest.approx(row["kv_bytes"] / per_request, rel=1e-3)


def test_an_fp8_checkpoint_is_counted_as_stored(granted, capsys):
    """DeepSeek-V3's FP8 weights with their F32 block scales: 641 GiB, more than 8 H100s hold."""
    data = serve(capsys, "deepseek-ai/DeepSeek-V3", "-g", "h100", "--tp", "8")
    assert "F8_E4M3" in data["sizes"]["weights_source"]
    assert 640 * GIB < data["sizes"]["weights_total_bytes"] < 645 * GIB
    assert data["gpus"][0]["cell"] == "✗ → TP16"


def test_a_mamba_hybrid_keeps_a_state_per_sequence(granted, capsys):
    data = serve(capsys, "nvidia/Nemotron-H-56B-Base-8K", "-g", "h200", "--tp", "2", "--concurrency", "4")
    kv = data["sizes"]["kv"]
    assert kv["state_layers"] == 54 and kv["full_layers"] == 10
    assert kv["state_bytes_per_sequence"] > 0
    row = data["gpus"][0]
    share = row["kv_bytes"] / 4 - kv["state_bytes_per_sequence"]
    assert row["context_at_concurrency"] == int(share / kv["full_bytes_per_token"] // 16 * 16)


def test_fp8_kv_and_quantization_change_the_terms(granted, capsys):
    auto = serve(capsys, "meta-llama/Meta-Llama-3-8B", "-g", "l4")
    fp8 = serve(capsys, "meta-llama/Meta-Llama-3-8B", "-g", "l4", "--kv-cache-dtype", "fp8")
    awq = serve(capsys, "meta-llama/Meta-Llama-3-8B", "-g", "l4", "--quantization", "awq")
    assert fp8["sizes"]["kv"]["full_bytes_per_token"] * 2 == auto["sizes"]["kv"]["full_bytes_per_token"]
    assert fp8["gpus"][0]["kv_tokens"] == pytest.approx(2 * auto["gpus"][0]["kv_tokens"], abs=16)
    assert awq["sizes"]["weights_total_bytes"] == 5_727_854_592  # the AutoAWQ checkpoint's bytes exactly


def test_llama_cpp_offloads_the_layers_ngl_names(granted, capsys):
    """-ngl 16 of Llama-3-8B's 32 layers: half the weights and half of each token's KV cells on the GPU."""
    args = ("meta-llama/Meta-Llama-3-8B", "-g", "l4", "--engine", "llama.cpp", "--quantization", "q4_k")
    full, half = serve(capsys, *args), serve(capsys, *args, "-ngl", "16")
    weights = [next(t["bytes"] for t in d["gpus"][0]["terms"] if t["kind"] == "weights") for d in (full, half)]
    assert weights[1] == pytest.approx(weights[0] / 2, abs=1)
    assert half["sizes"]["kv"]["full_bytes_per_token"] * 2 == full["sizes"]["kv"]["full_bytes_per_token"]


def test_sglang_uses_its_memory_fraction_rule(granted, capsys):
    """H100 (81,559 MiB): reserve max(512 + 1.5 x 8192 + 2 x 256 + 1024 / 8, 10 GiB) = 13,440 MiB -> 0.835."""
    data = serve(capsys, "meta-llama/Meta-Llama-3-8B", "-g", "h100", "--engine", "sglang")
    assert "mem_fraction_static=0.835" in data["gpus"][0]["notes"][0]


@pytest.mark.parametrize(("args", "words"), [
    (["--engine", "tgi"], "--engine must be one of"),
    (["--kv-cache-dtype", "int3"], "--kv-cache-dtype must be one of"),
    (["--quantization", "q1"], "--quantization must be one of"),
    (["--tp", "0"], "--tp must be at least 1"),
    (["--memory-fraction", "1.5"], "--memory-fraction must be in"),
    (["-ngl", "10"], "--n-gpu-layers is llama.cpp's -ngl"),
])
def test_bad_input_is_one_line(capsys, args, words):
    code, out, err = hfmem(capsys, "serve", "example:gpt2", *args)
    assert code == ExitCode.INVALID_INPUT
    assert out == "" and words in err and err.count("\n") == 1
