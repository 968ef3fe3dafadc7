"""What a mixture-of-experts block saves: routing, the routed experts over top-k token copies, shared experts."""

from __future__ import annotations

from hfmem.memory.activations.linears import lora_adapters
from hfmem.memory.activations.mlp import mlp
from hfmem.memory.activations.saved import Saved
from hfmem.memory.activations.spec import ActivationSpec
from hfmem.memory.activations.structure import LayerModules, Module, intermediate_width
from hfmem.memory.activations.trainability import FULL


def _fp32_router(spec: ActivationSpec) -> bool:
    """The router runs on its own fp32 copy of the hidden states (DeepSeek), not on the 16-bit normed input."""
    return spec.traits.fp32_router and spec.p < 4


def router_needs_normed_input(spec: ActivationSpec) -> bool:
    """Whether the router's weight gradient keeps the normed hidden states it reads."""
    return not _fp32_router(spec) and spec.trained.weight("router")


def moe(saved: Saved, spec: ActivationSpec, mods: LayerModules) -> None:
    """Router, routed experts over b·s·k token copies (dropless, as HF) and shared experts."""
    arch, trained, p = spec.arch, spec.trained, spec.p
    h, e, k = arch.hidden_size, arch.num_experts, max(1, arch.experts_per_token)
    if _fp32_router(spec) and trained.weight("router"):
        saved.add("router.fp32_input", 4 * h)  # F.linear(x.float(), w.float()) keeps the fp32 copy
    saved.add("router.probs", 4 * e + 12 * k + 4 + (e if spec.traits.fp32_router else 0))
    width = arch.moe_intermediate_size or arch.intermediate_size
    if any(trained.needs_input(m.name) for m in mods.experts_in) or (trained.full and mods.experts_in):
        saved.add("experts.gathered_input", k * (p if spec.q is None else spec.q) * h)  # quantized under TE
    mlp(saved, "experts", spec, width, mods.experts_in or (Module("gate_up_proj", h, 2 * width, 1, "experts"),),
        mods.experts_out or (Module("down_proj", width, h, 1, "experts"),),
        trained=trained if mods.experts_out else FULL, tokens_per_token=k)
    if not spec.probs_in_activation:
        saved.add("experts.weighted_output", k * p * h)  # kept for the routing weights' gradient
    saved.add("experts.routing", k * (4 + 24))  # routing weight per copy, sort/scatter indices
    if mods.shared_in:
        shared_width = intermediate_width(mods.shared_in, width * max(1, arch.num_shared_experts))
        mlp(saved, "shared_expert", spec, shared_width, mods.shared_in, mods.shared_out, trained=trained)
        lora_adapters(saved, "shared_in", spec, mods.shared_in)
        lora_adapters(saved, "shared_out", spec, mods.shared_out)
