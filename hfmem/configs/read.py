"""`read_config`: one training config file in, its format detected, its settings mapped and checked."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hfmem.configs import (
    accelerate_config,
    axolotl_config,
    deepspeed_config,
    file_io,
    llama_factory_config,
    megatron_args,
    nemo_config,
    torchtitan_config,
    torchtune_config,
    trainer_args,
)
from hfmem.configs.detect import detect
from hfmem.configs.draft import Draft, Linked, shown
from hfmem.errors import InvalidInputError
from hfmem.memory.fields import setting_of
from hfmem.memory.settings import TrainingSettings


@dataclass(frozen=True)
class ConfigFile:
    """What one training config file says, as hfmem settings, with where each came from and what was left out."""

    path: str
    """The path as given."""
    format: str
    """torchtune, axolotl, llama-factory, deepspeed, accelerate, trainer-args, megatron, torchtitan or nemo."""
    framework: str | None
    """The framework the format implies: torchtune, axolotl, llama-factory, deepspeed, accelerate, hf-trainer, trl,
    megatron, torchtitan or nemo."""
    model: str | None
    """The model id or path the file names (torchtune's checkpoint_dir or builder, base_model, model_name_or_path)."""
    values: dict[str, Any]
    """TrainingSettings field -> value, raw (TrainingSettings.validated() normalises)."""
    sources: dict[str, str]
    """TrainingSettings field -> the key path it came from ("zero_optimization.stage"; "(default)" when the
    framework's default for an absent key)."""
    unknown: tuple[str, ...]
    """Key paths the reader does not know at all."""
    unmodelled: tuple[str, ...]
    """Known key paths that change memory in a way hfmem cannot model."""
    unresolved: dict[str, str] = field(default_factory=dict)
    """Key paths whose value the file does not settle (a shell variable it never assigns, an OmegaConf
    interpolation, a launch with fewer GPUs than its layout), each with why; nothing is set from them."""
    architecture: dict[str, int] = field(default_factory=dict)
    """The model's dimensions the file states (Architecture field -> value: Megatron's --num-layers, ...); the
    model's own are counted, and a disagreement is a warning (hfmem.memory.warnings.shape_disagreements)."""


STANDALONE_READERS: dict[str, Callable[[Draft], tuple[str, str | None]]] = {
    "megatron": megatron_args.read,
    "torchtitan": torchtitan_config.read,
    "nemo": nemo_config.read,
}
"""The formats that name no other file: Megatron-LM's argument lists, torchtitan's TOML, NeMo 2's recipe YAML."""

LinkedReader = Callable[[Draft, Linked | None], tuple[str, str | None]]
LINKED_READERS: dict[str, tuple[LinkedReader, str]] = {
    "axolotl": (axolotl_config.read, "deepspeed"),
    "llama-factory": (llama_factory_config.read, "deepspeed"),
    "trainer-args": (trainer_args.read, "deepspeed"),
    "accelerate": (accelerate_config.read, "deepspeed_config.deepspeed_config_file"),
}
"""The formats that may name a DeepSpeed config, each with its reader and the key that names it."""


def read_config(path: str | Path) -> ConfigFile:
    """Detect the format of a training config file, parse it and map it to settings; InvalidInputError on anything
    bad."""
    file, label = Path(path), str(path)
    data = file_io.read_mapping(file, label)
    kind = detect(data, label)
    draft = Draft(data, label)
    if kind == "torchtune":
        framework, model = torchtune_config.read(draft, file.name)
    elif kind == "deepspeed":
        deepspeed_config.read_file(draft)
        framework, model = "deepspeed", None
    elif kind in STANDALONE_READERS:
        framework, model = STANDALONE_READERS[kind](draft)
    else:
        reader, key = LINKED_READERS[kind]
        framework, model = reader(draft, linked_deepspeed(file, data, key, label))
    checked(draft, label)
    return ConfigFile(path=label, format=kind, framework=framework, model=model, values=dict(draft.values),
                      sources=dict(draft.sources), unknown=tuple(dict.fromkeys(draft.unknown())),
                      unmodelled=tuple(draft.flagged), unresolved=dict(draft.unresolved),
                      architecture=dict(draft.architecture))


def linked_deepspeed(file: Path, data: dict, key: str, label: str) -> Linked | None:
    """The DeepSpeed config at `key`: a path, read and parsed (never followed further), or inline settings."""
    value: Any = data
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None or value == "":
        return None
    if isinstance(value, dict):
        return Linked(f"{key}.", value)
    if not isinstance(value, str):
        raise InvalidInputError(f"{label}: {key} must be the path of a DeepSpeed JSON; got {shown(value)}.")
    found = file_io.find_linked(file, value, label, key)
    linked_label = f"{value} (named by {label})"
    linked = file_io.read_mapping(found, linked_label)
    try:
        kind = detect(linked, linked_label)
    except InvalidInputError:
        kind = None
    if kind != "deepspeed":
        raise InvalidInputError(f"{label}: {key} names {value!r}, which is not a DeepSpeed config (expected "
                                "zero_optimization, train_micro_batch_size_per_gpu or train_batch_size).")
    return Linked(f"{value}:", linked)


def checked(draft: Draft, label: str) -> None:
    """Every value through its setting's own check, then the settings' cross-checks, errors naming file and key."""
    settings = {f.name: f for f in fields(TrainingSettings)}
    for name, value in draft.values.items():
        try:
            setting_of(settings[name]).check(name, value)
        except InvalidInputError as err:
            raise InvalidInputError(f"{label}: {draft.sources[name]}: {err}") from None
    try:
        TrainingSettings(**draft.values).validated()
    except InvalidInputError as err:
        raise InvalidInputError(f"{label}: {err}") from None
