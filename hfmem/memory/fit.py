"""Fit matrices: for each method and GPU, does it train on one GPU, how big a batch and sequence, how many GPUs.

Public API (pure functions, no torch):

    fit_matrix(arch, inventory, settings, gpus, methods=("full", "lora", "qlora"), max_gpus=1024) -> list[Fit]
    fit_one(arch, inventory, settings, gpu, method) -> Fit
    Fit.to_dict() -> the report's fit cell (JSON schema 7, hfmem/report.schema.json): {
        "method", "gpu" (its name), "verdict" (VERDICTS), "fits", the setup as asked ("num_gpus", "sharding",
        "offload_optimizer", "offload_params": one GPU unless the settings name several), "total_bytes" (the device
        total per GPU, the figure every output shows), "required_bytes" (what must stay resident: the total less
        paged optimizer states), "headroom_bytes", "host_per_node_bytes", "short_of" (None, "GPU memory" or the host
        RAM shortfall), "phase" (the largest), "per_gpu_bytes", "max_micro_batch_size" (0: not even 1),
        "max_seq_len" (0: none), "max_seq_len_capped" (the model's maximum fits), "advice" (`advise`),
        "multi_gpu", "multi_gpu_with_checkpointing" ({num_gpus, sharding, offloads, gradient_checkpointing,
        total_bytes, required_bytes, equivalent} | None), "mitigations" (every single-GPU change that works,
        least intrusive first: name, settings_changes, total_bytes, required_bytes); what the GPU cannot run is
        in the report's `gpus` entry (gpu_defaults), and per_gpu_bytes only where it differs from the method's
        estimate (a GPU that runs other defaults)}

Each cell is the verdict for the setup asked (its sharding, GPU count and offload kept); a suggestion (a
change, more GPUs) is searched only where that setup does not fit. The search uses the estimate's own terms.
Memory grows with micro-batch and sequence, so both are
searches over a monotone total (on one GPU, at the given sequence / micro-batch). Multi-GPU tries counts
1..max_gpus with the cheapest sharding first: DDP, ZeRO-1, ZeRO-2, ZeRO-3 (FSDP full shard is the
same memory class), then ZeRO-3 with optimizer and then parameter offload; per sharding the smallest
count is searched the same way (per-GPU memory does not grow with the count). Each search interpolates the
total where it crosses the GPU's bytes and confirms the neighbour (`_boundary`): the answer bisection would give,
in a few evaluations. Model state and
activations are cached separately, since the one depends only on sharding and count and the other
only on batch and sequence, so a full matrix costs a few hundred small evaluations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, cast

from hfmem.errors import InvalidInputError
from hfmem.hardware.gpus import Gpu
from hfmem.hardware.specs import gpu_specs
from hfmem.memory.activations import ActivationEstimate
from hfmem.memory.breakdown import MemoryBreakdown, combine, fits_on, nvme_ok
from hfmem.memory.estimate import Context, activations_for, estimate_in, per_gpu_parts, phases, state_for
from hfmem.memory.evaluation import eval_forward_bytes
from hfmem.memory.generation import generation_bytes
from hfmem.memory.gpu_defaults import gpu_defaults
from hfmem.memory.layouts import Limits, layout_settings, search
from hfmem.memory.mitigations import REGISTRY, candidates, describe
from hfmem.memory.model_state import ModelState
from hfmem.memory.nccl import nvls_for
from hfmem.memory.settings import ALL_METHODS, METHODS, NO_MODEL_PARALLELISM, Method, Sharding, TrainingSettings
from hfmem.model.architecture import Architecture
from hfmem.model.inventory import Inventory
from hfmem.units import GIB

VERDICTS = ("fits", "change", "gpus", "none")
"""A cell's verdict: fits as asked, fits the same GPUs with a change, needs (more) GPUs, no fit found."""
MARKS = {"fits": "✓", "change": "⚠", "gpus": "✗", "none": "✗"}
"""A verdict's mark in the terminal and in markdown, for the training cells and the serving column alike."""
MAX_SUGGESTED_GPUS = 64
"""Up to this many GPUs, more GPUs are preferred to another method or offload; beyond it they come last."""
MACHINE_KEYS = ("host_per_node_bytes", "nvme_per_node_bytes")
"""What an offload mitigation (and the advice it becomes) says it needs of its machine."""
SETUP_KEYS = ("num_gpus", "sharding", "offload_optimizer", "offload_params", "gradient_checkpointing", "model_loading")
"""The fields of a multi-GPU suggestion that make a setup of its own (its advice's settings changes; model_loading
only where the search changed it)."""

# Cheapest first: each step shards or moves more and costs more communication.
SHARDING_LADDER: tuple[tuple[Sharding, bool, bool], ...] = (
    ("ddp", False, False),
    ("zero1", False, False),
    ("zero2", False, False),
    ("zero3", False, False),
)
OFFLOAD_LADDER: tuple[tuple[Sharding, bool, bool], ...] = (
    ("zero3", True, False),
    ("zero3", True, True),
)
EQUIVALENT = {"zero3": "FSDP full shard", "zero2": "FSDP shard-grad-op"}
"""The FSDP strategy in a DeepSpeed sharding's memory class (a multi-GPU suggestion's `equivalent`)."""
MAX_MICRO_BATCH = 1 << 16
MAX_SEQ = 1 << 21


@dataclass(frozen=True)
class Fit:
    """The fit of one method on one GPU, its verdict and the advice that verdict names."""

    gpu: Gpu
    method: str
    verdict: str
    """One of VERDICTS, from the one preference order (`advise`)."""
    advice: dict[str, Any] | None
    """What makes it fit where it does not as asked: {kind ("change" or "gpus"), mitigation (its name, None for
    GPUs), settings_changes (the setup it is timed on), num_gpus, total_bytes, required_bytes, ...}; None where it
    fits or nothing does."""
    asked: dict[str, Any]
    """The setup as asked, per GPU: fits, the sharding and GPU count, total/required/headroom bytes, the terms."""
    max_micro_batch_size: int
    max_seq_len: int
    max_seq_len_capped: bool
    multi_gpu: dict[str, Any] | None
    multi_gpu_with_checkpointing: dict[str, Any] | None
    """The same search with full gradient checkpointing, when the settings have it off."""
    mitigations: tuple[dict[str, Any], ...]
    """Every single-GPU change that works, least intrusive first."""
    settings: dict[str, Any]
    assumptions: dict[str, Any]
    gpu_defaults: dict[str, Any] | None = None
    """The defaults this GPU cannot run and what the cell assumes instead (memory.gpu_defaults); None: as given."""

    @property
    def fits(self) -> bool:
        return bool(self.asked["fits"])

    def to_dict(self) -> dict[str, Any]:
        """The cell as the report writes it (JSON schema 7): named fields, the GPU by name."""
        return {"method": self.method, "gpu": self.gpu.name, "verdict": self.verdict, **self.asked,
                "max_micro_batch_size": self.max_micro_batch_size, "max_seq_len": self.max_seq_len,
                "max_seq_len_capped": self.max_seq_len_capped, "advice": self.advice,
                "multi_gpu": self.multi_gpu, "multi_gpu_with_checkpointing": self.multi_gpu_with_checkpointing,
                "mitigations": list(self.mitigations)}


def advise(fits: bool, mitigations: list[dict[str, Any]], multi: dict[str, Any] | None,
           multi_ckpt: dict[str, Any] | None, num_gpus: int, layout: dict[str, Any] | None = None,
           gpus_per_node: int = 8) -> tuple[str, dict[str, Any] | None]:
    """The verdict and its advice, in one order of preference: a same-method change on the GPUs asked
    (checkpointing, micro-batch 1 with accumulation, 8-bit AdamW), then the fewest GPUs (plain or with
    checkpointing) up to MAX_SUGGESTED_GPUS, then another method or offload, and only then more GPUs. Where data
    parallelism alone needs more than a node (or no count holds it), a model-parallel `layout` on no more GPUs takes
    its place: TP inside the node, PP and CP across, as runs at that scale are laid out."""
    if fits:
        return "fits", None
    by_name = {m["name"]: m for m in mitigations}
    fewest = min((m for m in (multi, multi_ckpt) if m), key=lambda m: m["num_gpus"], default=None)
    beyond_node = fewest is None or fewest["num_gpus"] > gpus_per_node
    if layout and beyond_node and (fewest is None or layout["num_gpus"] <= fewest["num_gpus"]):
        fewest = layout
    same = [n for n, m in REGISTRY.items() if m.same_method and n in by_name]
    other = [n for n, m in REGISTRY.items() if not m.same_method and n in by_name]
    if same:
        return "change", _change(by_name[same[0]], num_gpus)
    if fewest and 1 < fewest["num_gpus"] <= MAX_SUGGESTED_GPUS:
        return "gpus", _gpus(fewest)
    if other:
        return "change", _change(by_name[other[0]], num_gpus)
    return ("gpus", _gpus(fewest)) if fewest else ("none", None)


def _change(m: dict[str, Any], num_gpus: int) -> dict[str, Any]:
    """A mitigation as advice: the change on the GPUs asked."""
    return {"kind": "change", "mitigation": m["name"], "description": describe(m["name"], m["settings_changes"]),
            "settings_changes": dict(m["settings_changes"]), "num_gpus": num_gpus, "total_bytes": m["total_bytes"],
            "required_bytes": m["required_bytes"]} | {k: m[k] for k in MACHINE_KEYS if k in m}


def _gpus(multi: dict[str, Any]) -> dict[str, Any]:
    """A multi-GPU suggestion as advice: its setup (and its layout's dimensions) is the settings change."""
    keys = SETUP_KEYS + (LAYOUT_KEYS if "layout" in multi else ())
    return {"kind": "gpus", "mitigation": None, "settings_changes": {k: multi[k] for k in keys if k in multi}} | multi


class _Planner:
    """Memoised totals for one model: model state by (settings sans batch/seq), activations by (b, s)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._states: dict[tuple, ModelState] = {}
        self._acts: dict[tuple, ActivationEstimate] = {}
        self.memo: dict[tuple, Any] = {}
        self._ids: dict[tuple[TrainingSettings, int], int] = {}

    def base(self, s: TrainingSettings, seq: int) -> int:
        """A small stand-in for (settings, seq) in memo keys: hashing a settings dataclass costs more than the lookup
        it guards, and the searches build thousands of keys on the same one."""
        return self._ids.setdefault((s, seq), len(self._ids))

    def total(self, s: TrainingSettings, seq: int) -> MemoryBreakdown:
        """The per-term figures per GPU for validated settings `s` at `seq` (checks compare `.required`).

        Each part is memoised by the fields its settings metadata says it reads (TrainingSettings.memo_key).
        """
        if s.model_parallel * s.ep > 1:  # a layout's most-loaded rank
            return per_gpu_parts(self.ctx, s, seq)[2]
        sk = s.memo_key("state")
        state = self._states.get(sk)
        if state is None:
            state = self._states[sk] = state_for(self.ctx, s)
        ak = (*s.memo_key("activations"), seq)
        act = self._acts.get(ak)
        if act is None:
            act = self._acts[ak] = activations_for(self.ctx, s, seq)
        return combine(s, self.ctx.split(s), state, act, eval_forward_bytes(self.ctx.arch, s, seq),
                       generation_bytes(self.ctx.arch, s, seq))

    def resident(self, s: TrainingSettings, seq: int) -> int:
        """The bytes compared with a GPU: `required`, or more than any GPU where the host cannot hold its share."""
        per_gpu = self.total(s, seq)
        return per_gpu.required if fits_on(per_gpu, per_gpu.required, s) else NO_HOST_ROOM


NO_HOST_ROOM = 1 << 62
"""What `resident` answers for a setup whose host RAM (host_ram_gib) is too small: no GPU is that large."""


def _largest(lo: int, hi: int, value: Callable[[int], int], limit: int) -> int:
    """Largest x in [lo, hi] with value(x) <= limit, value non-decreasing; lo - 1 if none.

    Doubles from lo (probes every GPU of the matrix shares), then closes the last gap by `_boundary`.
    """
    if value(lo) > limit:
        return lo - 1
    step = lo
    while step * 2 <= hi and value(step * 2) <= limit:
        step *= 2
    top = min(hi, step * 2)
    if top == step or value(top) <= limit:
        return top
    return _boundary(step, top, value, limit, float, float)


def _smallest(lo: int, hi: int, value: Callable[[int], int], limit: int) -> int | None:
    """Smallest x in [lo, hi] with value(x) <= limit, value non-increasing (bytes per GPU against the GPU count);
    None if none. The bytes are close to a + b/x (sharded state over x GPUs), so `_boundary` interpolates in 1/x."""
    if value(hi) > limit:
        return None
    if value(lo) <= limit:
        return lo
    return _boundary(hi, lo, value, limit, lambda x: 1 / x, lambda c: 1 / c if c > 0 else float(hi))


def _boundary(inside: int, outside: int, value: Callable[[int], int], limit: int,
              coord: Callable[[float], float], uncoord: Callable[[float], float]) -> int:
    """The x next to the boundary on the fitting side, from `inside` (value <= limit) towards `outside` (> limit).

    Each step guesses where value crosses the limit, interpolating it linearly in coord(x) (exact when the bytes
    are affine there, as activations are in the micro-batch), then probes the guess's neighbour across the
    boundary, so an exact guess closes the gap in two evaluations; a guess that does not close it is followed by a
    bisection, so no search takes more than about twice binary search's evaluations. Same answer as bisection for
    a monotone value, in a handful of evaluations instead of one per bit.
    """
    toward = 1 if outside > inside else -1
    v_in, v_out = value(inside), value(outside)
    guess = True
    while (outside - inside) * toward > 1:
        if guess and v_out != v_in:
            at = uncoord(coord(inside) + (limit - v_in) / (v_out - v_in) * (coord(outside) - coord(inside)))
            x = math.floor(at) if toward > 0 else math.ceil(at)  # rounded to the fitting side
            low, high = sorted((inside + toward, outside - toward))
            tries: tuple[int, ...] = (min(max(x, low), high),)
            tries += (tries[0] + toward,)  # the step past the guess: an exact guess closes the gap
        else:
            tries = ((inside + outside) // 2,)
        for x in tries:
            if (x - inside) * toward > 0 and (outside - x) * toward > 0:
                v = value(x)
                if v <= limit:
                    inside, v_in = x, v
                else:
                    outside, v_out = x, v
        guess = not guess
    return inside


def _multi_gpu(planner: _Planner, single: TrainingSettings, seq: int, limit: int, fits_one_gpu: bool,
               max_gpus: int, rank0: bool = False) -> dict[str, Any] | None:
    """The fewest GPUs (cheapest sharding first, offload last) that fit `single`; None within max_gpus. Where every
    rank's own checkpoint copy outgrows the host, the search loads it on rank 0 instead (`rank0`: the suggestion
    says so, model_loading "rank0")."""
    memo_key = (planner.base(single, seq),)

    def total_of(n: int, sharding: Sharding, off_opt: bool, off_par: bool) -> int:
        key = (*memo_key, "n", n, sharding, off_opt, off_par)
        if key not in planner.memo:
            trial = replace(single, num_gpus=n, sharding=sharding, offload_optimizer=off_opt, offload_params=off_par)
            planner.memo[key] = planner.resident(trial, seq)
        return planner.memo[key]

    for ladder in (SHARDING_LADDER, OFFLOAD_LADDER):  # offload only when no plain sharding reaches max_gpus
        found = []
        for rank, step in enumerate(ladder):
            n = _smallest(1, max_gpus, partial(_on_ladder, total_of, step), limit)
            if n is not None:
                found.append((n, rank))
        if not found:
            continue
        n_min, rank = min(found)
        sharding, off_opt, off_par = ladder[rank]
        found_at = planner.total(replace(single, num_gpus=n_min, sharding=sharding, offload_optimizer=off_opt,
                                         offload_params=off_par), seq)
        return {"num_gpus": n_min, "sharding": "none" if n_min == 1 and fits_one_gpu else sharding,
                "offload_optimizer": off_opt, "offload_params": off_par,
                "gradient_checkpointing": single.gradient_checkpointing,
                **({"model_loading": "rank0"} if rank0 else {}), "total_bytes": found_at.total,
                "required_bytes": found_at.required,
                "equivalent": EQUIVALENT.get(sharding)}
    if single.model_loading == "per-rank-cpu":  # every rank's whole copy in host RAM: rank 0 alone may fit
        return _multi_gpu(planner, replace(single, model_loading="rank0"), seq, limit, False, max_gpus, rank0=True)
    return None


def _layout(planner: _Planner, single: TrainingSettings, seq: int, gpu: Gpu, max_gpus: int) -> dict[str, Any] | None:
    """The fewest GPUs and the layout to run there (memory.layouts: FSDP, then TP inside the GPUs one NVLink or
    Infinity Fabric joins, PP, CP), with checkpointing as asked, else full; None where none fits within max_gpus.
    Each layout's per-rank bytes depend on the GPU only through NCCL's NVLS buffers (in `single`), so are memoised
    for every GPU that shares them."""
    limit = gpu.usable_bytes
    limits = Limits.of(planner.ctx.arch, seq, tp_domain(gpu, single.gpus_per_node), planner.ctx.inventory)
    for s in dict.fromkeys((single, replace(single, gradient_checkpointing="full"))):
        base = planner.base(s, seq)

        def per_rank(layout: Any, s: TrainingSettings = s, base: int = base) -> int | None:
            key = ("layout", base, layout)
            if key not in planner.memo:
                try:
                    planner.memo[key] = planner.resident(layout_settings(s, layout).validated(), seq)
                except InvalidInputError:
                    planner.memo[key] = None
            return planner.memo[key]

        choice = search(per_rank, limit, limits, max_gpus)
        if choice is not None:
            laid = layout_settings(s, choice.layout).validated()
            per_gpu = planner.total(laid, seq)
            return {"num_gpus": laid.num_gpus, "sharding": laid.resolved_sharding, "offload_optimizer": False,
                    "offload_params": False, "gradient_checkpointing": s.gradient_checkpointing,
                    "layout": choice.layout.describe(),
                    **{k: getattr(laid, k) for k in LAYOUT_KEYS}, "total_bytes": per_gpu.total,
                    "required_bytes": per_gpu.required, "equivalent": None, "reason": choice.reason}
    return None


def tp_domain(gpu: Gpu, gpus_per_node: int) -> int:
    """The most GPUs tensor parallelism spans on `gpu`: those its GPU-to-GPU link joins all-to-all (8 on an HGX
    board, 2 on a bridged pair), within a node; 1 for a catalogue card without one (TP's per-layer collectives over
    PCIe cost more than its memory saves); a node for a card the user defined (its link is unknown)."""
    if gpu.user_defined:
        return gpus_per_node
    return min(gpus_per_node, gpu_specs(gpu).link_gpus or 1)


LAYOUT_KEYS = ("tp", "pp", "cp", "sequence_parallel", "pp_schedule", "vpp")
"""The settings a layout suggestion changes beside SETUP_KEYS."""


def _on_ladder(total_of: Callable[[int, Sharding, bool, bool], int], step: tuple[Sharding, bool, bool], n: int) -> int:
    """The resident bytes of `n` GPUs at one ladder step (sharding, optimizer offload, parameter offload)."""
    return total_of(n, *step)


def _mitigations(planner: _Planner, asked: TrainingSettings, seq: int, limit: int) -> list[dict[str, Any]]:
    """Every change of the asked settings (same GPUs) that fits `limit` bytes, least intrusive first; an offload with
    the host RAM (and NVMe) per machine it needs."""
    return [{"name": name, "settings_changes": dict(changes), "total_bytes": per_gpu.total,
             "required_bytes": per_gpu.required} | (machine_needs(per_gpu) if changes.get("offload_optimizer") else {})
            for name, changes, trial, per_gpu in _mitigation_trials(planner, asked, seq)
            if fits_on(per_gpu, limit, trial)]


def machine_needs(per_gpu: MemoryBreakdown) -> dict[str, int]:
    """What an offload needs of its machine: host RAM per machine, and NVMe per machine where it swaps to NVMe."""
    return {"host_per_node_bytes": per_gpu.host_per_node} | (
        {"nvme_per_node_bytes": per_gpu.nvme_per_node} if per_gpu.nvme_per_node else {})


def _mitigation_trials(planner: _Planner, asked: TrainingSettings, seq: int) -> list[tuple]:
    """Each valid mitigation of `asked` with its settings and per-GPU figures: GPU-independent, so built once per
    asked setup and shared by the matrix's GPUs (only the comparison with each GPU's bytes differs)."""
    key = ("mitigations", planner.base(asked, seq))
    if key not in planner.memo:
        trials = []
        for name, changes in candidates(asked):
            try:
                trial = replace(asked, **changes).validated()
            except InvalidInputError:
                continue
            per_gpu = planner.total(trial, trial.resolved_seq_len(planner.ctx.arch.max_position_embeddings))
            trials.append((name, changes, trial, per_gpu))
        planner.memo[key] = trials
    return planner.memo[key]


def asked_settings(settings: TrainingSettings, method: str) -> TrainingSettings:
    """The setup a fit cell judges: the settings with `method`; another method's optimizer default applies unless
    the chosen optimizer is not a method default."""
    keep_optimizer = method == settings.method or settings.optimizer not in {None, "paged_adamw_8bit"}
    return replace(settings, method=cast(Method, method),
                   optimizer=settings.optimizer if keep_optimizer else None).validated()


def fit_one(arch: Architecture, inventory: Inventory, settings: TrainingSettings, gpu: Gpu, method: str,
            *, max_gpus: int = 1024, _planner: _Planner | None = None) -> Fit:
    """The fit of `method` on `gpu` for the settings as asked (their method field is replaced by `method`)."""
    planner = _planner or _Planner(Context(arch, inventory))
    ctx = planner.ctx
    given = asked_settings(settings, method)
    asked = nvls_for(given, (gpu,))  # NCCL's NVLS buffers where the GPU's board has them; the record keeps `given`
    single = replace(asked, num_gpus=1, sharding=None, offload_optimizer=False, offload_params=False,
                     **NO_MODEL_PARALLELISM).validated()
    seq = asked.resolved_seq_len(arch.max_position_embeddings)
    limit = gpu.usable_bytes
    per_gpu = planner.total(asked, seq)
    ok = fits_on(per_gpu, limit, asked)

    base_key = (planner.base(asked, seq),)

    def total_of(tag: tuple, make: Any) -> int:
        """Memoised resident bytes of a variant of `asked` (GPU-independent, so shared by the whole matrix)."""
        key = base_key + tag
        value = planner.memo.get(key)
        if value is None:
            trial, trial_seq = make()
            value = planner.memo[key] = planner.resident(trial, trial_seq)
        return value

    def batch_bytes(b: int) -> int:
        return total_of(("b", b), lambda: (replace(asked, micro_batch_size=b), seq))

    def seq_bytes(s_len: int) -> int:
        return total_of(("s", s_len), lambda: (asked, s_len))

    max_b = _largest(1, MAX_MICRO_BATCH, batch_bytes, limit)  # 0: not even one
    seq_cap = arch.max_position_embeddings or MAX_SEQ
    max_s = _largest(1, seq_cap, seq_bytes, limit)
    capped = max_s == seq_cap

    fits_one_gpu = ok if single == asked else planner.resident(single, seq) <= limit
    multi = _multi_gpu(planner, single, seq, limit, fits_one_gpu, max_gpus)
    multi_ckpt = None
    if single.gradient_checkpointing == "off" and (multi is None or multi["num_gpus"] > 1):
        multi_ckpt = _multi_gpu(planner, replace(single, gradient_checkpointing="full"), seq, limit, False, max_gpus)

    mitigations = [] if ok else _mitigations(planner, asked, seq, limit)
    spans = multi is None or multi["num_gpus"] > asked.gpus_per_node
    layout = _layout(planner, single, seq, gpu, max_gpus) if not ok and spans else None
    verdict, advice = advise(ok, mitigations, multi, multi_ckpt, asked.num_gpus, layout, asked.gpus_per_node)
    akey = ("assumptions", base_key)  # shared by the row's cells, like the settings dict: built once
    if akey not in planner.memo:
        planner.memo[akey] = estimate_in(ctx, asked).assumptions, given.to_dict() | {"seq_len": seq}
    assumptions, settings_dict = planner.memo[akey]
    setup = {"num_gpus": asked.num_gpus, "sharding": asked.resolved_sharding,
             "offload_optimizer": asked.offload_optimizer, "offload_params": asked.offload_params}
    host = per_gpu.host_per_node
    reason = shortfall(ok, per_gpu, limit, asked)
    return Fit(
        gpu=gpu, method=method, verdict=verdict, advice=advice,
        asked={"fits": ok, **setup, "total_bytes": per_gpu.total, "required_bytes": per_gpu.required,
               "headroom_bytes": limit - per_gpu.required, "host_per_node_bytes": host, "short_of": reason,
               "phase": phases(per_gpu)["largest"], "per_gpu_bytes": per_gpu.to_dict()},
        max_micro_batch_size=max_b, max_seq_len=max_s, max_seq_len_capped=capped,
        multi_gpu=multi, multi_gpu_with_checkpointing=multi_ckpt,
        mitigations=tuple(mitigations),
        settings=settings_dict, assumptions=assumptions,
    )


def shortfall(fits: bool, per_gpu: MemoryBreakdown, limit: int, asked: TrainingSettings) -> str | None:
    """What a setup that does not fit runs short of: "GPU memory", or the host RAM or NVMe it needs per machine."""
    if fits:
        return None
    if per_gpu.required > limit:
        return "GPU memory"
    if not nvme_ok(per_gpu.nvme_per_node, asked.nvme_gib):
        return f"NVMe: {per_gpu.nvme_per_node / GIB:,.1f} GiB per machine needed, nvme_gib is {asked.nvme_gib:g}"
    host = per_gpu.host_per_node / GIB
    return f"host RAM: {host:,.1f} GiB per machine needed, host_ram_gib is {asked.host_ram_gib:g}"


def fit_matrix(arch: Architecture, inventory: Inventory, settings: TrainingSettings, gpus: tuple[Gpu, ...] | list[Gpu],
               methods: tuple[str, ...] | list[str] = METHODS, *, max_gpus: int = 1024,
               per_method: Mapping[str, TrainingSettings] | None = None,
               stated: Collection[str] = ()) -> list[Fit]:
    """Fits for every method x GPU, methods outer, GPUs in the given order; `per_method`: a method's own settings.
    A setting left at its default that a GPU cannot run (bf16, FlashAttention-2) is replaced in that GPU's cells
    unless it is in `stated` (given by a flag or a config file)."""
    for m in methods:
        if m not in ALL_METHODS:
            raise InvalidInputError(f"method must be one of {', '.join(ALL_METHODS)}; got {m!r}.")
    if not gpus:
        raise InvalidInputError("no GPUs to fit against.")
    planner = _Planner(Context(arch, inventory))
    own = per_method or {}
    fits = []
    for method in methods:
        for gpu in gpus:
            given = own.get(method, settings)
            changed = gpu_defaults(given, gpu, stated)
            cell_settings = replace(given, **changed["changes"]).validated() if changed else given
            fit = fit_one(arch, inventory, cell_settings, gpu, method, max_gpus=max_gpus, _planner=planner)
            fits.append(replace(fit, gpu_defaults=changed) if changed else fit)
    return fits


def timed_setup(cell: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The setup a cell is timed on and its settings changes: ("asked", {}) where it fits, its advice's kind
    ("change" or "gpus") and settings changes where they make it fit (GPUs only from two up); None where nothing
    does. The setup its verdict names, so a cell's time is its advice's."""
    if cell["verdict"] == "fits":
        return "asked", {}
    advice = cell["advice"]
    if advice is None or (advice["kind"] == "gpus" and advice["num_gpus"] < 2):
        return None
    return advice["kind"], dict(advice["settings_changes"])


def timed_gpus(cell: dict[str, Any], setup: str) -> int:
    """How many GPUs a cell's timed `setup` (timed_setup's kind) runs on: its advice's where that asks for GPUs,
    else the count asked."""
    return cell["advice"]["num_gpus"] if setup == "gpus" else cell["num_gpus"]
