"""modules_to_save against real PEFT: ModulesToSaveWrapper keeps the frozen original and a trainable copy.

A tiny Llama (untied head) and a tiny Qwen2.5 (tied embeddings) in bf16 get all-linear LoRA r=8 with
PEFT's modules_to_save; the ground truth is PEFT's own model: its trainable parameter count, the bytes of
its parameters' unique storages, the gradients one real backward leaves, the AdamW states one real step
allocates (exp_avg and exp_avg_sq), and the bytes autograd saves for backward (saved_tensors_hooks).
hfmem runs with dtype bf16-pure (a bf16 model, no master copy, no autocast: what the test runs).
"""

from __future__ import annotations

import functools
import warnings

import pytest
from tiny_models import tiny_config

from hfmem.errors import InvalidInputError
from hfmem.memory.estimate import estimate
from hfmem.memory.settings import TrainingSettings
from hfmem.model.architecture import read_architecture
from hfmem.model.meta import build_inventory

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

B, S = 2, 64
MODELS = ("meta-llama/Meta-Llama-3-8B", "Qwen/Qwen2.5-0.5B")
SAVED = (None, ("lm_head",), ("embed_tokens", "lm_head"), ("embed_tokens",))


@functools.cache
def _measured(model_id: str, modules: tuple[str, ...] | None) -> dict[str, int]:
    """What PEFT's model holds and saves for one step of all-linear LoRA with these modules_to_save."""
    from saved_activations import build_model, saved_bytes

    model = build_model(tiny_config(model_id, 2), "sdpa", torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PEFT warns about modules_to_save on tied embeddings
        wrapped = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules="all-linear",
                                                             modules_to_save=list(modules) if modules else None))
    wrapped.train()
    activations, _ = saved_bytes(wrapped.base_model.model, B, S)
    storages = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in wrapped.parameters()}
    ids = torch.randint(0, model.config.vocab_size, (B, S), generator=torch.Generator().manual_seed(0))
    wrapped(input_ids=ids, labels=ids).loss.backward()
    trainable = [p for p in wrapped.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, foreach=False)
    optimizer.step()
    return {
        "trainable": sum(p.numel() for p in trainable),
        "weights": sum(storages.values()),
        "gradients": sum(p.grad.untyped_storage().nbytes() for p in trainable),
        "states": sum(v.untyped_storage().nbytes() for state in optimizer.state.values()
                      for name, v in state.items() if name in {"exp_avg", "exp_avg_sq"}),
        "activations": activations,
    }


def _estimate(model_id: str, modules: tuple[str, ...] | None, **kw):
    config = tiny_config(model_id, 2)
    settings = TrainingSettings(method="lora", lora_rank=8, modules_to_save=modules or (), dtype="bf16-pure",
                                optimizer="adamw", seq_len=S, micro_batch_size=B, attention="sdpa", **kw)
    return estimate(read_architecture(config), build_inventory(config), settings)


@pytest.mark.parametrize("modules", SAVED)
@pytest.mark.parametrize("model_id", MODELS)
def test_copies_match_peft(model_id: str, modules: tuple[str, ...] | None) -> None:
    """Trainable count, parameter bytes (frozen originals, fp32 adapters, bf16 copies; a tied matrix once and
    two copies of it when both ends are saved), gradients, AdamW states and saved activations (a trained head
    keeps its input, a trained embedding its token ids and a layer 0 whose input now needs a gradient)."""
    real = _measured(model_id, modules)
    est = _estimate(model_id, modules)
    b = est.per_gpu_bytes
    assert est.split.trainable == real["trainable"]
    assert b.weights == real["weights"]
    assert b.gradients == real["gradients"]
    assert b.optimizer_states == real["states"]
    assert est.activations.stored == real["activations"]


def test_copies_cost_what_peft_adds() -> None:
    """The tied Qwen's two copies (embedding and head) are two vocab x hidden matrices more than no copy at all."""
    config = tiny_config("Qwen/Qwen2.5-0.5B", 2)
    assert config["tie_word_embeddings"] is True
    matrix = config["vocab_size"] * config["hidden_size"]
    plain, both = _measured("Qwen/Qwen2.5-0.5B", None), _measured("Qwen/Qwen2.5-0.5B", ("embed_tokens", "lm_head"))
    assert both["trainable"] - plain["trainable"] == 2 * matrix
    assert _estimate("Qwen/Qwen2.5-0.5B", ("embed_tokens", "lm_head")).split.trainable == both["trainable"]


def test_mixed_precision_copies_get_master_weights() -> None:
    """With bf16 mixed precision the bf16 copies carry fp32 master weights and fp32 states; the fp32 adapters
    none: the master term is exactly 4 bytes per copied parameter."""
    config = tiny_config("meta-llama/Meta-Llama-3-8B", 2)
    arch, inventory = read_architecture(config), build_inventory(config)
    copy = config["vocab_size"] * config["hidden_size"]
    mixed = estimate(arch, inventory, TrainingSettings(method="lora", modules_to_save=("lm_head",), dtype="bf16"))
    assert mixed.per_gpu_bytes.master_weights == 4 * copy


@pytest.mark.parametrize(("method", "modules", "message"), [
    ("lora", ("conv_in",), "matches no module"),
    ("qlora", ("q_proj",), "stored quantized"),
])
def test_impossible_copies_are_one_line_errors(method: str, modules: tuple[str, ...], message: str) -> None:
    config = tiny_config("meta-llama/Meta-Llama-3-8B", 2)
    with pytest.raises(InvalidInputError, match=message) as caught:
        estimate(read_architecture(config), build_inventory(config),
                 TrainingSettings(method=method, modules_to_save=modules))
    assert "\n" not in str(caught.value)
