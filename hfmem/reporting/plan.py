"""One model's full report as a JSON-ready dict: the seam shared by `hfmem MODEL`, `hfmem scan` and the Action.

The report is the model's analysis (architecture, parameters, cross-check) plus, for a Plan
(training settings, methods, GPUs), one estimate per method and the fit matrix.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from hfmem.hardware.gpus import Gpu, catalogue
from hfmem.hardware.prices import Price
from hfmem.hub.modelref import ModelRef
from hfmem.memory.fit import MAX_SUGGESTED_GPUS, timed_gpus, timed_setup
from hfmem.memory.gpu_defaults import matrix_gpus
from hfmem.memory.settings import METHODS, NO_MODEL_PARALLELISM, Method, TrainingSettings
from hfmem.model.architecture import Architecture
from hfmem.model.inventory import Inventory
from hfmem.model.load import ModelReport, SettingsSource, analyse
from hfmem.reporting.memo import Memo


@dataclass(frozen=True)
class Plan:
    """What to estimate: one set of training settings, the methods to compare and the GPUs (() = catalogue).

    The rest says where the settings came from: a framework profile, a config file, flags (cli/options.py)."""

    training: TrainingSettings = field(default_factory=TrainingSettings)
    methods: tuple[str, ...] = METHODS
    gpus: tuple[Gpu, ...] = ()
    method_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """A framework's defaults for one method only (torchtune's full single-device recipes use paged 8-bit AdamW)."""
    sources: Mapping[str, str] = field(default_factory=dict)
    """Each setting not left at hfmem's default, and what set it: "flag", "config FILE (key)", "framework NAME",
    "argument" (hfmem.report's keyword)."""
    framework: Mapping[str, Any] | None = None
    """The framework profile assumed: name, title, versions, defaults with their sources."""
    config: Mapping[str, Any] | None = None
    """The config file read: path, format, values, unknown and unmodelled keys."""
    notes: tuple[str, ...] = ()
    """Warnings from reading the config file (keys not read, keys hfmem cannot model)."""
    model: str | None = None
    """The model the config file names (MODEL on the command line wins)."""
    tokens: float | None = None
    """Training tokens to time and price each fitting setup for (None: the step time only)."""
    prices: Mapping[str, float] = field(default_factory=dict)
    """USD per GPU-hour by catalogue GPU name (--price GPU=USD): each replaces the default table's price
    (hardware/prices.json) for its GPU."""
    rank: str | None = None
    """Order the timed setups by "cost", "time" or "gpus" (fit_ranking in the report); None: no ranking."""
    serve: bool = False
    """Add the serving column (--method serve): the deployment training.serving describes, per GPU of the matrix."""

    @property
    def stated(self) -> frozenset[str]:
        """The settings a flag or the config file gave (a framework profile's are defaults, like hfmem's)."""
        return frozenset(k for k, src in self.sources.items() if not src.startswith("framework"))

    def settings_for(self, method: str) -> TrainingSettings:
        """The validated settings of one method: the shared ones with its own framework defaults."""
        chosen = cast(Method, method)  # one of self.methods; validated() rejects anything else
        return replace(self.training, method=chosen, **self.method_settings.get(method, {})).validated()

    def to_dict(self) -> dict[str, Any]:
        """The plan as the report writes it; `gpus` "catalogue" where it is the whole catalogue, in its order."""
        whole = self.gpus in ((), catalogue())
        return {"training": self.training.to_dict(), "methods": list(self.methods),
                "gpus": "catalogue" if whole else [g.spec for g in self.gpus], "sources": dict(self.sources),
                "method_settings": {m: dict(v) for m, v in self.method_settings.items()},
                "framework": self.framework, "config": self.config, "tokens": self.tokens,
                "prices_usd_per_gpu_hour": dict(self.prices), "rank": self.rank, "serve": self.serve}


def build_report(ref: ModelRef, settings: SettingsSource, plan: Plan | None = None, *,
                 curves: bool = False) -> dict[str, Any]:
    """Analyse the model and return the documented JSON report (docs/json.md, hfmem/report.schema.json)."""
    return with_estimates(analyse(ref, settings), plan or Plan(), curves=curves)


def with_estimates(result: ModelReport, plan: Plan, *, curves: bool = False) -> dict[str, Any]:
    """The analysis as a dict, plus `warnings[]`, `gpus{}` (by name), `estimates{}` (by method) and `fit[]` (named
    cells, methods outer, hfmem.memory.record); with `curves`, also `curves` (memory against sequence length
    and micro-batch).

    The plan's part is computed once per model shape (`shape_key`) and shared by the reports of that shape:
    treat a report as read-only."""
    from hfmem.memory.gpu_defaults import unsupported
    from hfmem.memory.warnings import shape_disagreements, warnings_for

    arch, inventory = result.architecture, result.inventory
    training = plan.training.validated()
    part = BY_SHAPE.get(shape_key(arch, inventory, plan), lambda: plan_part(arch, inventory, plan))
    config = plan.config or {}
    warnings = [*plan.notes, *shape_disagreements(arch, config.get("architecture", {}), config.get("path", "")),
                *warnings_for(arch, result.config, training, part.fits),
                *unsupported(training, part.gpus, plan.stated)]
    report = result.to_dict() | {"plan": part.plan, "warnings": warnings, "gpus": part.gpu_entries,
                                 "estimates": part.estimates, "fit": part.fit,
                                 "fastest_and_cheapest": part.fastest_and_cheapest, "fit_ranking": part.fit_ranking,
                                 "layout_picks": part.layout_picks,
                                 "prices": part.prices, "nodes": part.nodes}
    if plan.serve:
        from hfmem.serving.matrix import beyond_positions, serving_column, serving_settings

        priced = {name: usd for name, (usd, _) in part.prices["by_gpu"].items()}
        deployment = serving_settings(training)
        report["serving"] = serving_column(result, part.gpus, deployment, priced, curves=curves)
        report["warnings"] = [*warnings, *beyond_positions(result, deployment)]
    if curves:
        from hfmem.memory.curves import memory_curves

        per_method = {m: plan.settings_for(m) for m in plan.method_settings}
        report["curves"] = memory_curves(arch, inventory, training, plan.methods, per_method)
    return report


@dataclass(frozen=True)
class PlanPart:
    """What a report holds that depends on the model's architecture and inventory and the plan only."""

    gpus: tuple[Gpu, ...]
    fits: list[Any]
    plan: dict[str, Any]
    gpu_entries: dict[str, dict[str, Any]]
    """The GPUs by name, in the matrix's order (hfmem.memory.record.gpu_table)."""
    estimates: dict[str, dict[str, Any]]
    """Each method's estimate in full."""
    fit: list[dict[str, Any]]
    """The fit matrix as named cells, methods outer (memory.fit `Fit.to_dict` with its `time`)."""
    fastest_and_cheapest: dict[str, Any]
    """The fastest and the cheapest timed cell as a pick (hfmem.memory.record.pick, with its roofline terms)."""
    fit_ranking: list[dict[str, Any]] | None
    """The timed cells as picks, best first by the plan's `rank` (None without one)."""
    prices: dict[str, Any]
    """The price of each GPU of the matrix that has one, and where it came from (`price_entry`)."""
    nodes: dict[str, Any]
    """The machine each GPU of the matrix is assumed in: its network and host RAM, and where they came from."""
    layout_picks: list[dict[str, Any]] | None = None
    """With a token budget and GPUs named (-g): per method and GPU, the fewest-GPU, fastest and cheapest layouts
    searched (`layout_picks`); None otherwise (the whole catalogue is not searched layout by layout)."""


BY_SHAPE: Memo[PlanPart] = Memo(64)
"""Plan parts by shape_key: a scan's fine-tunes of one base estimate it once (64 shapes held, a few MB)."""


def shape_key(arch: Architecture, inventory: Inventory, plan: Plan) -> tuple[str, str, str]:
    """Everything plan_part reads, as text: the dataclasses' reprs spell every field (dicts and nested parts too)."""
    return repr(arch), repr(inventory), repr(plan)


def plan_part(arch: Architecture, inventory: Inventory, plan: Plan) -> PlanPart:
    """The estimates per method, the fit matrix with each fitting cell timed, and the rankings of those setups."""
    from hfmem.hardware.prices import prices_for
    from hfmem.memory.estimate import estimate
    from hfmem.memory.record import gpu_table
    from hfmem.reporting.picks import ranking
    from hfmem.reporting.timing import flops_of, step_for
    from hfmem.units import budget, figure

    training = plan.training.validated()
    gpus = matrix_gpus(training, plan.gpus)
    estimates = {m: estimate(arch, inventory, spanning(plan.settings_for(m), gpus)) for m in plan.methods}
    per_method = {m: plan.settings_for(m) for m in plan.method_settings}
    fits = node_fits(arch, inventory, plan, gpus, per_method)
    prices = prices_for([g.name for g in gpus], plan.prices)
    setups: dict[tuple, tuple[Any, Any]] = {}  # (method, setup, changes) -> (estimate, FLOPs): GPU-independent

    def timed(fit: Any, cell: dict[str, Any]) -> tuple[str, Any, Any] | None:
        found = timed_setup(cell)
        if found is None:
            return None
        kind, setup = found
        changes = (fit.gpu_defaults or {}).get("changes", {}) | setup
        if kind == "gpus":  # the GPUs a cell asks for run data parallel, or the layout its advice names
            changes = NO_MODEL_PARALLELISM | changes
        key = (fit.method, tuple(sorted(changes.items())))
        if key not in setups:
            est = estimates[fit.method] if not changes else estimate(
                arch, inventory, replace(plan.settings_for(fit.method), **changes).validated())
            setups[key] = est, flops_of(arch, inventory, est)
        return kind, *setups[key]

    cells: list[dict[str, Any]] = []
    short_of_host: set[int] = set()
    offload_short = host_shortfalls(arch, inventory, plan, fits)
    for fit in fits:
        cell = fit.to_dict() | {"host_ram_short": offload_short.get((fit.method, fit.gpu.spec))}
        found = timed(fit, cell)
        if found is None:
            cell["time"] = None
        else:
            kind, est, flops = found
            step = step_for(est, flops, fit.gpu, arch) | {"setup": kind}
            if not machine_room(est, fit.gpu):
                short_of_host.add(len(cells))
            price = prices.get(fit.gpu.name)
            spent = budget(step.get("tokens_per_s"), timed_gpus(cell, kind), plan.tokens,
                           None if price is None else price.usd_per_gpu_hour)
            cell["time"] = step | spent | ({"flops": figure(plan.tokens * flops.hardware)} if spent else {})
        if cell["per_gpu_bytes"] == estimates[fit.method].per_gpu_bytes.to_dict():
            del cell["per_gpu_bytes"]  # the estimate's (a cell's own only where the GPU runs other defaults)
        cells.append(cell)
    searches = None if plan.tokens is None or plan.gpus in ((), catalogue()) else layout_searches(
        arch, inventory, plan, fits, cells, prices)
    options = setup_options(cells, short_of_host, searches or [])
    picked = overall_picks(options, training.pick_floor)
    ranked = None if plan.rank is None else [as_pick(options[i][1]) for i in ranking(
        [c for c, _ in options], plan.rank)]
    for cell in cells:  # the roofline terms are kept for the picks only
        if cell["time"] is not None:
            cell["time"].pop("terms", None)
    return PlanPart(gpus=gpus, fits=fits, plan=plan.to_dict(), gpu_entries=gpu_table(fits),
                    estimates={m: e.to_dict() | {"flops_per_token": flops_of(arch, inventory, e).to_dict()}
                               for m, e in estimates.items()}, fit=cells,
                    fastest_and_cheapest=picked, fit_ranking=ranked,
                    prices=price_entry(prices), nodes=node_entry(gpus, training),
                    layout_picks=None if searches is None else layout_picks(searches, training.pick_floor))


Option = tuple[Any, Any]
"""A timed setup the picks and the ranking choose among: its reporting.picks.Candidate, and the fit cell (a dict)
or the (fit, layout_search.Timed) it stands for."""


def setup_options(cells: list[dict[str, Any]], short_of_host: Collection[int],
                  searches: list[tuple[Any, list[Any]]]) -> list[Option]:
    """Every timed cell, then every layout searched (where layouts were)."""
    from hfmem.reporting.picks import Candidate

    options: list[Option] = []
    for i, cell in enumerate(cells):
        time = cell.get("time") or {}
        speed = time.get("tokens_per_s") or 0.0
        options.append((Candidate(cell["method"], speed, time.get("cost_usd"), time.get("hours"),
                                  i not in short_of_host, timed_gpus(cell, time["setup"]) if speed else 1), cell))
    return options + [(t.candidate(fit.method), (fit, t)) for fit, timed in searches for t in timed]


def overall_picks(options: list[Option], floor: float) -> dict[str, dict[str, Any] | None]:
    """The report's fastest and cheapest setup by the one rule (reporting.picks) over every timed cell and layout,
    each a pick with its roofline terms."""
    from hfmem.reporting.picks import fastest_and_cheapest

    found = fastest_and_cheapest([c for c, _ in options], floor)
    return {label: None if i is None else as_pick(options[i][1], terms=True) for label, i in found.items()}


def as_pick(chosen: Any, *, terms: bool = False) -> dict[str, Any]:
    """A cell or searched layout as a pick (memory.record.pick); a layout's with its words and settings changes;
    with `terms`, the roofline terms too."""
    from hfmem.memory.record import pick, pick_time

    if isinstance(chosen, dict):
        return pick(chosen, chosen["time"]["terms"] if terms else None)
    fit, t = chosen
    return {"method": fit.method, "gpu": fit.gpu.name, "num_gpus": t.layout.num_gpus, "layout": t.layout.describe(),
            "settings_changes": t.layout.changes(),
            "time": pick_time(t.time | {"setup": "layout"}, t.time["terms"] if terms else None)}


def layout_searches(arch: Architecture, inventory: Inventory, plan: Plan, fits: list[Any], cells: list[dict[str, Any]],
                    prices: Mapping[str, Price]) -> list[tuple[Any, list[Any]]]:
    """Per fit cell with a timed setup: the layouts searched from its fewest GPUs up to max_gpus
    (reporting.layout_search), each timed and priced for the plan's tokens. Estimates are GPU-independent, so shared
    by the matrix."""
    from hfmem.memory.estimate import estimate
    from hfmem.reporting.layout_search import search
    from hfmem.reporting.timing import flops_for, flops_of, step_for, throughput_bound
    from hfmem.units import figure

    memo: dict[TrainingSettings, Any] = {}
    flops_memo: dict[tuple, Any] = {}
    seq = plan.training.resolved_seq_len(arch.max_position_embeddings)
    tokens = plan.tokens

    def estimate_of(s: TrainingSettings) -> Any:
        if s not in memo:
            memo[s] = estimate(arch, inventory, s)
        return memo[s]

    out = []
    for fit, cell in zip(fits, cells, strict=True):
        found = timed_setup(cell)
        if found is None or not (cell.get("time") or {}).get("tokens_per_s"):
            continue
        base = replace(plan.settings_for(fit.method), **(fit.gpu_defaults or {}).get("changes", {}))
        price = prices.get(fit.gpu.name)
        gpu: Gpu = fit.gpu

        def time_of(est: Any, gpu: Gpu = gpu) -> dict[str, Any]:
            flops = flops_of(arch, inventory, est)
            return step_for(est, flops, gpu, arch) | ({"flops": figure(tokens * flops.hardware)} if tokens else {})

        def host_ok(est: Any, gpu: Gpu = gpu) -> bool:
            return machine_room(est, gpu)

        kernel = estimate_of(base).activations.attention  # the same under every layout

        def bound_of(s: TrainingSettings, gpu: Gpu = gpu, kernel: str = kernel) -> float | None:
            key = (s.method, s.gradient_checkpointing, s.checkpoint_method, s.checkpoint_layers, s.lora_rank,
                   s.lora_targets, kernel)  # what flops_for reads
            if key not in flops_memo:
                flops_memo[key] = flops_for(arch, inventory, s, seq, kernel)
            return throughput_bound(flops_memo[key], s, seq, gpu, arch)

        out.append((fit, search(base, arch, gpu, fewest=timed_gpus(cell, found[0]), tokens=tokens,
                                price=None if price is None else price.usd_per_gpu_hour, estimate_of=estimate_of,
                                time_of=time_of, host_ok=host_ok, bound_of=bound_of)))
    return out


def layout_picks(searches: list[tuple[Any, list[Any]]], floor: float) -> list[dict[str, Any]]:
    """Per searched method and GPU: the fewest-GPU, fastest and cheapest layouts (reporting.layout_search.choose),
    the cost-against-time frontier, and why any layout went untimed."""
    from hfmem.reporting.layout_search import LABELS, choose, frontier, untimed

    out = []
    for fit, timed in searches:
        chosen = {label: t.to_dict() if t else None for label, t in choose(timed, floor).items()}
        out.append({"method": fit.method, "gpu": fit.gpu.name, "timed": len(timed),
                    **{label: chosen[label] for label in LABELS},
                    "frontier": [t.to_dict(brief=True) for t in frontier(timed)],
                    "not_timed": untimed(timed)})
    return out


def price_entry(prices: Mapping[str, Price]) -> dict[str, Any]:
    """The report's `prices`: each priced GPU's [USD per GPU-hour, origin] ("given" by --price, else its default's
    source key), and the default table's date and the sources it used (url, date read)."""
    from hfmem.hardware.prices import GIVEN, as_of, source

    used = sorted({p.origin for p in prices.values()} - {GIVEN})
    return {"by_gpu": {name: [p.usd_per_gpu_hour, p.origin] for name, p in prices.items()},
            "default_as_of": as_of(), "sources": {k: {f: source(k)[f] for f in ("url", "read")} for k in used}}


def host_ram_gib(settings: TrainingSettings, gpu: Gpu) -> float | None:
    """The host RAM per machine a GPU's cells assume: the setting where given, else the GPU's common server's
    (hfmem gpus; None: not checked)."""
    from hfmem.hardware.specs import node_specs

    return settings.host_ram_gib if settings.host_ram_gib is not None else node_specs(gpu).host_ram_gib


def nvme_gib(settings: TrainingSettings, gpu: Gpu) -> float | None:
    """The NVMe space per machine a GPU's cells assume: the setting where given, else the GPU's common server's
    (hfmem gpus; None: not checked, and no NVMe offload suggested)."""
    from hfmem.hardware.specs import node_specs

    return settings.nvme_gib if settings.nvme_gib is not None else node_specs(gpu).nvme_gib


def spanning(s: TrainingSettings, gpus: tuple[Gpu, ...]) -> TrainingSettings:
    """A method's settings for its estimate: NCCL's NVLS buffers decided by the report's GPUs where the run spans
    several (one GPU has no communicator, so its settings stay as given)."""
    from hfmem.memory.nccl import nvls_for

    return nvls_for(s, gpus) if s.num_gpus > 1 else s


def machine_room(est: Any, gpu: Gpu) -> bool:
    """Whether the machine `gpu` is assumed in holds a setup's host RAM and NVMe shares (unknown: not checked)."""
    from hfmem.memory.breakdown import room_on

    return room_on(est.per_gpu_bytes, host_ram_gib(est.settings, gpu), nvme_gib(est.settings, gpu))


def node_fits(arch: Architecture, inventory: Inventory, plan: Plan, gpus: tuple[Gpu, ...],
              per_method: Mapping[str, TrainingSettings]) -> list[Any]:
    """The fit matrix (methods outer, GPUs in order) with each GPU's cells at its machine's host RAM (host_ram_gib)
    and NVMe (nvme_gib): one fit_matrix per distinct pair, the GPUs sharing it together."""
    from hfmem.memory.fit import fit_matrix

    training = plan.training.validated()
    groups: dict[tuple[float | None, float | None], list[Gpu]] = {}
    for gpu in gpus:
        groups.setdefault((host_ram_gib(training, gpu), nvme_gib(training, gpu)), []).append(gpu)
    order = {(m, g.spec): (i, j) for i, m in enumerate(plan.methods) for j, g in enumerate(gpus)}
    fits = []
    for (ram, nvme), members in groups.items():
        own = {m: replace(spanning(s, gpus), host_ram_gib=ram, nvme_gib=nvme) for m, s in per_method.items()}
        shared = replace(spanning(training, gpus), host_ram_gib=ram, nvme_gib=nvme)
        fits += fit_matrix(arch, inventory, shared, members, plan.methods, max_gpus=training.max_gpus, per_method=own,
                           stated=plan.stated)
    return sorted(fits, key=lambda f: order[(f.method, f.gpu.spec)])


def node_entry(gpus: tuple[Gpu, ...], training: TrainingSettings) -> dict[str, Any]:
    """The report's `nodes`: per GPU of the matrix, its network Gb/s per GPU, host RAM GiB per machine and common
    server as its cells assume them (null: no network figure / host RAM not checked), its NVMe GiB and NVMe read and
    write GB/s per machine where known (absent: NVMe not checked / NVMe offload untimed), and which of them a setting
    `given` instead of the server; the servers' sources are in `hfmem gpus --format json`."""
    from hfmem.hardware.specs import node_specs
    from hfmem.reporting.timing import network_gbps, nvme_gbps

    def entry(g: Gpu) -> dict[str, Any]:
        nvme = {"nvme_gib": nvme_gib(training, g), "nvme_read_gbps": nvme_gbps(training, g, "read"),
                "nvme_write_gbps": nvme_gbps(training, g, "write")}
        return {"network_gbps": network_gbps(training, g), "host_ram_gib": host_ram_gib(training, g)} | {
            k: v for k, v in nvme.items() if v is not None} | {"server": node_specs(g).server}

    given = [k for k in NODE_SETTINGS if getattr(training, k) is not None]
    return {"gpus_per_node": training.gpus_per_node, "given": given, "by_gpu": {g.spec: entry(g) for g in gpus}}


NODE_SETTINGS = ("network_gbps", "host_ram_gib", "nvme_gib", "nvme_read_gbps", "nvme_write_gbps")
"""The settings that replace a GPU's common server's figures."""


def host_shortfalls(arch: Architecture, inventory: Inventory, plan: Plan,
                    fits: list[Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Each cell's `host_ram_short`, by (method, GPU): where it does not fit as asked and its advice is not a few
    GPUs (at most MAX_SUGGESTED_GPUS, preferred to offload anyway), the least intrusive offload change (ZeRO-Offload,
    then ZeRO-Infinity) that would fit its GPU but needs more host RAM per machine than the machine has
    ({mitigation, needed_gib per machine, host_ram_gib it has, nvme}): what a `✗` on a small card would have taken.
    `nvme` is ZeRO-Infinity on NVMe where the machine's NVMe is known ({needed_gib of NVMe, nvme_gib it has,
    host_needed_gib of RAM for its swap buffers or load-time copies, fits}); slow and untimed without the drives'
    bandwidth, it is suggested only where asked (offload_device nvme), and then, where it fits, the cell has no
    shortfall."""
    from hfmem.memory.mitigations import candidates
    from hfmem.units import GIB

    training = plan.training.validated()
    needs: dict[tuple, Any] = {}  # (method, GPU defaults, change) -> the change's per-GPU figures: GPU-independent
    out = {}
    for fit in fits:
        ram = host_ram_gib(training, fit.gpu)
        near = fit.advice is not None and fit.advice["num_gpus"] <= MAX_SUGGESTED_GPUS  # preferred to offload anyway
        if fit.verdict == "fits" or ram is None or near:
            continue
        defaults = (fit.gpu_defaults or {}).get("changes", {})
        asked = replace(plan.settings_for(fit.method), **defaults, nvme_gib=nvme_gib(training, fit.gpu)).validated()
        memo_key = (fit.method, tuple(sorted(defaults.items())), asked.nvme_gib)
        offloads = [(name, replace(asked, **changes)) for name, changes in candidates(asked)
                    if changes.get("offload_optimizer")]
        for name, trial in offloads:
            need = need_of(needs, (*memo_key, name), arch, inventory, trial)
            if need.required > fit.gpu.usable_bytes:
                continue
            if need.host_per_node > ram * GIB:  # the least intrusive offload that fits the GPU
                # ZeRO-Infinity on NVMe, asked for or not: the line says what it would take
                on_nvme = [need_of(needs, (*memo_key, n), arch, inventory, replace(asked, **changes))
                           for n, changes in candidates(replace(asked, offload_device="nvme"))
                           if changes.get("offload_device") == "nvme"]
                nvme = nvme_short(fit.gpu, ram, asked.nvme_gib, on_nvme, asked.offload_device == "nvme")
                if nvme is not False:
                    out[(fit.method, fit.gpu.spec)] = {"mitigation": name, "host_ram_gib": ram,
                                                       "needed_gib": round(need.host_per_node / GIB, 1),
                                                       "nvme": nvme}
            break
    return out


def need_of(needs: dict[tuple, Any], key: tuple, arch: Architecture, inventory: Inventory,
            trial: TrainingSettings) -> Any:
    """The per-GPU figures of an offload `trial`, memoised in `needs` by `key` (GPU-independent)."""
    from hfmem.memory.estimate import estimate

    if key not in needs:
        needs[key] = estimate(arch, inventory, trial.validated()).per_gpu_bytes
    return needs[key]


def nvme_short(gpu: Gpu, ram: float, nvme: float | None, needs: list[Any],
               asked: bool) -> dict[str, Any] | Literal[False] | None:
    """ZeRO-Infinity on NVMe for a cell whose host RAM is short: its NVMe and RAM per machine against the machine's
    and whether it fits them and the GPU; False where it fits and offload to NVMe was `asked` (the cell suggests it);
    None without an NVMe figure."""
    from hfmem.memory.breakdown import room_on
    from hfmem.units import GIB

    if nvme is None or not needs:
        return None
    need = needs[0]
    fits = need.required <= gpu.usable_bytes and room_on(need, ram, nvme)
    if fits and asked:
        return False
    return {"nvme_gib": nvme, "needed_gib": round(need.nvme_per_node / GIB, 1),
            "host_needed_gib": round(need.host_per_node / GIB, 1), "fits": fits}
