"""tie_word_embeddings as an override, against real transformers models built both ways.

hfmem reads one config (a tiny Llama, untied; a tiny Qwen2.5, tied) and is told to tie or untie the head;
the ground truth is transformers' model built from that config with tie_word_embeddings set the other way:
its parameters' unique storages, the gradients of one real backward and AdamW's states after a real step
(full fine-tune in bf16, no master copy: dtype bf16-pure), and PEFT's all-linear LoRA on it (trainable count,
parameter bytes: an untied head is one more frozen matrix).
"""

from __future__ import annotations

import functools
import warnings

import pytest
from tiny_models import tiny_config

from hfmem.memory.estimate import estimate
from hfmem.memory.settings import TrainingSettings
from hfmem.model.architecture import read_architecture
from hfmem.model.inventory import head_is_tied, retied
from hfmem.model.meta import build_inventory

torch = pytest.importorskip("torch")

B, S = 2, 32
CASES = [("meta-llama/Meta-Llama-3-8B", True), ("Qwen/Qwen2.5-0.5B", False)]
"""Each model with the tying its own config does not have."""


@functools.cache
def _real(model_id: str, tie: bool, method: str) -> dict[str, int]:
    """Parameter, gradient and AdamW state bytes of the real model built with tie_word_embeddings=tie."""
    from saved_activations import build_model

    model = build_model(tiny_config(model_id, 2, tie_word_embeddings=tie), "sdpa", torch.bfloat16)
    if method == "lora":
        import peft

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules="all-linear"))
    unique = {id(p): p for p in model.parameters()}.values()
    trainable = [p for p in unique if p.requires_grad]
    ids = torch.randint(0, 1024, (B, S), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer = torch.optim.AdamW(trainable, foreach=False)
    optimizer.step()
    return {
        "parameters": sum(p.numel() for p in unique),
        "trainable": sum(p.numel() for p in trainable),
        "weights": sum({p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in unique}.values()),
        "gradients": sum(p.grad.untyped_storage().nbytes() for p in trainable),
        "states": sum(v.untyped_storage().nbytes() for state in optimizer.state.values()
                      for name, v in state.items() if name in {"exp_avg", "exp_avg_sq"}),
    }


def _model(model_id: str):
    config = tiny_config(model_id, 2)
    return read_architecture(config), build_inventory(config)


@pytest.mark.parametrize(("model_id", "tie"), CASES)
def test_retied_inventory_counts_what_transformers_builds(model_id: str, tie: bool) -> None:
    arch, inventory = _model(model_id)
    assert head_is_tied(inventory) is (not tie) is arch.tie_word_embeddings
    other = retied(inventory, tie)
    assert other.total == _real(model_id, tie, "full")["parameters"]
    assert head_is_tied(other) is tie
    assert retied(inventory, not tie) is inventory  # already so: nothing to change


@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize(("model_id", "tie"), CASES)
def test_state_follows_the_override(model_id: str, tie: bool, method: str) -> None:
    real = _real(model_id, tie, method)
    settings = TrainingSettings(method=method, lora_rank=8, dtype="bf16-pure", optimizer="adamw",
                                tie_word_embeddings=tie, seq_len=S)
    est = estimate(*_model(model_id), settings)
    assert est.split.trainable == real["trainable"]
    assert est.per_gpu_bytes.weights == real["weights"]
    assert est.per_gpu_bytes.gradients == real["gradients"]
    assert est.per_gpu_bytes.optimizer_states == real["states"]
    assert est.model["parameters"] == real["parameters"] - (real["trainable"] if method == "lora" else 0)


def test_the_models_own_tying_is_the_default() -> None:
    """None and the config's own value give the same estimate."""
    arch, inventory = _model("Qwen/Qwen2.5-0.5B")
    own = estimate(arch, inventory, TrainingSettings(method="full", seq_len=S)).per_gpu_bytes
    same = estimate(arch, inventory, TrainingSettings(method="full", seq_len=S, tie_word_embeddings=True)).per_gpu_bytes
    assert own == same
