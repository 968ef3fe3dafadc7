"""Which framework wrote a config: the keys only that framework's files carry (file_io.py checks the extension)."""

from __future__ import annotations

from collections.abc import Callable

from hfmem.errors import InvalidInputError

TRAINER_KEYS = frozenset({
    "per_device_train_batch_size", "gradient_accumulation_steps", "output_dir", "learning_rate",
    "num_train_epochs", "max_steps", "gradient_checkpointing", "activation_checkpointing", "bf16", "fp16", "optim",
    "model_name_or_path", "max_seq_length", "max_length", "use_peft", "lora_r", "dataset_name", "deepspeed", "fsdp",
})
"""TrainingArguments / TRL SFTConfig and ModelConfig keys: a file of these and none of the others is trainer args."""


def has_component(data: dict) -> bool:
    """torchtune's instantiate spelling: a section holding `_component_`."""
    return any(isinstance(v, dict) and "_component_" in v for v in data.values())


SIGNATURES: dict[str, tuple[str, Callable[[dict], bool]]] = {
    "torchtune": ("`_component_` keys", has_component),
    "axolotl": ("base_model with adapter or datasets",
                lambda d: "base_model" in d and ("adapter" in d or "datasets" in d)),
    "llama-factory": ("stage or finetuning_type", lambda d: "stage" in d or "finetuning_type" in d),
    "deepspeed": ("zero_optimization, train_micro_batch_size_per_gpu or train_batch_size",
                  lambda d: bool({"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size"}
                                 & d.keys())),
    "accelerate": ("compute_environment or distributed_type",
                   lambda d: "compute_environment" in d or "distributed_type" in d),
}
"""Each format with its distinctive keys, in words and as a test."""


def detect(data: dict, label: str) -> str:
    """The format of a parsed config; InvalidInputError when none or several fit."""
    found = [name for name, (_, test) in SIGNATURES.items() if test(data)]
    if len(found) > 1:
        raise InvalidInputError(f"{label} looks like {' and '.join(found)} at once; expected one training config "
                                "format per file.")
    if found:
        return found[0]
    if TRAINER_KEYS & data.keys():
        return "trainer-args"
    expected = "; ".join(f"{name}: {words}" for name, (words, _) in SIGNATURES.items())
    raise InvalidInputError(f"{label} is no training config hfmem reads (expected {expected}; or TrainingArguments "
                            "keys such as per_device_train_batch_size).")
