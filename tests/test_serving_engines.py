"""Engine rules that read the device or the config rather than the KV layout (hfmem.serving.capacity): vLLM's batch
defaults by card (EngineArgs.get_batch_defaults leaves A100s on the small ones) and the RoPE cos/sin table vLLM
builds beside the weights. Pure arithmetic on fixture configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hfmem.hardware.gpus import resolve_gpus
from hfmem.model.architecture import read_architecture
from hfmem.serving.capacity import (
    ServingSettings,
    estimate,
    llama_cpp_swa_cells,
    rope_cache_bytes,
    vllm_large_batch_defaults,
)
from hfmem.serving.engines import ENGINES
from hfmem.serving.kv import kv_layout
from hfmem.serving.weights import MXFP4_MARLIN_ARCHS, mxfp4_marlin_padding

HUB = Path(__file__).resolve().parent.parent / "fixtures" / "hub"


def arch(model: str):
    return read_architecture(json.loads((HUB / model / "config.json").read_text()))


@pytest.mark.parametrize(("gpu", "large"), [("h100", True), ("h200", True), ("a100-80gb", False),
                                            ("a100-40gb", False), ("l4", False), ("A100 80GB=79.15", False)])
def test_vllm_takes_the_large_batch_defaults_on_big_cards_but_a100(gpu: str, large: bool) -> None:
    (card,) = resolve_gpus([gpu])
    assert vllm_large_batch_defaults(card.usable_bytes, card.name) is large


def test_an_a100_profiles_2048_tokens_and_256_sequences() -> None:
    """The same 80 GiB under an A100's name and an H100's: the A100's dummy sampler runs 256 rows, not 1,024."""
    llama = arch("meta-llama/Meta-Llama-3-8B")
    layout = kv_layout(llama, {}, 2)
    settings = ServingSettings(engine="vllm", context=8192)
    a100 = estimate(llama, 15 << 30, layout, 80 << 30, settings, "A100 80GB")
    h100 = estimate(llama, 15 << 30, layout, 80 << 30, settings, "H100 80GB")
    peak = {name: next(t for t in result.terms if t.kind == "activation")
            for name, result in (("a100", a100), ("h100", h100))}
    assert "max_num_batched_tokens=2,048" in peak["a100"].why and "max_num_seqs=256" in peak["a100"].why
    assert "max_num_batched_tokens=8,192" in peak["h100"].why and "max_num_seqs=1,024" in peak["h100"].why
    assert a100.kv_bytes > h100.kv_bytes


def test_the_rope_table_is_what_llama_3_1_loads_more_than_llama_3() -> None:
    """vLLM logged 'Loading model weights took 14.9888 GB' for Llama-3.1-8B (vllm#10517) and 14.9595 GB for
    Llama-3-8B (vllm#12330): the same weights, 131,072 against 8,192 positions of a 128-wide bf16 table."""
    long = rope_cache_bytes(arch("meta-llama/Llama-3.1-8B"))
    short = rope_cache_bytes(arch("meta-llama/Meta-Llama-3-8B"))
    assert (long, short) == (131072 * 128 * 2, 8192 * 128 * 2)
    assert (long - short) / 2**30 == pytest.approx(14.9888 - 14.9595, abs=1e-4)


def test_the_rope_table_is_a_weights_term_of_vllm_only() -> None:
    llama = arch("meta-llama/Llama-3.1-8B")
    layout = kv_layout(llama, {}, 2)
    for engine, has in (("vllm", True), ("sglang", False), ("llama.cpp", False)):
        result = estimate(llama, 15 << 30, layout, 80 << 30, ServingSettings(engine=engine), "H100 80GB")
        weights = [t.bytes for t in result.terms if t.kind == "weights"]
        assert weights == ([15 << 30, 131072 * 128 * 2] if has else [15 << 30])


@pytest.mark.parametrize(("window", "n_ctx", "ubatch", "cells"), [
    (128, 131072, 1024, 1152),     # gpt-oss: 128 + 1,024, already a multiple of 32
    (4096, 8192, 512, 4608),       # Gemma-2's 4,096 window and a 512-token ubatch
    (4096, 2048, 512, 2048),       # never more than the context
    (1000, 65536, 100, 1120),      # 1,100 padded to 32
])
def test_llama_cpp_keeps_a_padded_window_and_an_ubatch_per_sliding_layer(window, n_ctx, ubatch, cells) -> None:
    assert llama_cpp_swa_cells(window, n_ctx, ubatch) == cells


@pytest.mark.parametrize("profile", [p for p in ENGINES.values() if p.defaults], ids=lambda p: p.name)
def test_the_serving_doc_states_each_profiles_defaults(profile) -> None:
    """docs/serving.md's profile table gives every default the profile takes: one value, stated once per row."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "serving.md").read_text()
    (row,) = [line for line in doc.splitlines() if line.startswith(f"| **{profile.name}**")]
    for key, default in profile.defaults.items():
        value = f"{default.value:g}"
        assert value in row, (key, value)


def test_vllm_pads_mxfp4_experts_for_marlin_on_ampere_and_ada_only() -> None:
    """gpt-oss-20b's 32 experts x 24 layers as Marlin allocates them: 2,880 -> 2,944 (a multiple of 128) and
    2,880 -> 3,072 (of 256), 4.25 bits per weight and bf16 biases; a 16-bit checkpoint is not padded."""
    oss = arch("openai/gpt-oss-20b")
    config = json.loads((HUB / "openai/gpt-oss-20b" / "config.json").read_text())
    per_expert = 3 * (2944 * 3072 - 2880 * 2880) * 17 / 32 + 2 * (2 * (2944 - 2880) + (3072 - 2880))
    assert mxfp4_marlin_padding(oss, config) == 24 * 32 * per_expert
    assert mxfp4_marlin_padding(oss, {**config, "quantization_config": None}) == 0
    assert {card.arch for card in resolve_gpus(["a100", "l4", "rtx4090"])} <= MXFP4_MARLIN_ARCHS
    assert not {card.arch for card in resolve_gpus(["h100", "b200"])} & MXFP4_MARLIN_ARCHS
