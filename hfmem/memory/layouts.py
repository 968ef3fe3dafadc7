"""The layout search: the fewest GPUs a training run needs on one GPU kind, and the layout people would run there.

At each GPU count (powers of two) the layouts are tried in the usual order of preference and the first whose
most-loaded rank fits wins: fewer context-parallel ranks first, then fewer pipeline stages, then fewer tensor-parallel
ranks; i.e. data parallelism with FSDP (ZeRO-3) sharding alone, then TP inside a node (at most the GPUs one link
joins and the model's KV heads), then PP across nodes, and CP only for sequences the rest cannot hold, DP/FSDP
over what is left. A sequence long enough that attention outweighs the linear layers (`attention_bound`) reverses
TP and CP: CP first, then PP, then TP (Megatron-LM docs/user-guide/features/context_parallel.md: more TP "can make
compute in layers such as Linear too short to hide communication latency", while CP scales compute and
communication down together and GQA shrinks its K/V exchange). Pure: the per-rank bytes come from a function the
caller passes (memory.fit's `_layout`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from hfmem.errors import InvalidInputError
from hfmem.memory.settings import TrainingSettings
from hfmem.model.architecture import Architecture
from hfmem.model.inventory import Inventory


@dataclass(frozen=True)
class Candidate:
    """One layout: tensor, pipeline and context parallel ranks, and data-parallel (FSDP-sharded) replicas."""

    tp: int = 1
    pp: int = 1
    cp: int = 1
    dp: int = 1

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    def describe(self) -> str:
        """E.g. "FSDP2·CP4", "TP8·PP2", "FSDP8": the dimensions above 1, FSDP for the data-parallel one."""
        dims = [f"FSDP{self.dp}" if self.dp > 1 else "", f"TP{self.tp}" if self.tp > 1 else "",
                f"PP{self.pp}" if self.pp > 1 else "", f"CP{self.cp}" if self.cp > 1 else ""]
        return "·".join(d for d in dims if d) or "1 GPU"


@dataclass(frozen=True)
class Limits:
    """What bounds each dimension: TP by a node and by the KV heads (and must divide the heads), PP by the layers,
    CP by dividing the sequence."""

    heads: int
    kv_heads: int
    layers: int
    seq_len: int
    tp_domain: int = 8
    """The most GPUs TP may span: those one fast link joins inside a node (memory.fit.tp_domain)."""
    attention_bound: bool = False
    """The sequence is long enough that each layer's causal attention takes more multiply-adds per token than its
    linear layers (`attention_bound`): CP is then preferred to TP."""

    @classmethod
    def of(cls, arch: Architecture, seq_len: int, tp_domain: int, inventory: Inventory | None = None) -> Limits:
        return cls(arch.num_attention_heads, arch.num_key_value_heads or arch.num_attention_heads, arch.num_layers,
                   seq_len, tp_domain, inventory is not None and attention_bound(arch, inventory, seq_len))

    def tp_ok(self, tp: int) -> bool:
        return tp <= min(self.tp_domain, self.kv_heads) and not self.heads % tp and not self.kv_heads % tp


@dataclass(frozen=True)
class LayoutChoice:
    """The fewest GPUs that hold the run, the layout chosen there, its most-loaded rank's bytes and why."""

    layout: Candidate
    per_rank_bytes: int
    reason: str


def attention_bound(arch: Architecture, inventory: Inventory, seq_len: int) -> bool:
    """Whether a causal sequence of `seq_len` tokens spends more multiply-adds per token on each layer's attention
    scores and weighted values (seq_len/2 keys each, over heads x head_dim) than on the layer's linear layers (one
    per weight a token uses: the routed experts' top-k share). Past that point CP's K/V exchange, linear in the
    sequence, hides behind attention compute that grows with its square; TP's collectives stay beside the linears."""
    layers = max(1, arch.num_layers)
    dense = sum(g.parameters for g in inventory.linears if g.component in {"attention", "mlp", "shared_expert"})
    experts = inventory.by_component.get("experts", 0)
    routed = experts * arch.experts_per_token / arch.num_experts if arch.is_moe and arch.num_experts else 0
    attention = seq_len * arch.num_attention_heads * arch.head_dim  # 2 x (seq_len / 2) x heads x head_dim
    return attention > (dense + routed) / layers


def _powers(limit: int) -> Iterator[int]:
    """1, 2, 4, ... up to `limit`."""
    n = 1
    while n <= limit:
        yield n
        n *= 2


def candidates(n: int, limits: Limits) -> list[Candidate]:
    """The layouts of `n` GPUs the model can take, in order of preference (fewer CP, then fewer PP, then fewer TP
    ranks: the rest is data parallel; for an attention-bound sequence fewer TP, then fewer PP, then fewer CP)."""
    found = []
    for cp in _powers(n):
        if limits.seq_len % cp:
            continue
        for pp in _powers(n // cp):
            if pp > limits.layers:
                continue
            for tp in _powers(n // (cp * pp)):
                if limits.tp_ok(tp):
                    found.append(Candidate(tp, pp, cp, n // (tp * pp * cp)))
    return sorted(found, key=lambda c: (c.tp, c.pp, c.cp)) if limits.attention_bound else found


def search(per_rank: Callable[[Candidate], int | None], usable_bytes: int, limits: Limits,
           max_gpus: int = 1024) -> LayoutChoice | None:
    """The fewest GPUs (a power of two up to max_gpus) with a layout whose most-loaded rank fits `usable_bytes`, and
    the first such layout in the order of preference; None when none does. `per_rank` returns the bytes a layout's
    most-loaded rank must hold (None: the layout cannot run)."""
    for n in _powers(max_gpus):
        tried: list[Candidate] = []
        for candidate in candidates(n, limits):
            need = per_rank(candidate)
            if need is not None and need <= usable_bytes:
                return LayoutChoice(candidate, need, reason(candidate, limits, tried))
            tried.append(candidate)
    return None


def reason(chosen: Candidate, limits: Limits, rejected: list[Candidate]) -> str:
    """Why this layout: what each dimension above 1 is for, and that the simpler layouts of as many GPUs did not
    fit (those of fewer GPUs did not either)."""
    parts = []
    if chosen.tp > 1:
        parts.append(f"TP {chosen.tp} inside a node (at most {min(limits.tp_domain, limits.kv_heads)}: the linked "
                     f"GPUs and the {limits.kv_heads} KV heads) splits every layer's weights and activations")
    if chosen.pp > 1:
        parts.append(f"PP {chosen.pp} splits the {limits.layers} layers into stages"
                     + (" where TP alone did not hold them" if any(c.pp == 1 and c.cp == 1 for c in rejected) else ""))
    if chosen.cp > 1 and limits.attention_bound:
        parts.append(f"CP {chosen.cp} splits the {limits.seq_len:,}-token sequence, whose attention outweighs the "
                     f"linear layers: the ring exchange of its {limits.kv_heads} KV heads' chunks hides behind that "
                     "attention, where TP's per-layer collectives would not")
    elif chosen.cp > 1:
        parts.append(f"CP {chosen.cp} splits the {limits.seq_len:,}-token sequence's activations, which no layout of "
                     "TP, PP and FSDP alone held")
    if chosen.dp > 1:
        parts.append(f"FSDP over {chosen.dp} replicas shards the rest of the model state")
    count = len(rejected)
    plural = "s" if count > 1 else ""
    simpler = f"; {count} simpler layout{plural} of {chosen.num_gpus} GPUs did not fit" if count else ""
    return "; ".join(parts) + simpler if parts else "one GPU holds it"


def layout_settings(s: TrainingSettings, layout: Candidate) -> TrainingSettings:
    """The settings of a run laid out so: the layout's dimensions, FSDP full shard over its data-parallel ranks
    (and CP ranks, which share the weights), and sequence parallelism beside TP (Megatron's, as layouts at scale
    run it)."""
    sharded = layout.dp * layout.cp > 1
    return replace(s, tp=layout.tp, pp=layout.pp, cp=layout.cp, num_gpus=layout.num_gpus,
                   sharding="fsdp_full_shard" if sharded else None,
                   sequence_parallel="megatron" if layout.tp > 1 else "off",
                   pp_schedule="1f1b" if layout.pp > 1 else s.pp_schedule, vpp=1, pp_stage=None)


def per_rank_required(required: Callable[[TrainingSettings], int], s: TrainingSettings
                      ) -> Callable[[Candidate], int | None]:
    """`search`'s per-rank function from one that gives the bytes a settings' most-loaded rank must hold (e.g.
    `lambda t: estimate_in(ctx, t).per_gpu_bytes.required`), memoised by layout; None for a layout the model cannot
    take (InvalidInputError)."""
    memo: dict[Candidate, int | None] = {}

    def of(layout: Candidate) -> int | None:
        if layout not in memo:
            try:
                memo[layout] = required(layout_settings(s, layout))
            except InvalidInputError:
                memo[layout] = None
        return memo[layout]

    return of
