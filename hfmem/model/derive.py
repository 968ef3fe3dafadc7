"""Architecture and exact inventory of a config: the meta build, cached by config hash, or a fallback.

Builds take turns under one lock (accelerate's init_empty_weights patches torch globals), and each
distinct config is built once per transformers version across processes, through hfmem's cache; configs that
differ only in fields that set values, never shapes (VALUES_ONLY), share one build's inventory.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from functools import cache as once
from typing import Any

from hfmem import errors
from hfmem.hub import cache
from hfmem.hub.safetensors import Checkpoint
from hfmem.hub.schema import JSON, Map
from hfmem.model.architecture import Architecture, read_architecture
from hfmem.model.guard import guard_config
from hfmem.model.inventory import INVENTORY_SCHEMA, Inventory, inventory_from_checkpoint, inventory_from_dims

# Meta builds patch torch globals (accelerate's init_empty_weights), so threads take turns; holding one lock
# across check-build-save also means concurrent fine-tunes sharing a config hash build it once.
_BUILD_LOCK = threading.Lock()
meta_builds = 0
INVENTORY_ENTRY = {"normalised_config": Map(JSON), "inventory": INVENTORY_SCHEMA}
"""A cached inventory (key: inventory_key) and the normalised config the architecture is read from."""
SHAPE_ENTRY = {"inventory": INVENTORY_SCHEMA}
"""A cached build's inventory (key: shape_hash)."""
INVENTORY_REVISION = 2
"""Bumped when the meta build classifies parameters differently (2: attention of a model whose class names hold
"Moe", Qwen3MoeAttention, no longer counted as experts), so inventories cached by an earlier rule are built again."""

VALUES_ONLY = frozenset({"rope_theta", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "initializer_range",
                         "initializer_factor", "attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop",
                         "attn_pdrop", "torch_dtype", "dtype"})
"""Config fields that set a value (a frequency, an epsilon, a dropout rate, a dtype), never a parameter's shape or
a module's presence: left out of the key of the inventory a build counts (tests/test_derive_shapes.py changes
them in every fixture config and builds both); the architecture is still read from the model's own config."""
ARCHITECTURE_FREE = frozenset({"rope_theta", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon",
                               "initializer_range", "initializer_factor"})
"""The VALUES_ONLY fields that the Architecture does not read either (memory depends on none of them): left out of
the key of the normalised config and inventory too, so configs differing only in these need no config object
(tests/test_derive_shapes.py reads the architecture of every fixture config with them changed)."""


def derive(config: dict[str, Any], checkpoint: Checkpoint | None, notes: list[str]) -> tuple[Architecture, Inventory]:
    """Architecture and exact inventory: meta build (cached by config hash), else headers, else config dims."""
    guard_config(config)
    key = inventory_key(config)
    if hit := cache.load("inventories", key, INVENTORY_ENTRY):
        return _from_cache(hit)
    with _BUILD_LOCK:  # a thread that waited here finds the inventory another one just built
        if hit := cache.load("inventories", key, INVENTORY_ENTRY):
            return _from_cache(hit)
        return _derive_uncached(config, checkpoint, notes, key)


def _from_cache(hit: dict[str, Any]) -> tuple[Architecture, Inventory]:
    inventory = Inventory.from_dict(hit["inventory"])
    return as_built(read_architecture(hit["normalised_config"]), inventory), inventory


def _derive_uncached(config: dict[str, Any], checkpoint: Checkpoint | None, notes: list[str],
                     key: str) -> tuple[Architecture, Inventory]:
    """Build (or fall back) and cache; called under _BUILD_LOCK."""
    from hfmem.model.meta import build_inventory, make_config, normalised_config

    global meta_builds
    try:
        config_obj = make_config(config)
    except errors.UnsupportedArchitectureError as err:
        architecture = read_architecture(config)
        notes.append(f"{err} Counts come from the " + ("checkpoint headers." if checkpoint else "config dimensions."))
        inventory = inventory_from_checkpoint(checkpoint) if checkpoint else inventory_from_dims(architecture)
        return architecture, inventory
    normalised = normalised_config(config_obj)
    architecture = read_architecture(normalised)  # also refuses absurd totals before the build
    shape = shape_hash(config)
    if built := cache.load("shapes", shape, SHAPE_ENTRY):
        inventory = Inventory.from_dict(built["inventory"])
    else:
        meta_builds += 1
        inventory = build_inventory(config_obj)
        cache.save("shapes", shape, {"inventory": inventory.to_dict()})
    cache.save("inventories", key, {"normalised_config": normalised, "inventory": inventory.to_dict()})
    return as_built(architecture, inventory), inventory


def as_built(arch: Architecture, inventory: Inventory) -> Architecture:
    """The architecture without MoE fields the built model does not use: a config class's defaults (Nemotron-H's
    n_routed_experts=8, top-2 with no MoE layer in its pattern) are not experts unless expert weights exist."""
    if not arch.num_experts or inventory.by_component.get("experts", 0):
        return arch
    return replace(arch, num_experts=0, experts_per_token=0, moe_intermediate_size=None, num_shared_experts=0,
                   num_dense_layers=arch.num_layers)


def inventory_key(config: dict[str, Any]) -> str:
    """The key of a config's normalised config and inventory: its hash without the ARCHITECTURE_FREE fields."""
    return cache.config_hash({k: v for k, v in config.items() if k not in ARCHITECTURE_FREE}, salt=_salt())


def shape_hash(config: dict[str, Any]) -> str:
    """The key of the inventory a config's build counts: its hash without the VALUES_ONLY fields."""
    return cache.config_hash({k: v for k, v in config.items() if k not in VALUES_ONLY}, salt=_salt())


def _salt() -> str:
    """What an inventory depends on beside the config: the transformers version and hfmem's INVENTORY_REVISION."""
    return f"{_transformers_version()}/{INVENTORY_REVISION}"


@once
def _transformers_version() -> str:
    from importlib.metadata import version

    return version("transformers")
