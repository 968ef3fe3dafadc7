"""How many parameters DeepSpeed ZeRO-3 holds gathered at once: its coordinator's fetch, prefetch and release rules
replayed over a model's module order for one training step.

DeepSpeed records the order its hooks fetch modules in during the first step, then, on every later step, fetches each
module's parameters as it runs, prefetches the next ones up to stage3_prefetch_bucket_size elements while fewer than
stage3_max_live_parameters are gathered, and releases a module's parameters after it ran unless the same parameter is
used again within stage3_max_reuse_distance elements of modules (or a prefetch already claimed its next use):
_fetch_sub_module_impl L353-L492, release_sub_module L494-L535 and __params_to_release L634-L663 of
https://github.com/deepspeedai/DeepSpeed/blob/edaa7221267243c7be7fb49c5d5f5c4fb97b4641/deepspeed/runtime/zero/partitioned_param_coordinator.py
(0.19.6; the same lines in 0.19.8, the version the tests run).
Parameters of at most stage3_param_persistence_threshold elements stay gathered for the whole run and are not
counted here. tests/test_zero3_gather.py checks the replay against DeepSpeed's own count on CPU.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

Module = tuple[int, ...]
"""The parameter ids one module's hooks fetch (its own parameters, not its children's)."""


@dataclass(frozen=True)
class GatherLimits:
    """The ZeRO-3 sizes that decide residency, in elements (DeepSpeed's zero_optimization keys)."""

    max_live: float
    """stage3_max_live_parameters: prefetching stops once this many elements are gathered."""
    max_reuse: float
    """stage3_max_reuse_distance: a parameter used again within this many elements of modules stays gathered."""
    prefetch: float
    """stage3_prefetch_bucket_size: elements prefetched after each fetch."""
    persistence: float
    """stage3_param_persistence_threshold: parameters this small are never released (not counted)."""


@dataclass(frozen=True)
class Block:
    """One part of a decoder layer as its hooks see it: a norm, then a container module (attention, MLP) holding
    linears, with an activation module (no parameters) after the first of them where `act`."""

    norm: int
    linears: tuple[int, ...]
    act: bool = False


@dataclass(frozen=True)
class ModelOrder:
    """A decoder's modules as ZeRO-3's hooks fetch them in one training step, and each parameter's elements."""

    modules: tuple[Module, ...]
    numel: tuple[int, ...]
    around_loss: range
    """The fetches from the head's forward through the last layer's backward, where a step's activations peak (the
    loss, or the first layer's backward under recomputation)."""


@dataclass(frozen=True)
class Gathered:
    """The most elements ZeRO-3 holds gathered at once: over the whole step, and around the loss."""

    step: int
    around_loss: int


def step_order(embedding: int, layer: tuple[Block, ...], layers: int, head: int, *, tied: bool,
               recompute: bool) -> ModelOrder:
    """The fetch order of one step, as Hugging Face decoders run under DeepSpeed's hooks (a module's pre-forward
    fetch before its children's; in backward a container before its children, the children reversed):

    forward: the model wrappers, the embedding, the rotary module, each layer (its container, then per block the
    norm, the block's container, its linears), the final norm, the head (the embedding's parameter when `tied`);
    backward: the wrapper, the head, the model, the final norm, each layer from the last (its container, under full
    recomputation its forward run again, then its blocks reversed), the embedding.
    Modules without parameters matter: each fetch is a chance to prefetch. One parameter per module (a bias rides
    with its weight; a layer's norms are one per block)."""
    numel: list[int] = [embedding]

    def new(n: int) -> Module:
        numel.append(n)
        return (len(numel) - 1,)

    none: Module = ()
    forward: list[Module] = [none, none, (0,), none]
    backward_layers: list[list[Module]] = []
    for _ in range(layers):
        fwd: list[Module] = []
        bwd: list[Module] = []
        for block in layer:
            norm, linears = new(block.norm), [new(n) for n in block.linears]
            inner = linears[:1] + ([none] if block.act else []) + linears[1:]
            fwd += [norm, none, *inner]
            bwd = [none, *reversed(inner), norm, *bwd]
        forward += [none, *fwd]
        backward_layers.append([none] + (fwd if recompute else []) + bwd)
    final = new(layer[0].norm if layer else 0)
    head_module = (0,) if tied else new(head)
    forward += [final, head_module]
    backward = [none, head_module, none, final]
    for modules in reversed(backward_layers):
        backward += modules
    backward.append((0,))
    last_layer = len(forward) + 4 + (len(backward_layers[-1]) if backward_layers else 0)
    return ModelOrder(tuple(forward + backward), tuple(numel), range(len(forward) - 1, last_layer))


def peak_gathered(order: ModelOrder, limits: GatherLimits) -> Gathered:
    """The most elements ZeRO-3 holds gathered at once, after each fetch and its prefetch (persistent parameters
    excluded)."""
    modules, numel = order.modules, order.numel
    persistent = {p for p, n in enumerate(numel) if n <= limits.persistence}
    walked = [0]
    for module in modules:
        walked.append(walked[-1] + sum(numel[p] for p in module))
    next_use: list[dict[int, int]] = [{} for _ in modules]
    upcoming: dict[int, int] = {}
    for step in range(len(modules) - 1, -1, -1):
        next_use[step] = {p: upcoming[p] for p in modules[step] if p in upcoming}
        upcoming.update({p: step for p in modules[step]})
    queue = deque((p, step) for step, module in enumerate(modules) for p in sorted(module))
    claimed: dict[int, int] = {}
    resident: set[int] = set()
    live = 0
    held = []
    for step, module in enumerate(modules):
        fetch = [p for p in module if p not in persistent and p not in resident]
        resident.update(fetch)
        live += sum(numel[p] for p in fetch)
        for _ in [p for p in module if claimed.get(p, -1) < step]:  # the module's own entries leave the queue
            p, used_at = queue.popleft()
            claimed[p] = used_at
        budget = min(limits.max_live - live, limits.prefetch)
        prefetched = 0
        while queue and prefetched < budget:
            p, used_at = queue.popleft()
            claimed[p] = max(claimed.get(p, -1), used_at)
            if p not in persistent and p not in resident:
                resident.add(p)
                prefetched += numel[p]
        live += prefetched
        held.append(live)
        after = step + 1
        for p in module:
            reused = p in next_use[step] and walked[next_use[step][p]] - walked[after] < limits.max_reuse
            if p in resident and not reused and claimed.get(p, -1) <= after:
                resident.discard(p)
                live -= numel[p]
    return Gathered(max(held), max(held[i] for i in order.around_loss))


def gathered(embedding: int, layer: tuple[Block, ...], layers: int, head: int, *, tied: bool, recompute: bool,
             limits: GatherLimits) -> Gathered:
    """peak_gathered over step_order, replaying at most the first and last `span` + 1 layers: what is gathered at a
    module depends on the modules within the prefetch window (stage3_max_live_parameters plus one parameter) and
    the reuse window (stage3_max_reuse_distance) of it, so the layers between repeat their neighbours' figures and
    a deep model's peaks come from a few layers each end (the same figures, a fraction of the work)."""
    elements = sum(block.norm + sum(block.linears) for block in layer)
    largest = max((n for block in layer for n in block.linears), default=0)
    span = math.ceil((limits.max_live + limits.max_reuse + largest) / max(1, elements)) + 1
    replayed = min(layers, 2 * span + 2)
    return peak_gathered(step_order(embedding, layer, replayed, head, tied=tied, recompute=recompute), limits)
