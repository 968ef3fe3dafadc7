"""From a model reference to a ModelReport: fetch (or load from cache), derive the architecture, count, cross-check.

The orchestration lives here; each step is in its own module (hub.client, hub.local, hub.cache,
model.derive, model.crosscheck). The heavy transformers import starts in a background thread while the
Hub answers, and the safetensors headers are read while config.json downloads (one round trip fewer).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hfmem import errors
from hfmem.hub import cache
from hfmem.hub.hub_settings import HubSettings
from hfmem.hub.modelref import ModelRef
from hfmem.hub.safetensors import CHECKPOINT_SCHEMA, Checkpoint
from hfmem.hub.schema import JSON, Map, Nullable
from hfmem.model.architecture import Architecture
from hfmem.model.crosscheck import CrossCheck, cross_check
from hfmem.model.derive import derive
from hfmem.model.inventory import Inventory

# Hub settings, or what resolves them: resolved only once a request is needed, so a warm answer from hfmem's
# cache never imports huggingface_hub.
SettingsSource = HubSettings | Callable[[], HubSettings] | None
T = TypeVar("T")


REF_ENTRY = {"repo_id": str, "sha": str}
"""Where a revision pointed when last online (key: name@revision), for HF_HUB_OFFLINE runs."""
REPO_ENTRY = {"repo_id": str, "sha": str, "config": Map(JSON), "checkpoint": Nullable(CHECKPOINT_SCHEMA)}
"""What a commit holds (key: repo@commit): its config.json and every tensor's dtype and shape."""

SCHEMA_VERSION = 7
"""The report's layout: the fit's rows under their method with the GPU, status and mitigations as indices, the GPUs
and linear layers as rows, zero byte terms left out (5); a time's budget put back on reading, the fastest, cheapest
and ranked setups as row references (6); named cells with their verdict and advice, estimates by method in full,
GPUs by name (7) (hfmem.memory.record, docs/json.md)."""
READABLE_SCHEMA_VERSIONS = (SCHEMA_VERSION,)
LINEAR_FIELDS = ("name", "component", "in_features", "out_features", "count", "kind", "has_bias", "parameters")
"""A row of `parameters.linear_layers`: one group of same-shaped linear layers (model.inventory.LinearGroup)."""


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
        """The stable JSON report (docs/json.md; `schema_version` bumps on breaking changes)."""
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
                "approximate": self.inventory.approximate,
                "by_component": self.inventory.by_component,
                "checkpoint_total": ckpt.total if ckpt else None,
                "checkpoint_bytes": ckpt.total_bytes if ckpt else None,
                "checkpoint_files": ckpt.files if ckpt else 0,
                "by_dtype": ckpt.by_dtype() if ckpt else {},
                "tied": [list(pair) for pair in self.inventory.tied],
                "linear_layers": {"columns": list(LINEAR_FIELDS),
                                  "rows": [[getattr(g, k) for k in LINEAR_FIELDS] for g in self.inventory.linears]},
            },
            "crosscheck": self.crosscheck.to_dict(),
            "notes": self.notes,
        }


def _preload_transformers() -> None:
    """Import transformers while the Hub answers, under the build's own import lock (meta.load_transformers)."""
    from hfmem.model.meta import load_transformers

    with contextlib.suppress(Exception):  # the build step reports import problems itself
        load_transformers()


def _in_background(call: Callable[[], T]) -> Future[T]:
    """Run `call` on a daemon thread (an error elsewhere returns at once: exit never waits for it); its future."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as err:  # handed to whoever reads the result
            future.set_exception(err)

    threading.Thread(target=run, daemon=True).start()
    return future


def analyse(ref: ModelRef, settings: SettingsSource = None) -> ModelReport:
    """Resolve, fetch and derive; Hub results are cached per commit so pinned re-runs do no I/O.

    `settings`: the Hub settings, a function returning them, or None for `HubSettings.from_env()`.
    """
    from hfmem.hub import local

    notes: list[str] = []
    if ref.kind == "hub":
        config, checkpoint, repo_id, sha = _fetch(ref, settings)
        name, revision = repo_id, ref.revision
    else:
        path = ref.path
        assert path is not None, "a local or config reference names its path"
        config = local.read_config(path / "config.json" if ref.kind == "local" else path)
        checkpoint = local.read_checkpoint(path) if ref.kind == "local" else None
        name, revision, sha = ref.name, None, None
    if checkpoint is None:
        notes.append("No safetensors checkpoint: parameters come from the config alone (no header cross-check).")
    architecture, inventory = derive(config, checkpoint, notes)
    built = inventory if inventory.model_class else None  # a fallback inventory cannot check the headers
    check = cross_check(built, checkpoint, config, architecture.num_layers)
    return ModelReport(name, ref.kind, revision, sha, config, architecture, inventory, checkpoint, check, notes)


def _fetch(ref: ModelRef, source: SettingsSource) -> tuple[dict, Checkpoint | None, str, str]:
    """config.json and checkpoint headers for a Hub ref, from hfmem's cache when the commit is known."""
    if ref.pinned and (hit := cache.load("repos", f"{ref.name}@{ref.revision}", REPO_ENTRY)):
        return _from_cached(hit)
    settings = _resolve(source)
    ref_key = f"{ref.name}@{ref.revision or 'main'}"
    if (settings.offline and (known := cache.load("refs", ref_key, REF_ENTRY))
            and (hit := cache.load("repos", f"{known['repo_id']}@{known['sha']}", REPO_ENTRY))):
        return _from_cached(hit)
    from hfmem.hub.client import HubClient

    client = HubClient(settings)
    repo = client.resolve(ref.name, ref.revision)
    if not settings.offline:  # remember where the revision pointed, for HF_HUB_OFFLINE runs
        cache.save("refs", ref_key, {"repo_id": repo.repo_id, "sha": repo.sha})
    if hit := cache.load("repos", f"{repo.repo_id}@{repo.sha}", REPO_ENTRY):
        return _from_cached(hit)
    threading.Thread(target=_preload_transformers, daemon=True).start()
    if "config.json" not in repo.files:
        raise errors.MalformedConfigError(f"{repo.repo_id}@{repo.sha[:12]} has no config.json.")
    headers = None if settings.offline else _in_background(lambda: client.fetch_checkpoint(repo))
    config = client.fetch_json(repo, "config.json", errors.MalformedConfigError)
    if not isinstance(config, dict):
        raise errors.MalformedConfigError(f"{repo.repo_id}/config.json is not a JSON object.")
    checkpoint = None if headers is None else headers.result()
    entry = {"repo_id": repo.repo_id, "sha": repo.sha, "config": config,
             "checkpoint": checkpoint.to_dict() if checkpoint else None}
    if not settings.offline:
        for key in {f"{repo.repo_id}@{repo.sha}", f"{ref.name}@{repo.sha}"}:
            cache.save("repos", key, entry)
    return config, checkpoint, repo.repo_id, repo.sha


def _resolve(source: SettingsSource) -> HubSettings:
    """The Hub settings a request needs, resolving them now when given as a function (or from the environment)."""
    if source is None:
        return HubSettings.from_env()
    return source if isinstance(source, HubSettings) else source()


def _from_cached(entry: dict) -> tuple[dict, Checkpoint | None, str, str]:
    checkpoint = Checkpoint.from_dict(entry["checkpoint"]) if entry.get("checkpoint") else None
    return entry["config"], checkpoint, entry["repo_id"], entry["sha"]
