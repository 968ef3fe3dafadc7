"""The decoder's structure: the kinds of layers it stacks, and each one's linear layers by role (from the inventory)."""

from __future__ import annotations

from dataclasses import dataclass

from hfmem.model.architecture import Architecture
from hfmem.model.inventory import Inventory, LinearGroup

_OUT_NAMES = {"o_proj", "dense", "c_proj", "out_proj", "wo", "o", "self_attn_output", "attn_out"}
_OUTSIDE_LAYERS = {"head", "vision", "projector", "embeddings"}
_MLP_COMPONENTS = {"mlp", "experts", "other"}
_COMMON_ROLES = ("attn_in", "attn_out", "q_b", "kv_b")
_DENSE_ROLES = (*_COMMON_ROLES, "mlp_in", "mlp_out")
_MOE_ROLES = (*_COMMON_ROLES, "shared_in", "shared_out", "router", "experts_in", "experts_out")


@dataclass(frozen=True)
class Module:
    """One linear layer inside a decoder layer: its leaf name (what LoRA targets), dims and count per layer."""

    name: str
    in_features: int
    out_features: int
    per_layer: float
    kind: str = "linear"


@dataclass(frozen=True)
class LayerModules:
    """Linear layers of one decoder layer by role (each a list of Modules)."""

    attn_in: tuple[Module, ...] = ()
    attn_out: tuple[Module, ...] = ()
    q_b: tuple[Module, ...] = ()
    kv_b: tuple[Module, ...] = ()
    mlp_in: tuple[Module, ...] = ()
    mlp_out: tuple[Module, ...] = ()
    shared_in: tuple[Module, ...] = ()
    shared_out: tuple[Module, ...] = ()
    experts_in: tuple[Module, ...] = ()
    experts_out: tuple[Module, ...] = ()
    router: tuple[Module, ...] = ()


@dataclass(frozen=True)
class _LayerCounts:
    """How many decoder layers have attention, a dense MLP and a MoE block (the divisors of per-layer counts)."""

    attention: int
    dense: int
    moe: int

    @classmethod
    def of(cls, arch: Architecture) -> _LayerCounts:
        """The counts of `arch` (at least one attention layer, so per-layer counts stay finite)."""
        attention = sum(c for k, c in arch.layer_types.items() if "attention" in k) or arch.num_layers
        dense = arch.num_dense_layers if arch.is_moe else arch.num_layers
        return cls(max(1, attention), dense, arch.num_layers - dense if arch.is_moe else 0)


def layer_modules(arch: Architecture, inventory: Inventory) -> tuple[LayerModules, LayerModules]:
    """Split the inventory's linear layers into (dense-layer, MoE-layer) modules by role."""
    counts = _LayerCounts.of(arch)
    widening_mlp = any(o.component == "mlp" and o.out_features != arch.hidden_size for o in inventory.linears)
    roles: dict[str, list[Module]] = {role: [] for role in (*_DENSE_ROLES, *_MOE_ROLES)}
    for g in inventory.linears:
        placed = _place(g, arch, counts, widening_mlp)
        if placed is not None:
            roles[placed[0]].append(placed[1])
    dense = LayerModules(**{role: tuple(roles[role]) for role in _DENSE_ROLES})
    moe = LayerModules(**{role: tuple(roles[role]) for role in _MOE_ROLES})
    return dense, moe


def _module(g: LinearGroup, layers: int) -> Module:
    return Module(g.name, g.in_features, g.out_features, g.count / max(1, layers), g.kind)


def _place(g: LinearGroup, arch: Architecture, counts: _LayerCounts, widening_mlp: bool) -> tuple[str, Module] | None:
    """The role of one linear group in a decoder layer and its Module (None: outside the decoder layers)."""
    h = arch.hidden_size
    if g.component in _OUTSIDE_LAYERS:
        return None
    if g.kind == "experts":
        role = "experts_out" if g.out_features == h and g.in_features != h else "experts_in"
        return role, _module(g, counts.moe * max(1, arch.num_experts))
    if g.component == "attention":
        return _attention_role(g, arch), _module(g, counts.attention)
    if g.component == "router":
        return "router", _module(g, counts.moe)
    if g.component not in _MLP_COMPONENTS:
        return None
    if g.in_features == g.out_features == h and widening_mlp:
        # a square hidden->hidden projection beside the MLP is the attention output (BERT's
        # BertSelfOutput.dense, which the inventory files under "mlp" by its class name) or a head transform
        if g.count == arch.num_layers + arch.encoder_layers or g.count == counts.attention:
            return "attn_out", _module(g, counts.attention)
        return None
    is_out = g.out_features == h and g.in_features != h
    if _in_shared_expert(g, arch, counts):
        return ("shared_out" if is_out else "shared_in"), _module(g, counts.moe)
    return ("mlp_out" if is_out else "mlp_in"), _module(g, counts.dense)


def _attention_role(g: LinearGroup, arch: Architecture) -> str:
    """attn_in (q/k/v), attn_out, or MLA's q_b / kv_b up-projections from the latent ranks."""
    mla = arch.mla
    if mla is not None and mla.q_lora_rank and g.in_features == mla.q_lora_rank and g.name != "kv_b_proj":
        return "q_b"
    if mla is not None and g.in_features == mla.kv_lora_rank and g.name.startswith("kv_b"):
        return "kv_b"
    if g.out_features == arch.hidden_size and (g.name in _OUT_NAMES or g.in_features != arch.hidden_size):
        return "attn_out"
    return "attn_in"


def _in_shared_expert(g: LinearGroup, arch: Architecture, counts: _LayerCounts) -> bool:
    """Whether an MLP linear of a MoE model is the MoE layers' shared expert rather than a dense layer's MLP."""
    if not arch.is_moe:
        return False
    if not counts.dense:
        return True
    if not counts.moe:
        return False
    one_per_dense_layer = g.count % counts.dense == 0 and g.count // counts.dense <= 1
    return not (one_per_dense_layer and arch.intermediate_size in (g.in_features, g.out_features))


def intermediate_width(mods: tuple[Module, ...], default: int) -> int:
    """The MLP's intermediate width from its input projections (a fused gate_up counts half)."""
    widths = [m.out_features // 2 if "gate_up" in m.name else m.out_features for m in mods]
    return max(widths) if widths else default


def layer_plan(arch: Architecture) -> tuple[tuple[str, str, int], ...]:
    """(attention kind, MLP kind, count) groups of decoder layers."""
    kinds = dict(arch.layer_types) or {"full_attention": arch.num_layers}
    if any(k in kinds for k in ("mamba", "mlp", "moe")):  # Nemotron-H style: each layer is one block
        return tuple(p for p in (_hybrid_group(arch, kind, count) for kind, count in kinds.items()) if p[2])
    plan: list[tuple[str, str, int]] = []
    total = sum(kinds.values())
    dense = arch.num_dense_layers if arch.is_moe else total
    for kind, count in kinds.items():
        d = round(count * dense / total) if total else 0
        if d:
            plan.append((kind, "dense", d))
        if count - d:
            plan.append((kind, "moe", count - d))
    return tuple(plan)


def _hybrid_group(arch: Architecture, kind: str, count: int) -> tuple[str, str, int]:
    """A hybrid model's layer kind as a one-block group: attention, a Mamba mixer, or an MLP / MoE alone."""
    if "attention" in kind:
        return kind, "none", count
    if kind == "mamba":
        return "mamba", "none", count
    return "mlp_only", "moe" if kind == "moe" and arch.is_moe else "dense", count
