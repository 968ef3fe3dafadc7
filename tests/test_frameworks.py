"""Framework profiles: every default is a valid, cited TrainingSettings value, and the ones that come from PEFT and
transformers agree with the installed libraries themselves."""

from __future__ import annotations

import inspect
import re
from dataclasses import fields
from pathlib import Path

import pytest

from hfmem.errors import InvalidInputError
from hfmem.frameworks import ALIASES, MODULES, PROFILES, profile, upstream
from hfmem.memory.settings import METHODS, TrainingSettings

BLOB = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+/blob/[0-9a-f]{40}/\S+#L\d+")
NAMES = ["hf-trainer", "trl", "accelerate", "torchtune", "litgpt", "axolotl", "llama-factory", "unsloth", "deepspeed",
         "megatron", "torchtitan", "nemo"]
FIELDS = {f.name for f in fields(TrainingSettings)} - {"method", "overhead"}
PACKAGE = Path(__file__).resolve().parent.parent / "hfmem" / "frameworks"
CASES = [(name, method) for name in NAMES for method in METHODS]


def test_the_twelve_profiles_one_module_each() -> None:
    assert list(PROFILES) == NAMES
    assert [m.PROFILE.name for m in MODULES] == NAMES
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "profile", "upstream"}
    assert modules == {m.__name__.rsplit(".", 1)[1] for m in MODULES}, "a profile module missing from MODULES"


@pytest.mark.parametrize(("name", "method"), CASES)
def test_defaults_validate_in_their_canonical_spelling(name: str, method: str) -> None:
    values = PROFILES[name].values(method)
    settings = TrainingSettings(method=method, **values).validated()
    assert {k: getattr(settings, k) for k in values} == values


@pytest.mark.parametrize(("name", "method"), CASES)
def test_each_field_exists_once(name: str, method: str) -> None:
    names = [d.field for d in PROFILES[name].for_method(method)]
    assert set(names) <= FIELDS, sorted(set(names) - FIELDS)
    assert len(names) == len(set(names)), f"{name}/{method}: a field set twice"


@pytest.mark.parametrize("name", NAMES)
def test_every_default_cites_a_line_and_says_why(name: str) -> None:
    p = PROFILES[name]
    assert set(p.method_defaults) <= set(METHODS)
    assert p.title and p.versions
    for d in p.defaults + tuple(d for ds in p.method_defaults.values() for d in ds):
        assert BLOB.fullmatch(d.source), d.source
        assert d.why and "\n" not in d.why and d.why == d.why.strip(), d


@pytest.mark.parametrize("module", MODULES, ids=NAMES)
def test_not_modelled_items_cite_their_source(module) -> None:
    assert isinstance(module.NOT_MODELLED, tuple)
    for item in module.NOT_MODELLED:
        assert BLOB.search(item), item


@pytest.mark.parametrize(("alias", "name"), [*ALIASES.items(), ("HF_Trainer", "hf-trainer"),
                                             ("llama_factory", "llama-factory"), (" DeepSpeed ", "deepspeed")])
def test_aliases_resolve(alias: str, name: str) -> None:
    assert profile(alias) is PROFILES[name]


def test_an_unknown_framework_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(InvalidInputError) as e:
        profile("colossalai")
    message = str(e.value)
    assert "\n" not in message and "'colossalai'" in message
    assert all(name in message for name in NAMES)


# The defaults taken from PEFT and transformers, checked against the installed libraries.

def test_peft_lora_config_defaults() -> None:
    peft = pytest.importorskip("peft")
    from peft.utils.constants import (
        TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as targets,
    )

    config = peft.LoraConfig()
    assert config.r == upstream.PEFT_RANK.value
    assert config.lora_dropout == upstream.PEFT_DROPOUT.value
    assert tuple(targets["llama"]) == upstream.PEFT_TARGETS.value


def test_peft_wraps_the_default_targets_with_fp32_adapters() -> None:
    """A tiny bf16 llama through get_peft_model: the adapted layers and the adapters' dtype, as PEFT makes them."""
    pytest.importorskip("peft")
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1)
    model = get_peft_model(LlamaForCausalLM(config).to(torch.bfloat16), LoraConfig())
    adapted = {name.rsplit(".", 1)[1] for name, m in model.named_modules() if hasattr(m, "lora_A") and m.lora_A}
    assert tuple(sorted(adapted)) == tuple(sorted(upstream.PEFT_TARGETS.value))
    dtypes = {p.dtype for name, p in model.named_parameters() if "lora_" in name}
    assert dtypes == {torch.float32 if upstream.PEFT_ADAPTER_FP32.value == "fp32" else torch.bfloat16}


def test_peft_kbit_preparation_checkpoints_by_default() -> None:
    pytest.importorskip("peft")
    from peft import prepare_model_for_kbit_training

    default = inspect.signature(prepare_model_for_kbit_training).parameters["use_gradient_checkpointing"].default
    checkpointing = TrainingSettings(gradient_checkpointing=default).validated().gradient_checkpointing
    assert checkpointing == upstream.PEFT_KBIT_CHECKPOINTING.value


def test_trainer_arguments_defaults(tmp_path: Path) -> None:
    """TrainingArguments' own optimizer and checkpointing defaults, read through hfmem's aliases."""
    import torch
    from transformers import TrainingArguments

    if tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 8):
        pytest.skip("transformers picks adamw_torch_fused on torch >= 2.8 only")
    args = TrainingArguments(output_dir=str(tmp_path))
    read = TrainingSettings(optimizer=str(getattr(args.optim, "value", args.optim)),
                            gradient_checkpointing=bool(args.gradient_checkpointing)).validated()
    assert read.optimizer == upstream.TRAINER_OPTIMIZER.value
    assert read.gradient_checkpointing == upstream.TRAINER_NO_CHECKPOINTING.value


def test_transformers_causal_lm_loss_runs_in_fp32() -> None:
    """ForCausalLMLoss on bf16 logits returns an fp32 loss equal to cross-entropy on the upcast logits."""
    import torch
    from transformers.loss.loss_utils import ForCausalLMLoss

    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11).to(torch.bfloat16)
    labels = torch.randint(0, 11, (2, 5))
    loss = ForCausalLMLoss(logits, labels, vocab_size=11)
    expected = torch.nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, 11), labels[:, 1:].reshape(-1))
    assert (loss.dtype == torch.float32) == upstream.TRANSFORMERS_LOSS_UPCAST.value
    assert torch.allclose(loss, expected)
