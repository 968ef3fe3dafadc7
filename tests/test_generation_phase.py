"""The generation phase against real model.generate calls of scaled-down real models on CPU: the peak of live
tensors over the resident weights (LiveBytes) is what memory.generation predicts, at a short prompt with a long
completion (the KV cache is the peak) and at a long prompt with a short one (the prefill forward is)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from live_peak import LiveBytes  # noqa: E402
from saved_activations import build_model  # noqa: E402
from tiny_models import tiny_config  # noqa: E402

from hfmem.memory.generation import generation_bytes  # noqa: E402
from hfmem.memory.settings import TrainingSettings  # noqa: E402
from hfmem.model.architecture import read_architecture  # noqa: E402

CACHE, PREFILL = (8, 4, 16, 112), (2, 4, 96, 32)
"""(layers, batch, prompt tokens, new tokens): the KV cache is the peak, then the prefill forward is."""
FAMILIES = ["meta-llama/Meta-Llama-3-8B", "Qwen/Qwen2.5-0.5B", "google/gemma-2b", "microsoft/phi-2",
            "mistralai/Mistral-7B-v0.1", "mistralai/Mixtral-8x7B-v0.1", "deepseek-ai/DeepSeek-V3"]
CACHED = ("meta-llama/Meta-Llama-3-8B", "microsoft/phi-2", "mistralai/Mistral-7B-v0.1", "deepseek-ai/DeepSeek-V3")
CASES = [(m, PREFILL) for m in FAMILIES] + [(m, CACHE) for m in CACHED]
"""The prefill of every family; the cache of grouped K/V heads, of full heads with partial RoPE, of a sliding-window
model, of multi-head latent attention (the cache's count does not depend on the MLP, and its 112 decoding steps are
among the suite's slowest parts)."""
KERNEL_DIMS = {"deepseek-ai/DeepSeek-V3": {"v_head_dim": 48}}
"""DeepSeek's values as wide as its keys (48: 32 without RoPE, 16 with), so CPU SDPA runs its flash kernel rather
than the math fallback, whose fp32 copies of q, k and v no GPU kernel makes (its prefill's MoE, at 4 x 96 tokens of
hidden 256 and expert width 64, peaks back at hidden width: the fp32 weighted outputs and their copy in token
order)."""


def generate_peak(model: torch.nn.Module, batch: int, prompt: int, new: int) -> int:
    """Bytes alive at the peak of one greedy model.generate over the weights, buffers and prompts."""
    ids = torch.randint(0, model.config.vocab_size, (batch, prompt), generator=torch.Generator().manual_seed(0))
    tracker = LiveBytes()
    model.eval()
    with tracker:
        tracker.adopt(list(model.parameters()) + list(model.buffers()) + [ids], "resident")
        tracker.reset_peak()
        resident = tracker.current
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, use_cache=True,
                                 pad_token_id=0)
        del out
    return tracker.peak - resident


@pytest.mark.parametrize(("model_id", "shape"), CASES,
                         ids=[f"{m.split('/')[1]}-{'cache' if s == CACHE else 'prefill'}" for m, s in CASES])
def test_the_generate_peak_is_predicted(model_id, shape):
    layers, batch, prompt, new = shape
    config = tiny_config(model_id, layers, **KERNEL_DIMS.get(model_id, {}))
    measured = generate_peak(build_model(config, "sdpa", torch.bfloat16), batch, prompt, new)
    settings = TrainingSettings(method="full", dtype="bf16-pure", generation_batch_size=batch,
                                generation_tokens=new).validated()
    predicted = generation_bytes(read_architecture(config), settings, prompt + new)
    assert predicted == pytest.approx(measured, rel=0.05), (predicted, measured)


WINDOWED = {"every layer": ("mistralai/Mistral-7B-v0.1", {"sliding_window": 64}),
            "half the layers": ("Qwen/Qwen2.5-0.5B", {
                "use_sliding_window": True, "sliding_window": 64,
                "layer_types": ["full_attention"] * 4 + ["sliding_attention"] * 4})}
"""A 64-token window, shorter than the 128 tokens generated to: Mistral's (a window without layer types slides in
every layer) and a Qwen2 whose layer types slide in half (its window was 4,096, past the test's length)."""


@pytest.mark.parametrize("case", WINDOWED)
def test_a_sliding_window_layer_caches_its_window_only(case):
    """transformers keeps a sliding layer's last window of keys and values (a view of its last concatenation), so
    past the window the cache stops growing there: counted at full length, Mistral's was 271% over."""
    model_id, extra = WINDOWED[case]
    layers, batch, prompt, new = CACHE
    config = tiny_config(model_id, layers, **extra)
    measured = generate_peak(build_model(config, "sdpa", torch.bfloat16), batch, prompt, new)
    settings = TrainingSettings(method="full", dtype="bf16-pure", generation_batch_size=batch,
                                generation_tokens=new).validated()
    predicted = generation_bytes(read_architecture(config), settings, prompt + new)
    assert predicted == pytest.approx(measured, rel=0.05), (predicted, measured)


def test_no_generation_adds_nothing():
    arch = read_architecture(tiny_config("meta-llama/Meta-Llama-3-8B", 2))
    assert generation_bytes(arch, TrainingSettings().validated(), 512) == 0
