"""From a model reference to a ModelReport: fetch (or load from cache), derive the architecture, count, cross-check.

The orchestration lives here; each step is in its own module (hub, local, architecture, meta_model,
crosscheck, cache). The heavy transformers import starts in a background thread while the Hub answers.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

from hfmem import cache, errors
from hfmem.architecture import LIMITS, Architecture, read_architecture
from hfmem.crosscheck import CrossCheck, cross_check
from hfmem.hub import HubClient, HubSettings
from hfmem.meta_model import Inventory, LinearGroup
from hfmem.modelref import ModelRef
from hfmem.safetensors_header import Checkpoint

SCHEMA_VERSION = 1


@dataclass
class ModelReport:
    """Everything hfmem knows about one model's architecture and parameters."""

    model: str
    source: str
    revision: str | None
    sha: str | None
    config: dict[str, Any]
    architecture: Architecture
    inventory: Inventory
    checkpoint: Checkpoint | None
    crosscheck: CrossCheck
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON schema (documented in README.md, `schema_version` bumps on breaking changes)."""
        ckpt = self.checkpoint
        return {
            "schema_version": SCHEMA_VERSION,
            "model": self.model,
            "source": self.source,
            "revision": self.revision,
            "sha": self.sha,
            "architecture": self.architecture.to_dict() | {"model_class": self.inventory.model_class or None},
            "parameters": {
                "total": self.inventory.total,
                "by_component": self.inventory.by_component,
                "checkpoint_total": ckpt.total if ckpt else None,
                "checkpoint_bytes": ckpt.total_bytes if ckpt else None,
                "checkpoint_files": ckpt.files if ckpt else 0,
                "by_dtype": ckpt.by_dtype() if ckpt else {},
                "tied": [list(pair) for pair in self.inventory.tied],
                "linear_layers": [g.__dict__ | {"parameters": g.parameters} for g in self.inventory.linears],
            },
            "crosscheck": self.crosscheck.to_dict(),
            "notes": self.notes,
        }


def _preload_transformers() -> None:
    try:
        import accelerate  # noqa: F401
        import transformers  # noqa: F401
    except Exception:  # the build step reports import problems itself
        pass


def analyse(ref: ModelRef, settings: HubSettings | None = None) -> ModelReport:
    """Resolve, fetch and derive; Hub results are cached per commit so pinned re-runs do no I/O."""
    from hfmem import local

    notes: list[str] = []
    if ref.kind == "hub":
        config, checkpoint, repo_id, sha = _fetch(ref, settings or HubSettings.from_env())
        name, revision = repo_id, ref.revision
    else:
        config_path = ref.path / "config.json" if ref.kind == "local" else ref.path
        config = local.read_config(config_path)
        checkpoint = local.read_checkpoint(ref.path) if ref.kind == "local" else None
        name, revision, sha = ref.name, None, None
    if checkpoint is None:
        notes.append("No safetensors checkpoint: parameters come from the config alone (no header cross-check).")
    architecture, inventory = derive(config, checkpoint, notes)
    built = inventory if inventory.model_class else None  # a fallback inventory cannot check the headers
    check = cross_check(built, checkpoint, config, architecture.num_layers)
    return ModelReport(name, ref.kind, revision, sha, config, architecture, inventory, checkpoint, check, notes)


def _fetch(ref: ModelRef, settings: HubSettings) -> tuple[dict, Checkpoint | None, str, str]:
    """config.json and checkpoint headers for a Hub ref, from hfmem's cache when the commit is known."""
    if ref.pinned and (hit := cache.load("repos", f"{ref.name}@{ref.revision}")):
        return _from_cached(hit)
    ref_key = f"{ref.name}@{ref.revision or 'main'}"
    if settings.offline and (known := cache.load("refs", ref_key)):
        if hit := cache.load("repos", f"{known['repo_id']}@{known['sha']}"):
            return _from_cached(hit)
    client = HubClient(settings)
    repo = client.resolve(ref.name, ref.revision)
    if not settings.offline:  # remember where the revision pointed, for HF_HUB_OFFLINE runs
        cache.save("refs", ref_key, {"repo_id": repo.repo_id, "sha": repo.sha})
    if hit := cache.load("repos", f"{repo.repo_id}@{repo.sha}"):
        return _from_cached(hit)
    threading.Thread(target=_preload_transformers, daemon=True).start()
    if "config.json" not in repo.files:
        raise errors.MalformedConfigError(f"{repo.repo_id}@{repo.sha[:12]} has no config.json.")
    config = client.fetch_json(repo, "config.json", errors.MalformedConfigError)
    if not isinstance(config, dict):
        raise errors.MalformedConfigError(f"{repo.repo_id}/config.json is not a JSON object.")
    checkpoint = None if settings.offline else client.fetch_checkpoint(repo)
    entry = {"repo_id": repo.repo_id, "sha": repo.sha, "config": config,
             "checkpoint": checkpoint.to_dict() if checkpoint else None}
    if not settings.offline:
        for key in {f"{repo.repo_id}@{repo.sha}", f"{ref.name}@{repo.sha}"}:
            cache.save("repos", key, entry)
    return config, checkpoint, repo.repo_id, repo.sha


def _from_cached(entry: dict) -> tuple[dict, Checkpoint | None, str, str]:
    checkpoint = Checkpoint.from_dict(entry["checkpoint"]) if entry.get("checkpoint") else None
    return entry["config"], checkpoint, entry["repo_id"], entry["sha"]


def guard_config(config: Any, depth: int = 0) -> None:
    """Refuse absurd or mistyped dimensions anywhere in the (nested) config before building anything."""
    if depth > 8:
        raise errors.MalformedConfigError("config.json nests too deeply.")
    for key, value in (config.items() if isinstance(config, dict) else []):
        if isinstance(value, dict):
            guard_config(value, depth + 1)
        elif key in {"torch_dtype", "dtype"}:
            if value is not None and not isinstance(value, str):
                raise errors.MalformedConfigError(f"config.json `{key}` must be a dtype name, got {value!r}.")
        elif key in LIMITS or key in _DIM_KEYS:
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise errors.MalformedConfigError(f"config.json `{key}` must be an integer, got {value!r}.")
            if value < 0:
                raise errors.MalformedConfigError(f"config.json `{key}` must not be negative, got {value}.")
            limit = LIMITS.get(key, LIMITS.get(_DIM_KEYS.get(key, ""), None))
            if limit is not None and value > limit:
                raise errors.AbsurdConfigError(f"config.json `{key}` = {value:,} exceeds {limit:,}; refusing to build it.")


_DIM_KEYS = {"num_hidden_layers": "num_layers", "n_layer": "num_layers", "n_embd": "hidden_size", "d_model": "hidden_size",
             "num_local_experts": "num_experts", "n_routed_experts": "num_experts", "n_head": "num_attention_heads",
             "n_positions": "max_position_embeddings", "encoder_layers": "num_layers", "decoder_layers": "num_layers"}


# Meta builds patch torch globals (accelerate's init_empty_weights), so threads take turns; holding one lock
# across check-build-save also means concurrent fine-tunes sharing a config hash build it once.
_BUILD_LOCK = threading.Lock()
meta_builds = 0
"""Meta-model builds this process has started (`hfmem scan` reports the count)."""


def derive(config: dict[str, Any], checkpoint: Checkpoint | None, notes: list[str]) -> tuple[Architecture, Inventory]:
    """Architecture and exact inventory: meta build (cached by config hash), else headers, else config dims."""
    guard_config(config)
    key = cache.config_hash(config, salt=_transformers_version())
    if hit := cache.load("inventories", key):
        return read_architecture(hit["normalised_config"]), Inventory.from_dict(hit["inventory"])
    with _BUILD_LOCK:  # a thread that waited here finds the inventory another one just built
        if hit := cache.load("inventories", key):
            return read_architecture(hit["normalised_config"]), Inventory.from_dict(hit["inventory"])
        return _derive_uncached(config, checkpoint, notes, key)


def _derive_uncached(config: dict[str, Any], checkpoint: Checkpoint | None, notes: list[str],
                     key: str) -> tuple[Architecture, Inventory]:
    """Build (or fall back) and cache; called under _BUILD_LOCK."""
    from hfmem.meta_model import build_inventory, make_config, normalised_config

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
    meta_builds += 1
    inventory = build_inventory(config_obj)
    cache.save("inventories", key, {"normalised_config": normalised, "inventory": inventory.to_dict()})
    return architecture, inventory


def _transformers_version() -> str:
    from importlib.metadata import version

    return version("transformers")


_COMPONENT_PATTERNS = [
    ("vision", re.compile(r"vision_tower|vision_model|visual\.")),
    ("projector", re.compile(r"multi_modal_projector|mm_projector")),
    ("embeddings", re.compile(r"embed|wte|wpe|word_embeddings")),
    ("head", re.compile(r"^(lm_head|output|head)\.")),
    ("norms", re.compile(r"norm|ln_|\.ln\d?\.")),
    ("router", re.compile(r"\.(gate|router)\.weight$|\.router\.")),
    ("experts", re.compile(r"experts")),
    ("attention", re.compile(r"attn|attention|q_proj|k_proj|v_proj|o_proj|query|key|value")),
    ("ssm", re.compile(r"mixer|mamba")),
    ("mlp", re.compile(r"mlp|ffn|feed_forward|fc\d|dense")),
]


def _name_component(name: str) -> str:
    return next((c for c, pattern in _COMPONENT_PATTERNS if pattern.search(name)), "other")


def inventory_from_checkpoint(checkpoint: Checkpoint) -> Inventory:
    """An inventory from tensor names and shapes, for architectures transformers does not know."""
    by_component: dict[str, int] = {}
    groups: dict[tuple, int] = {}
    for name, tensor in checkpoint.tensors.items():
        component = _name_component(name)
        by_component[component] = by_component.get(component, 0) + tensor.elements
        if name.endswith(".weight") and len(tensor.shape) == 2 and component not in {"embeddings", "norms"}:
            leaf = name.rsplit(".", 2)[-2]
            key = (leaf, component, tensor.shape[1], tensor.shape[0])
            groups[key] = groups.get(key, 0) + 1
    linears = tuple(LinearGroup(k[0], k[1], k[2], k[3], n, "linear", False) for k, n in groups.items())
    return Inventory("", checkpoint.total, by_component, linears, (), {})


def inventory_from_dims(arch: Architecture) -> Inventory:
    """An approximate inventory from config dimensions alone (no checkpoint, unknown architecture)."""
    h, layers = arch.hidden_size, arch.num_layers
    q, kv = arch.num_attention_heads * arch.head_dim, arch.num_key_value_heads * arch.head_dim
    inner = arch.moe_intermediate_size or arch.intermediate_size
    experts = max(1, arch.num_experts)
    linears = [
        LinearGroup("q_proj", "attention", h, q, layers, "linear", False),
        LinearGroup("k_proj", "attention", h, kv, layers, "linear", False),
        LinearGroup("v_proj", "attention", h, kv, layers, "linear", False),
        LinearGroup("o_proj", "attention", q, h, layers, "linear", False),
        LinearGroup("up_proj", "mlp", h, inner, layers * experts, "linear", False),
        LinearGroup("down_proj", "mlp", inner, h, layers * experts, "linear", False),
    ]
    if arch.gated_mlp:
        linears.append(LinearGroup("gate_proj", "mlp", h, inner, layers * experts, "linear", False))
    by_component = {"embeddings": arch.vocab_size * h, "norms": (2 * layers + 1) * h}
    for group in linears:
        by_component[group.component] = by_component.get(group.component, 0) + group.parameters
    if not arch.tie_word_embeddings:
        linears.append(LinearGroup("lm_head", "head", h, arch.vocab_size, 1, "linear", False))
        by_component["head"] = arch.vocab_size * h
    return Inventory("", sum(by_component.values()), by_component, tuple(linears), (), {})
