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


MEGATRON_FLAGS = frozenset({"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--micro-batch-size",
                            "--global-batch-size", "--use-distributed-optimizer", "--context-parallel-size",
                            "--num-layers", "--seq-length"})
"""pretrain_gpt.py's flags: an argument list naming any of them is Megatron-LM's."""
TORCHTITAN_SECTIONS = frozenset({"parallelism", "activation_checkpoint", "float8"})
"""JobConfig sections (torchtitan/config/job_config.py) no other format has at its top level."""


def nemo_strategy(data: dict) -> bool:
    """A NeMo 2 recipe as data: a Megatron strategy (`trainer.strategy` or `strategy`) with its `_target_`."""
    trainer = data.get("trainer")
    strategy = trainer.get("strategy") if isinstance(trainer, dict) else None
    strategy = strategy if isinstance(strategy, dict) else data.get("strategy")
    return isinstance(strategy, dict) and "MegatronStrategy" in str(strategy.get("_target_", ""))


SIGNATURES: dict[str, tuple[str, Callable[[dict], bool]]] = {
    "megatron": ("pretrain_gpt.py flags such as --tensor-model-parallel-size",
                 lambda d: bool(MEGATRON_FLAGS & d.keys())),
    "torchtitan": ("[parallelism] or [activation_checkpoint] sections",
                   lambda d: any(isinstance(d.get(k), dict) for k in TORCHTITAN_SECTIONS)),
    "nemo": ("a trainer.strategy whose _target_ is a MegatronStrategy", nemo_strategy),
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
