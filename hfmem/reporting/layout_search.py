"""The layouts of one method on one GPU kind, searched for a token budget: the fewest GPUs that fit, the fastest and
the cheapest, each timed by reporting.timing and priced at the GPU's price.

The space: the GPU counts from the fewest that fit (the fit matrix's) up to --max-gpus in powers of two; at each,
tensor parallelism inside the GPUs one link joins (dividing the heads and KV heads, memory.layouts.Limits), pipeline
stages up to the layers (1F1B; interleaved with two chunks per rank where the micro-batches are a multiple of the
stages, Megatron-LM's rule for the interleaved schedule), context parallelism for sequences of 16k tokens and
more, DDP, ZeRO-1 (Megatron's distributed optimizer), ZeRO-2 or FSDP full shard (ZeRO-3) over the data-parallel ranks,
checkpointing off or full, micro-batches of 1, 2 and 4 (a larger one is not tried where a smaller one does not fit:
memory grows with it), and optimizer offload (with full checkpointing) at the fewest count where nothing else fits
there. A layout whose GPU memory or host RAM does not hold is never picked; neither is one slower than `floor` times
the fastest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from hfmem.errors import InvalidInputError
from hfmem.hardware.gpus import Gpu
from hfmem.memory.estimate import Estimate
from hfmem.memory.fit import tp_domain
from hfmem.memory.layouts import Limits
from hfmem.memory.settings import TrainingSettings
from hfmem.model.architecture import Architecture
from hfmem.reporting.picks import Candidate, fastest_and_cheapest
from hfmem.units import budget

MICRO_BATCHES = (1, 2, 4)
SHARDINGS = ("ddp", "zero1", "zero2", "fsdp_full_shard")
"""The data-parallel schemes searched: DDP, ZeRO-1 (Megatron's distributed optimizer), ZeRO-2, FSDP full shard
(ZeRO-3)."""
LONG_SEQUENCE = 16384
"""The sequence length from which context parallelism is searched (CP 2 and 4)."""
INTERLEAVED_RULE = ("https://github.com/NVIDIA/Megatron-LM/blob/d98e8a64ddf34856e74b24714e3bedb2f5a39553/megatron/"
                    "core/pipeline_parallel/schedules.py#L1160-L1180")
"""The interleaved schedule's rule: micro-batches in groups of at least the stages (microbatch_group_size_per_vp_stage,
PP by default), the last group whole; so a multiple of the stages."""
LABELS = ("fewest", "fastest", "cheapest")


@dataclass(frozen=True)
class Layout:
    """One setup searched: its GPUs, model-parallel ranks, data-parallel sharding, checkpointing, micro-batch and
    optimizer offload (the pipeline schedule follows: interleaved where `vpp` > 1)."""

    num_gpus: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    vpp: int = 1
    sharding: str = "fsdp_full_shard"
    checkpointing: str = "off"
    micro_batch: int = 1
    offload_optimizer: bool = False

    def changes(self) -> dict[str, Any]:
        """The settings fields this layout sets."""
        return {"num_gpus": self.num_gpus, "tp": self.tp, "pp": self.pp, "cp": self.cp, "vpp": self.vpp,
                "pp_schedule": "interleaved" if self.vpp > 1 else "1f1b", "sharding": self.sharding,
                "sequence_parallel": "megatron" if self.tp > 1 else "off", "gradient_checkpointing": self.checkpointing,
                "micro_batch_size": self.micro_batch, "offload_optimizer": self.offload_optimizer,
                "offload_params": False}

    def describe(self) -> str:
        """E.g. "64× TP8·PP2·ZeRO-1, b2, +ckpt", "16× TP8·FSDP, b1", "1 GPU, b4": the GPUs, the dimensions above 1,
        the sharding, what else changed."""
        dims = [f"TP{self.tp}" if self.tp > 1 else "", f"PP{self.pp}" if self.pp > 1 else "",
                f"v{self.vpp}" if self.vpp > 1 else "", f"CP{self.cp}" if self.cp > 1 else "",
                {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "fsdp_full_shard": "FSDP", "none": ""}[
                    self.sharding]]
        extra = [f"b{self.micro_batch}", "+ckpt" if self.checkpointing == "full" else "",
                 "+offload" if self.offload_optimizer else ""]
        shape = "·".join(d for d in dims if d)
        head = f"{self.num_gpus}× {shape}" if shape else f"{self.num_gpus} GPU"
        return head + "".join(f", {e}" for e in extra if e)


def gpu_counts(fewest: int, max_gpus: int) -> list[int]:
    """The fewest GPUs that fit, then each power of two above it up to max_gpus."""
    counts, n = [fewest], 1
    while n <= max_gpus:
        if n > fewest:
            counts.append(n)
        n *= 2
    return counts


def _powers(limit: int) -> Iterator[int]:
    n = 1
    while n <= limit:
        yield n
        n *= 2


def shapes(n: int, limits: Limits, micro_batches: int) -> Iterator[tuple[int, int, int, int]]:
    """(tp, pp, cp, vpp) of `n` GPUs the model can take: TP within the link and the heads, PP up to the layers, CP
    for long sequences, two interleaved chunks where the layers split into 2·pp and the micro-batches into pp."""
    cps = (1, 2, 4) if limits.seq_len >= LONG_SEQUENCE else (1,)
    for cp in cps:
        if n % cp or limits.seq_len % cp:
            continue
        for tp in _powers(n // cp):
            if not limits.tp_ok(tp):
                continue
            for pp in _powers(n // (cp * tp)):
                if pp > limits.layers:
                    break
                yield tp, pp, cp, 1
                if pp > 1 and not limits.layers % (2 * pp) and not micro_batches % pp:  # INTERLEAVED_RULE
                    yield tp, pp, cp, 2


def space(base: TrainingSettings, limits: Limits, n: int, *, offload: bool = False) -> list[list[Layout]]:
    """The layouts of `n` GPUs searched, in groups that differ only in the micro-batch (smallest first); with
    `offload`, the optimizer-offload ones (FSDP, full checkpointing) instead."""
    groups = []
    for tp, pp, cp, vpp in shapes(n, limits, base.gradient_accumulation_steps):
        replicas = n // (tp * pp)  # DP x CP ranks share the weights
        if offload:
            if replicas > 1:
                groups.append([Layout(n, tp, pp, cp, vpp, "fsdp_full_shard", "full", b, True) for b in MICRO_BATCHES])
            continue
        for sharding in ("none",) if replicas == 1 else SHARDINGS:
            for ckpt in ("off", "full"):
                groups.append([Layout(n, tp, pp, cp, vpp, sharding, ckpt, b) for b in MICRO_BATCHES])
    return groups


@dataclass(frozen=True)
class Timed:
    """A layout that fits the GPU's memory, with its step and budget (timing.step_for + units.budget) and whether its
    machine has the host RAM it needs."""

    layout: Layout
    host_ok: bool
    time: dict[str, Any]

    @property
    def tokens_per_s(self) -> float:
        return self.time.get("tokens_per_s") or 0.0

    def candidate(self, method: str = "") -> Candidate:
        """This layout as the picks compare it (reporting.picks)."""
        return Candidate(method, self.tokens_per_s, self.time.get("cost_usd"), self.time.get("hours"), self.host_ok,
                         self.layout.num_gpus)

    def to_dict(self, *, brief: bool = False) -> dict[str, Any]:
        """The layout in words and as settings changes, and its figures; `brief`: the words, GPUs, tokens/s, hours,
        GPU-hours and cost only (a frontier point)."""
        keys = ("tokens_per_s", "hours", "gpu_hours", "cost_usd") if brief else (
            "tokens_per_s", "seconds", "mfu", "hours", "gpu_hours", "usd_per_gpu_hour", "cost_usd", "reason")
        head = {"layout": self.layout.describe(), "num_gpus": self.layout.num_gpus}
        if not brief:
            head |= {"settings_changes": self.layout.changes(), "host_ram_ok": self.host_ok}
        return head | {k: self.time[k] for k in keys if self.time.get(k) is not None}


def choose(timed: list[Timed], floor: float) -> dict[str, Timed | None]:
    """The fewest-GPU layout (the faster at a tie), and the fastest and the cheapest by the report's one rule
    (reporting.picks); none of them one short of host RAM (None where nothing qualifies)."""
    usable = [t for t in timed if t.tokens_per_s and t.host_ok]
    fewest = min(usable, key=lambda t: (t.layout.num_gpus, -t.tokens_per_s), default=None)
    found = fastest_and_cheapest([t.candidate() for t in timed], floor)
    return {"fewest": fewest} | {label: None if i is None else timed[i] for label, i in found.items()}


def untimed(timed: list[Timed]) -> list[dict[str, Any]]:
    """Why layouts went untimed: each reason once, with the GPU counts it stopped (the counts in a reason read as
    the smallest's), e.g. [{"num_gpus": [16, 32], "reason": "16 GPUs span machines of 8 and ... no network figure"}]."""
    by_reason: dict[str, dict[str, Any]] = {}
    for t in sorted(timed, key=lambda t: t.layout.num_gpus):
        reason = t.time.get("reason")
        if reason:
            entry = by_reason.setdefault(reason.replace(str(t.layout.num_gpus), "N", 1),
                                         {"num_gpus": [], "reason": reason})
            if t.layout.num_gpus not in entry["num_gpus"]:
                entry["num_gpus"].append(t.layout.num_gpus)
    return list(by_reason.values())


def frontier(timed: list[Timed]) -> list[Timed]:
    """The fitting, priced layouts no other beats on both hours and cost, fastest first."""
    priced = sorted((t for t in timed if t.host_ok and "cost_usd" in t.time),
                    key=lambda t: (t.time["hours"], t.time["cost_usd"]))
    out: list[Timed] = []
    for t in priced:
        if not out or t.time["cost_usd"] < out[-1].time["cost_usd"]:
            out.append(t)
    return out


def _group_bound(bound_of: Callable[[TrainingSettings], float | None], base: TrainingSettings,
                 group: list[Layout], memo: dict[Layout, float | None]) -> float | None:
    """The highest bound of a group's layouts: its largest micro-batch's (per micro-batch the compute grows with
    the tokens, the transfers by their bytes plus latency terms that do not, so the bound never falls with it).
    Memoised without the sharding and offload, which neither the compute nor the critical path depends on."""
    key = replace(group[-1], sharding="none", offload_optimizer=False)
    if key not in memo:
        memo[key] = bound_of(replace(base, **group[-1].changes()))
    return memo[key]


def search(base: TrainingSettings, arch: Architecture, gpu: Gpu, *, fewest: int, tokens: float | None,
           price: float | None, estimate_of: Callable[[TrainingSettings], Estimate],
           time_of: Callable[[Estimate], dict[str, Any]], host_ok: Callable[[Estimate], bool],
           bound_of: Callable[[TrainingSettings], float | None]) -> list[Timed]:
    """The layouts of `space` that can be picked, timed on `gpu`, from the asked settings `base` (its method, dtype,
    optimizer, sequence, accumulation): `estimate_of` the memory estimate of settings, `time_of` its step
    (timing.step_for), `host_ok` whether its machine has the host RAM, `bound_of` the most tokens/s it can reach
    (timing.throughput_bound; None: unknown).

    At one GPU count the price per GPU-hour is the same, so only the fastest layout there can be the fewest, the
    fastest, the cheapest or on the frontier: a group whose bound is below the best of its count is skipped (groups
    are tried highest bound first), as is a micro-batch above one that does not fit, offload where a plain layout
    fits, and all but one layout of a count nothing can time (bound 0; it says why). Never skipped: a layout that
    could be picked."""
    seq = base.resolved_seq_len(arch.max_position_embeddings)
    limits = Limits.of(arch, seq, tp_domain(gpu, base.gpus_per_node))
    found: list[Timed] = []
    bounds: dict[Layout, float | None] = {}
    for n in gpu_counts(fewest, base.max_gpus):
        best = 0.0
        for offload in (False, True) if n == fewest else (False,):
            if offload and any(t.layout.num_gpus == n for t in found):
                break
            ranked = sorted(((_group_bound(bound_of, base, g, bounds), g)
                             for g in space(base, limits, n, offload=offload)),
                            key=lambda pair: -(pair[0] if pair[0] is not None else float("inf")))
            for bound, group in ranked:
                said = bound == 0 and any(t.layout.num_gpus == n for t in found)  # untimeable: one says why
                if bound is not None and (bound < best or said):
                    break
                for layout in group:
                    try:
                        est = estimate_of(replace(base, **layout.changes()))
                    except InvalidInputError:
                        break
                    if not est.fits(gpu.usable_bytes):
                        break
                    step = time_of(est)
                    timed = Timed(layout, host_ok(est), step | budget(step.get("tokens_per_s"), n, tokens, price))
                    found.append(timed)
                    if timed.host_ok:
                        best = max(best, timed.tokens_per_s)
    return found
