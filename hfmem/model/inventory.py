"""A model's parameter inventory (per component, linear layers by role and shape) as plain data.

`model.meta` fills it exactly from a meta build; for architectures transformers does not know, the
fallbacks here read it from checkpoint tensor names and shapes, or approximate it from config dims.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from hfmem.hub.schema import COUNT, Map, Nullable

if TYPE_CHECKING:
    from hfmem.hub.safetensors import Checkpoint
    from hfmem.model.architecture import Architecture


LINEAR_SCHEMA = {"name": str, "component": str, "in_features": COUNT, "out_features": COUNT, "count": COUNT,
                 "kind": str, "has_bias": bool, "parameters": COUNT}
INVENTORY_SCHEMA = {"model_class": str, "total": COUNT, "by_component": Map(COUNT), "linears": [LINEAR_SCHEMA],
                    "tied": [(str, str)], "buffers": Map(COUNT), "approximate": Nullable(str)}
"""`Inventory.to_dict` as hub.schema declares it: what hfmem's cache must hold to be read back."""
COMPONENTS = ("embeddings", "attention", "ssm", "mlp", "experts", "router", "norms", "head", "vision", "projector",
              "other")


@dataclass(frozen=True)
class LinearGroup:
    """Weight matrices of one role and shape, aggregated over layers (and experts).

    `kind` is "linear" for `nn.Linear` modules (what LoRA targets and bitsandbytes quantizes),
    "conv1d" for GPT-2's transposed Conv1D, "experts" for fused per-expert weight tensors.
    """

    name: str
    component: str
    in_features: int
    out_features: int
    count: int
    kind: str
    has_bias: bool

    @property
    def parameters(self) -> int:
        return self.count * (self.in_features * self.out_features + (self.out_features if self.has_bias else 0))


@dataclass(frozen=True)
class Inventory:
    """Exact counts from the meta model: tied weights counted once, buffers kept apart."""

    model_class: str
    total: int
    by_component: dict[str, int]
    linears: tuple[LinearGroup, ...]
    tied: tuple[tuple[str, str], ...]
    buffers: dict[str, int]
    """Buffer elements by leaf name (e.g. "inv_freq"); some checkpoints store such buffers as tensors."""
    approximate: str | None = None
    """Why the counts are an approximation (no build and no checkpoint to count from); None when they are exact."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data, built field by field: dataclasses.asdict deep-copies every value, a few ms a model in a scan."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        return data | {"by_component": dict(self.by_component), "buffers": dict(self.buffers),
                       "linears": [vars(g) | {"parameters": g.parameters} for g in self.linears],
                       "tied": tuple(tuple(pair) for pair in self.tied)}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Inventory:
        linears = tuple(LinearGroup(**{k: v for k, v in g.items() if k != "parameters"}) for g in data["linears"])
        return Inventory(
            model_class=data["model_class"],
            total=data["total"],
            by_component=dict(data["by_component"]),
            linears=linears,
            tied=tuple(tuple(p) for p in data["tied"]),
            buffers=dict(data["buffers"]),
            approximate=data.get("approximate"),
        )


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
    why = (f"model type {arch.model_type!r} is not one transformers builds and there is no checkpoint: counted from "
           "the config's dimensions with a Llama-style layer")
    return Inventory("", sum(by_component.values()), by_component, tuple(linears), (), {}, approximate=why)


def head_is_tied(inventory: Inventory) -> bool:
    """Whether the output head's weight is the input embedding's (a head linear whose weight counts as embeddings)."""
    has_head = any(g.component == "head" for g in inventory.linears)
    return has_head and inventory.by_component.get("head", 0) == 0


def retied(inventory: Inventory, tie: bool) -> Inventory:
    """The inventory with the output head tied to the input embedding or untied from it (a framework overriding
    tie_word_embeddings): an untied head is a weight of its own, a tied one counts once, as embeddings.

    Only the head's weight moves; a head bias (rare) stays the head's. `tied` (the checkpoint's name pairs) is
    left as the model's own. A model without an output head, or already as asked, is returned as it is.
    """
    heads = [g for g in inventory.linears if g.component == "head"]
    if not heads or head_is_tied(inventory) == tie:
        return inventory
    weight = sum(g.count * g.in_features * g.out_features for g in heads)
    by_component = dict(inventory.by_component)
    change = -weight if tie else weight
    by_component["head"] = by_component.get("head", 0) + change
    return replace(inventory, total=inventory.total + change, by_component={k: v for k, v in by_component.items() if v})
