"""activation_fn: the MLP activation the training code really calls, against real forward passes.

A tiny GPT-2 (transformers runs gelu_new: the tanh GELU spelled out in elementwise ops) and a tiny Llama
(silu) run forward + loss in bf16 under saved_tensors_hooks (tests/saved_activations.py), once as transformers
builds them and once with every MLP's activation module replaced by one that calls the function a framework
calls: torch.nn.functional.gelu(x, approximate="tanh") as one op (LitGPT, nanoGPT), F.gelu, F.relu. hfmem's
estimate with the matching activation_fn must move by what the tracker sees move.
"""

from __future__ import annotations

import functools

import pytest
from tiny_models import tiny_config

from hfmem.errors import InvalidInputError
from hfmem.memory.activation_functions import ACTIVATION_SAVES
from hfmem.memory.activations import ActivationSettings, estimate_activations
from hfmem.memory.settings import ACTIVATION_FNS, TrainingSettings
from hfmem.model.architecture import read_architecture
from hfmem.model.meta import build_inventory

torch = pytest.importorskip("torch")
F = torch.nn.functional

B, S = 2, 128
CALLS = {
    "gelu_tanh_fused": lambda x: F.gelu(x, approximate="tanh"),
    "gelu": F.gelu,
    "relu": F.relu,
    "silu": F.silu,
}
"""What each activation_fn names, as the training code calls it."""


class _Calls(torch.nn.Module):
    """An MLP activation module that calls one function, as a framework's own MLP does."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.function = CALLS[name]

    def forward(self, x):
        return self.function(x)


@functools.cache
def _measured(model_id: str, activation: str | None) -> int:
    """Saved bytes of the tiny model's forward + loss, its MLP activations replaced by `activation`'s call."""
    from saved_activations import build_model, saved_bytes

    model = build_model(tiny_config(model_id, 2), "eager", torch.bfloat16)
    replaced = 0
    for module in model.modules():
        for attribute in ("act", "act_fn"):  # GPT2MLP.act, LlamaMLP.act_fn
            if activation and isinstance(getattr(module, attribute, None), torch.nn.Module):
                setattr(module, attribute, _Calls(activation))
                replaced += 1
    assert replaced == (2 if activation else 0)
    return saved_bytes(model, B, S)[0]


def _predicted(model_id: str, activation: str | None) -> int:
    config = tiny_config(model_id, 2)
    return estimate_activations(read_architecture(config), build_inventory(config), ActivationSettings(
        micro_batch_size=B, seq_len=S, attention="eager", dropout_mask_bytes=None, activation=activation)).stored


@pytest.mark.parametrize(("model_id", "activation"), [
    ("openai-community/gpt2", "gelu_tanh_fused"),
    ("openai-community/gpt2", "relu"),
    ("meta-llama/Meta-Llama-3-8B", "gelu"),
    ("meta-llama/Meta-Llama-3-8B", "relu"),
])
def test_the_override_moves_by_what_the_real_call_saves(model_id: str, activation: str) -> None:
    own, called = _measured(model_id, None), _measured(model_id, activation)
    assert called != own or activation == "gelu"  # silu and gelu both keep only their input
    assert _predicted(model_id, activation) - _predicted(model_id, None) == called - own
    assert abs(_predicted(model_id, activation) / called - 1) < 0.05


def test_fused_tanh_gelu_saves_three_temporaries_less_than_gelu_new() -> None:
    """transformers' gelu_new keeps its input and three intermediate tensors; the fused call only its input: per
    GPT-2 layer three bf16 tensors of b·s x intermediate width less."""
    config = tiny_config("openai-community/gpt2", 2)
    width = config.get("n_inner") or 4 * config["n_embd"]
    saved = _measured("openai-community/gpt2", None) - _measured("openai-community/gpt2", "gelu_tanh_fused")
    assert saved == 2 * 3 * 2 * B * S * width  # 2 layers x 3 tensors x 2 bytes x b·s x width


def test_every_choice_has_its_saved_tensors_and_none_is_the_model() -> None:
    assert set(ACTIVATION_FNS) == set(ACTIVATION_SAVES)
    assert TrainingSettings(activation_fn="gelu_tanh").validated().activation_fn == "gelu_tanh_fused"
    with pytest.raises(InvalidInputError, match="activation_fn must be one of"):
        TrainingSettings(activation_fn="swiglu_fast").validated()
