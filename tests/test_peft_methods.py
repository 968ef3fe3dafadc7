"""PEFT's methods beyond LoRA: trainable parameters against PEFT's own model, and what they save for backward
against autograd's saved tensors on CPU."""

from __future__ import annotations

import pytest

from hfmem.memory.settings import TrainingSettings

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from saved_activations import build_model  # noqa: E402
from tiny_models import tiny_config  # noqa: E402

from hfmem.memory.model_state import parameter_split  # noqa: E402
from hfmem.model.architecture import read_architecture  # noqa: E402
from hfmem.model.meta import build_inventory  # noqa: E402

FEEDFORWARD = {"openai-community/gpt2": "mlp.c_proj", "meta-llama/Meta-Llama-3-8B": "down_proj",
               "mistralai/Mistral-7B-v0.1": "down_proj", "microsoft/phi-2": "fc2", "tiiuae/falcon-7b": "dense_4h_to_h",
               "Qwen/Qwen2.5-0.5B": "down_proj", "google/gemma-2b": "down_proj",
               "stabilityai/stablelm-base-alpha-3b": "dense_4h_to_h"}
"""The dense fixture families, each with its MLP output projection as PEFT's IA3 mapping names it."""
METHODS = ("dora", "lora-fa", "vera", "ia3", "prompt-tuning", "prefix-tuning")


def peft_config(method: str, leaves: list[str], feedforward: str, rank: int = 8, virtual_tokens: int = 20):
    """The PEFT config of `method` on every linear layer but the head (IA3: the MLP output scaled on its input)."""
    if method in {"dora", "lora-fa"}:
        return peft.LoraConfig(r=rank, target_modules=leaves, use_dora=method == "dora")
    if method == "vera":
        return peft.VeraConfig(r=rank, target_modules=leaves)
    if method == "ia3":
        split = "." in feedforward  # GPT-2's c_proj is both the attention's and the MLP's output
        targets = [n for n in leaves if n != feedforward.rsplit(".", 1)[-1] or not split]
        targets += ["attn.c_proj", feedforward] if split else []
        return peft.IA3Config(target_modules=targets, feedforward_modules=[feedforward])
    cls = peft.PromptTuningConfig if method == "prompt-tuning" else peft.PrefixTuningConfig
    return cls(task_type="CAUSAL_LM", num_virtual_tokens=virtual_tokens)


def peft_model(model_id: str, method: str, layers: int, dtype, rank: int = 8, virtual_tokens: int = 20):
    """The tiny model of `model_id` wrapped by PEFT for `method` (LoRA-FA: A frozen by create_lorafa_optimizer)."""
    config = tiny_config(model_id, layers)
    leaves = sorted({g.name for g in build_inventory(config).linears if g.component != "head"})
    wrapped = peft.get_peft_model(build_model(config, "sdpa", dtype),
                                  peft_config(method, leaves, FEEDFORWARD[model_id], rank, virtual_tokens))
    if method == "lora-fa":
        from peft.optimizers import create_lorafa_optimizer

        create_lorafa_optimizer(wrapped, r=rank, lora_alpha=16, lr=1e-4)
    wrapped.train()
    return wrapped


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("model_id", sorted(FEEDFORWARD))
def test_trainable_parameters_equal_peft(model_id: str, method: str) -> None:
    wrapped = peft_model(model_id, method, 2, torch.float32)
    trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    config = tiny_config(model_id, 2)
    settings = TrainingSettings(method=method, lora_rank=8, num_virtual_tokens=20).validated()
    split = parameter_split(read_architecture(config), build_inventory(config), settings)
    assert split.trainable == trainable
    if method in {"lora-fa", "vera"}:  # LoRA-FA's frozen A, VeRA's shared frozen projections (buffers)
        buffers = sum(b.numel() for n, b in wrapped.named_buffers() if "vera_" in n)
        frozen_a = sum(p.numel() for n, p in wrapped.named_parameters() if "lora_A" in n and not p.requires_grad)
        assert split.frozen_adapters == (buffers if method == "vera" else frozen_a) > 0
