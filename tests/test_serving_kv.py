"""The serving KV cache per token and state per sequence (hfmem.serving.kv) against the cache objects real
model.generate calls leave behind: scaled-down random-weight models of every decoder family in fixtures/, two
sequences of 301 cached tokens each (a 300-token prompt and one decoding step, so a sliding-window layer has
already dropped what fell out of its 128-token window), the cache's tensors' storage bytes summed."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tiny_models import tiny_config  # noqa: E402

from hfmem.model.architecture import read_architecture  # noqa: E402
from hfmem.serving.kv import kv_heads_per_rank, kv_layout  # noqa: E402

HUB = Path(__file__).resolve().parent.parent / "fixtures" / "hub"
BATCH, PROMPT = 2, 300
CACHED = PROMPT + 1
"""generate caches the prompt and every token it feeds back: two new tokens, the first of them fed back."""
WINDOW = 128

CONFIG_FAMILIES = {
    "meta-llama/Meta-Llama-3-8B": {}, "Qwen/Qwen2.5-0.5B": {}, "google/gemma-2b": {}, "microsoft/phi-2": {},
    "mistralai/Mistral-7B-v0.1": {"sliding_window": WINDOW}, "mistralai/Mixtral-8x7B-v0.1": {},
    "deepseek-ai/DeepSeek-V3": {}, "openai-community/gpt2": {}, "tiiuae/falcon-7b": {},
    "stabilityai/stablelm-base-alpha-3b": {},
}
"""fixtures/configs families, shrunk by tests/tiny_models.py (Mistral's window shortened so 301 tokens pass it)."""
HUB_FAMILIES: dict[str, dict[str, Any]] = {
    "google/gemma-2-9b": {"sliding_window": WINDOW, "layer_types": ["sliding_attention", "full_attention"] * 2},
    "openai/gpt-oss-20b": {},
    "Qwen/Qwen3-8B": {},
    "Qwen/Qwen3-30B-A3B": {},
    "state-spaces/mamba-130m-hf": {"state_size": 16},
    "nvidia/Nemotron-H-56B-Base-8K": {"hybrid_override_pattern": "M-M*", "mamba_num_heads": 8, "mamba_head_dim": 64,
                                      "ssm_state_size": 32, "n_groups": 2, "attention_head_dim": 32},
}
"""fixtures/hub families beyond those: alternating sliding and full attention (Gemma-2 as transformers' config
lays it out, gpt-oss with its own 128-token window), QK-norm dense and MoE, Mamba-1, and the Mamba-2/attention
hybrid."""


def shrink(config: dict[str, Any], layers: int = 4, **extra: Any) -> dict[str, Any]:
    """A fixture Hub config at hidden 256, 8 query heads in the model's query/K-V ratio, 4 experts, 4 layers."""
    heads, kv = config.get("num_attention_heads"), config.get("num_key_value_heads")
    ratio = max(1, (heads or 1) // (kv or heads or 1))
    update: dict[str, Any] = dict(hidden_size=256, intermediate_size=512, vocab_size=1024, num_hidden_layers=layers)
    if heads:
        update |= dict(num_attention_heads=8, num_key_value_heads=max(1, 8 // ratio), head_dim=32)
    update |= {k: 128 for k in ("moe_intermediate_size",) if k in config}
    update |= {k: 4 for k in ("num_local_experts", "num_experts") if k in config}
    update |= {k: 2 for k in ("num_experts_per_tok",) if k in config}
    if isinstance(config.get("layer_types"), list):
        update["layer_types"] = config["layer_types"][:layers]
    update |= {k: 0 for k in ("bos_token_id", "eos_token_id", "pad_token_id")
               if isinstance(config.get(k), int) and config[k] >= 1024}
    config = {k: v for k, v in config.items() if k not in {"quantization_config", "dtype"}}
    return config | update | extra | {"torch_dtype": "float32"}


def storage_bytes(obj: Any, seen: set[int] | None = None, depth: int = 0) -> int:
    """Bytes of every tensor storage reachable from a cache object (lists, dicts and attributes), each counted
    once: a view keeps its whole storage alive."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        if storage.data_ptr() in seen:
            return 0
        seen.add(storage.data_ptr())
        return storage.nbytes()
    if depth > 6 or isinstance(obj, (torch.nn.Module, type, str, bytes)):
        return 0
    if isinstance(obj, (list, tuple)):
        return sum(storage_bytes(o, seen, depth + 1) for o in obj)
    if isinstance(obj, dict):
        return sum(storage_bytes(o, seen, depth + 1) for o in obj.values())
    return sum(storage_bytes(o, seen, depth + 1) for o in vars(obj).values()) if hasattr(obj, "__dict__") else 0


def cache_after_generate(config: dict[str, Any]) -> int:
    """Storage bytes of the cache a greedy generate of two new tokens returns, on a float32 random model."""
    import transformers

    data = dict(config)
    model_type = data.pop("model_type")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        cfg = transformers.AutoConfig.for_model(model_type, **{k: v for k, v in data.items()
                                                                if k not in {"architectures", "auto_map"}})
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
        ids = torch.randint(0, 1000, (BATCH, PROMPT), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=2, min_new_tokens=2, do_sample=False, use_cache=True,
                                 pad_token_id=0, return_dict_in_generate=True)
    return storage_bytes(out.past_key_values)


def _cases() -> list[tuple[str, dict[str, Any]]]:
    cases = [(m, tiny_config(m, 4, **extra)) for m, extra in CONFIG_FAMILIES.items()]
    cases += [(m, shrink(json.loads((HUB / m / "config.json").read_text()), **extra))
              for m, extra in HUB_FAMILIES.items()]
    return cases


@pytest.mark.parametrize(("model_id", "config"), _cases(), ids=[m.split("/")[1] for m, _ in _cases()])
def test_the_cache_bytes_match_generate(model_id: str, config: dict[str, Any]) -> None:
    config = config | {"torch_dtype": "float32"}
    layout = kv_layout(read_architecture(config), config, 4)
    predicted = BATCH * layout.sequence_bytes(CACHED)
    measured = cache_after_generate(config)
    assert measured == pytest.approx(predicted, rel=0.01), (model_id, layout)


def test_a_window_caps_what_a_sequence_keeps() -> None:
    """Past its window a sliding layer's share stops growing, a full layer's does not."""
    config = shrink(json.loads((HUB / "openai/gpt-oss-20b/config.json").read_text()))
    layout = kv_layout(read_architecture(config), config, 2)
    assert layout.window == 128 and layout.window_layers == layout.full_layers == 2
    grown = layout.sequence_bytes(10_000) - layout.sequence_bytes(5_000)
    assert grown == 5_000 * layout.full_bytes_per_token


def test_tensor_parallel_splits_heads_and_replicates_the_last() -> None:
    """Llama-3-8B's 8 K/V heads: half per rank at TP2, one per rank at TP8 and (replicated) at TP16; DeepSeek's
    MLA latent is whole on every rank."""
    llama = tiny_config("meta-llama/Meta-Llama-3-8B", 4) | {"num_key_value_heads": 8, "num_attention_heads": 8}
    arch = read_architecture(llama)
    one, two, eight, sixteen = (kv_layout(arch, llama, 2, tp).bytes_per_token for tp in (1, 2, 8, 16))
    assert (two, eight, sixteen) == (one / 2, one / 8, one / 8)
    assert kv_heads_per_rank(arch, 16) == 1
    mla = tiny_config("deepseek-ai/DeepSeek-V3", 4)
    mla_arch = read_architecture(mla)
    assert kv_layout(mla_arch, mla, 2, 8).bytes_per_token == kv_layout(mla_arch, mla, 2, 1).bytes_per_token


def test_pipeline_stages_hold_their_layers() -> None:
    """32 layers over 3 stages: the largest stage holds 11 of them."""
    config = tiny_config("meta-llama/Meta-Llama-3-8B", 32)
    arch = read_architecture(config)
    assert kv_layout(arch, config, 2, 1, 3).full_layers == 11
