"""Configs differing only in VALUES_ONLY fields share one build's inventory: checked by real meta builds of every
fixture config with those fields changed, and by derive's reuse against a fresh build in an empty cache."""

import json
from pathlib import Path

import pytest

from hfmem.model import derive as derive_module
from hfmem.model.architecture import read_architecture
from hfmem.model.derive import ARCHITECTURE_FREE, VALUES_ONLY, derive, inventory_key, shape_hash
from hfmem.model.meta import build_inventory, make_config, normalised_config

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted([*(ROOT / "fixtures" / "configs").rglob("config.json"), *(ROOT / "hfmem" / "examples").rglob("config.json")])


def _changed(value: object) -> object:
    """Another valid value of a VALUES_ONLY field: a float scaled (a zero rate made 0.1), the other dtype."""
    if isinstance(value, str):
        return "float32" if value != "float32" else "bfloat16"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value * 1.5 if value else 0.1
    return value


def _variant(config: dict) -> dict:
    """The config with every VALUES_ONLY field it holds, or its config class fills in, set to another value."""
    normalised = normalised_config(make_config(config))
    changes = {k: _changed(normalised[k]) for k in VALUES_ONLY if normalised.get(k) is not None}
    assert changes or "text_config" in config, "no VALUES_ONLY field to change"
    return config | changes


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_values_only_fields_leave_the_built_model_alone(path):
    config = json.loads(path.read_text())
    variant = _variant(config)
    assert shape_hash(variant) == shape_hash(config)
    assert build_inventory(variant) == build_inventory(config)


def test_a_shape_field_changes_the_key():
    config = json.loads(CONFIGS[0].read_text())
    assert shape_hash(config | {"intermediate_size": config["intermediate_size"] + 64}) != shape_hash(config)


def test_a_sibling_reuses_the_build_and_matches_a_fresh_one(tmp_path, monkeypatch):
    config = json.loads((ROOT / "hfmem" / "examples" / "Qwen2.5-0.5B" / "config.json").read_text())
    sibling = config | {"rope_theta": 123_456.0, "attention_dropout": 0.25}
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "shared"))
    derive(config, None, [])
    builds = derive_module.meta_builds
    arch, inventory = derive(sibling, None, [])
    assert derive_module.meta_builds == builds  # counted from the first one's build
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "fresh"))
    fresh_arch, fresh_inventory = derive(sibling, None, [])
    assert derive_module.meta_builds == builds + 1
    assert (arch, inventory) == (fresh_arch, fresh_inventory)
    assert arch.attention_dropout == 0.25  # the architecture is the sibling's own


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_architecture_free_fields_leave_the_architecture_alone(path):
    """Configs differing only in ARCHITECTURE_FREE fields share one cache entry: exact, since the architecture read
    from each one's own config object is the same (and so, by the test above, is the inventory)."""
    config = json.loads(path.read_text())
    normalised = normalised_config(make_config(config))
    changes = {k: _changed(normalised[k]) for k in ARCHITECTURE_FREE if normalised.get(k) is not None}
    variant = config | changes | {k: _changed(v) for k, v in config.items() if k in ARCHITECTURE_FREE}
    assert inventory_key(variant) == inventory_key(config)
    assert read_architecture(normalised_config(make_config(variant))) == read_architecture(normalised)


def test_a_value_the_architecture_reads_changes_the_key():
    config = json.loads((ROOT / "hfmem" / "examples" / "Qwen2.5-0.5B" / "config.json").read_text())
    assert inventory_key(config | {"attention_dropout": 0.25}) != inventory_key(config)
    assert inventory_key(config | {"torch_dtype": "float32"}) != inventory_key(config)
    assert ARCHITECTURE_FREE < VALUES_ONLY
