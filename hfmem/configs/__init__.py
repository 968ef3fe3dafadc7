"""Training-config files in: torchtune, Axolotl, LLaMA-Factory, DeepSpeed, accelerate, HF/TRL trainer arguments,
Megatron-LM argument lists and launch scripts, torchtitan TOML and NeMo 2 recipe YAML.

`read_config(path)` detects the file's format, parses it safely and maps what it says to TrainingSettings field
values, naming the key each value came from, the keys it does not know and the known keys whose effect on memory
hfmem cannot model. Every reader is a pure function over the parsed data; the file reading is in `file_io.py`.
"""

from __future__ import annotations

from hfmem.configs.read import ConfigFile, read_config

__all__ = ["ConfigFile", "read_config"]
