"""Framework profiles: what each training framework sets when its user says nothing, as cited TrainingSettings.

One module per framework holds its PROFILE (and NOT_MODELLED: what it does that no setting expresses yet);
`profile(name)` looks one up by its CLI name or an alias.
"""

from __future__ import annotations

from hfmem.errors import InvalidInputError
from hfmem.frameworks import (
    accelerate,
    axolotl,
    deepspeed,
    hf_trainer,
    litgpt,
    llama_factory,
    megatron,
    nemo,
    torchtitan,
    torchtune,
    trl,
    unsloth,
)
from hfmem.frameworks.profile import Default, Profile

MODULES = (hf_trainer, trl, accelerate, torchtune, litgpt, axolotl, llama_factory, unsloth, deepspeed, megatron,
           torchtitan, nemo)
"""Every profile module, in the order the profiles are listed."""

PROFILES: dict[str, Profile] = {m.PROFILE.name: m.PROFILE for m in MODULES}

ALIASES = {"hf": "hf-trainer", "peft": "hf-trainer", "transformers": "hf-trainer", "trainer": "hf-trainer",
           "llamafactory": "llama-factory", "lit-gpt": "litgpt",
           "megatron-lm": "megatron", "mcore": "megatron", "megatron-core": "megatron", "nemo2": "nemo",
           "nemo-2": "nemo"}
"""Other spellings of profile names; underscores and case are normalised before the look-up."""


def profile(name: str) -> Profile:
    """The profile named `name` (or an alias); InvalidInputError listing the known names otherwise."""
    key = str(name).strip().lower().replace("_", "-")
    key = ALIASES.get(key, key)
    if key not in PROFILES:
        raise InvalidInputError(f"unknown framework {name!r}; known: {', '.join(PROFILES)}.")
    return PROFILES[key]


__all__ = ["ALIASES", "MODULES", "PROFILES", "Default", "Profile", "profile"]
