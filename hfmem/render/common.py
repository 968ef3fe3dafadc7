"""Pieces every renderer shares: the architecture rows, the method titles, the verdict marks and their legend, the
one-line settings summary and the napkin-rule contrast (untrusted text is made visible by hfmem.text)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from hfmem.memory.fit import MARKS
from hfmem.memory.record import cells, estimates, picks, ranked, training as settings_of
from hfmem.render.labels import SHARDING_NAMES, advice_label, fit_grid, serving_settings_text, setup_label, short_gib
from hfmem.units import count

ARCH_ROWS = [
    ("model_type", "model type"), ("model_class", "class"), ("num_layers", "layers"), ("hidden_size", "hidden"),
    ("num_attention_heads", "heads"), ("num_key_value_heads", "KV heads"), ("head_dim", "head dim"),
    ("attention_kind", "attention"), ("intermediate_size", "intermediate"), ("vocab_size", "vocab"),
    ("num_experts", "experts"), ("experts_per_token", "experts / token"), ("moe_intermediate_size", "expert width"),
    ("max_position_embeddings", "max positions"), ("sliding_window", "sliding window"), ("dtype", "stored dtype"),
]
METHOD_TITLES = {"full": "full fine-tune", "lora": "LoRA", "qlora": "QLoRA", "dora": "DoRA", "lora-fa": "LoRA-FA",
                 "vera": "VeRA", "ia3": "IA3", "oft": "OFT", "boft": "BOFT", "prompt-tuning": "prompt tuning",
                 "prefix-tuning": "prefix tuning"}
EMOJI = {"fits": "✅", "change": "⚠️", "gpus": "❌", "none": "❌"}
"""The same marks as GitHub renders them, for the pull-request comment."""


def parameter_count(params: dict[str, Any]) -> str:
    """The parameter total, marked "≈ … approximate" when it is one (the reason is in the notes and the JSON)."""
    text = count(params["total"])
    if not params.get("approximate"):
        return text
    return f"≈{text[:-1]}, approximate)" if text.endswith(")") else f"≈{text} (approximate)"


def legend(marks: dict[str, str] = MARKS, batch: bool = True) -> str:
    """The one legend shown under every fit table, in that table's marks (`batch`: its cells show b≤N)."""
    fits = f"{marks['fits']} fits" + (", b≤N: largest micro-batch" if batch else "")
    return f"{fits} · {marks['change']} fits with the change · {marks['gpus']} needs N GPUs"


PAGED_HINT = "a figure above the card fits: paged optimizer states page out to the CPU"


def paged_hint(report: dict[str, Any]) -> str:
    """A line for cells whose figure is above the card yet fit: paged optimizer states page out instead of failing."""
    for fit in cells(report):
        usable = fit["gpu"]["usable_bytes"]
        shown = [fit] if fit["fits"] else list(fit.get("mitigations") or [])
        if any(c.get("total_bytes", 0) > usable >= c.get("required_bytes", 0) for c in shown):
            return PAGED_HINT
    return ""


def setup_text(a: dict[str, Any]) -> str:
    """The GPUs and sharding an estimate is for, e.g. "1 GPU" or "2 GPUs, ZeRO-3, optimizer offload"."""
    gpus = f"{a['num_gpus']} GPU" + ("s" if a["num_gpus"] > 1 else "")
    parts = [gpus] if a["sharding"] == "none" else [gpus, SHARDING_NAMES.get(a["sharding"], a["sharding"])]
    parts += [f"{what} offload" for what, on in (("optimizer", a["offload_optimizer"]),
                                                  ("parameter", a["offload_params"])) if on]
    return ", ".join(parts)


def _adapter_text(a: dict[str, Any]) -> str:
    """The adapter's own size setting: LoRA's rank, or OFT's and BOFT's rotation blocks."""
    if a.get("method") == "oft":
        return f"OFT blocks of {a['oft_block_size']}"
    if a.get("method") == "boft":
        return f"BOFT blocks of {a['boft_block_size']} × {a['boft_n_butterfly_factor']} butterfly"
    return f"LoRA r={a['lora']['rank']}"


def settings_line(report: dict[str, Any]) -> str:
    """The assumptions every cell shares, in one line."""
    a = estimates(report)[0]["assumptions"]
    overhead = a["overhead"]
    lora = a.get("lora") or {}
    adapters = dict.fromkeys(_adapter_text(e["assumptions"]) for e in estimates(report) if e["assumptions"].get("lora"))
    lora_text = f" · {', '.join(adapters)} on {','.join(lora['targets'])}" if lora else ""
    tie = a.get("tie_word_embeddings")
    overrides = [f"modules_to_save {','.join(a['modules_to_save'])}" if lora and a.get("modules_to_save") else "",
                 f"base {a['base_quantization']}" if lora and a.get("base_quantization") else "",
                 f"activation {a['activation_fn']}" if a.get("activation_fn") else "",
                 "" if tie is None else f"head {'tied' if tie else 'untied'}",
                 f"eval batch {a['eval_batch_size']}" if a.get("eval_batch_size") else ""]
    return (f"{setup_text(a)} · {a['dtype']} · {a['optimizer']} · seq {a['seq_len']:,} · "
            f"micro-batch {a['micro_batch_size']} · "
            f"checkpointing {a['gradient_checkpointing']} · {a['attention_kernel_used']} · "
            f"+{overhead['cuda_context_gib']} GiB CUDA context, +{overhead['fragmentation']:.0%} fragmentation"
            f"{lora_text}" + "".join(f" · {o}" for o in overrides if o) + other_settings_text(report)
            + gpu_defaults_text(report) + serving_settings_text(report)
            + (f" · {prices}" if (prices := price_text(report)) else ""))


SHOWN = frozenset({"method", "seq_len", "micro_batch_size", "dtype", "optimizer", "sharding", "num_gpus",
                   "offload_optimizer", "offload_params", "gradient_checkpointing", "attention", "activation_fn",
                   "tie_word_embeddings", "lora_rank", "lora_targets", "modules_to_save", "base_quantization",
                   "eval_batch_size", "overhead", "resolved_optimizer", "resolved_sharding", "zero_stage", "serving"})
"""The settings the assumes line already words (or that follow from others)."""


def other_settings_text(report: dict[str, Any]) -> str:
    """Every other setting of the plan that differs from hfmem's defaults, e.g. " · fused_loss cce ·
    compile_layers on": a setting that moves the figures is never hidden."""
    from hfmem.memory.settings import TrainingSettings

    defaults, training = TrainingSettings().to_dict(), settings_of(report)
    return "".join(f" · {k} {_on(v)}" for k, v in training.items() if k not in SHOWN and defaults.get(k) != v)


def _on(value: Any) -> str:
    return {True: "on", False: "off"}.get(value, _value(value)) if isinstance(value, bool) else _value(value)


def gpu_defaults_text(report: dict[str, Any]) -> str:
    """Where GPUs run other defaults (they lack bf16 or FlashAttention-2: `hfmem gpus`, the JSON's gpu_defaults),
    e.g. " · fp16, sdpa on T4, V100 32GB"."""
    groups: dict[tuple, list[str]] = {}
    for fit in cells(report):
        if found := fit.get("gpu_defaults"):
            names = groups.setdefault(tuple(found["changes"].values()), [])
            if fit["gpu"]["name"] not in names:
                names.append(fit["gpu"]["name"])
    return "".join(f" · {', '.join(values)} on {', '.join(names)}" for values, names in groups.items())


def origin_line(report: dict[str, Any]) -> str:
    """Which settings a framework profile and a config file set, e.g. "torchtune defaults (0.7): loss_chunks=8";
    "" when every setting is hfmem's default or a flag."""
    plan = report.get("plan") or {}
    training, sources = settings_of(report), plan.get("sources") or {}
    parts = []
    if framework := plan.get("framework"):
        set_here = [f"{k}={_value(training.get(k))}" for k, src in sources.items() if src.startswith("framework")]
        set_here += [f"{k}={_value(v)} ({m})" for m, over in (plan.get("method_settings") or {}).items()
                     for k, v in over.items()]
        parts.append(f"{framework['title']} defaults ({framework['versions']}): " + (", ".join(set_here) or "none"))
    if config := plan.get("config"):
        from_file = [f"{k}={_value(training.get(k))}" for k, src in sources.items() if src.startswith("config")]
        parts.append(f"{config['format']} config {config['path']}: " + (", ".join(from_file) or "no settings"))
    return " · ".join(parts)


def _value(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def time_line(report: dict[str, Any]) -> str:
    """The fastest (and, with prices, the cheapest) fitting setup, e.g. "fastest: LoRA on 1× H100 80GB, 16.6k
    tokens/s, 17 h for 1e9 tokens"; "" when no fitting cell has a step time."""
    picked = picks(report)
    parts = []
    for label in ("fastest", "cheapest"):
        pick = picked.get(label)
        if not pick:
            continue
        t = pick["time"]
        text = f"{label}: {_setup(pick, ' on ')}, {t['tokens_per_s'] / 1000:,.1f}k tokens/s"
        if "hours" in t:
            text += f", {t['hours']:,.1f} h for {t['tokens']:.3g} tokens ({t['flops']:.3g} FLOPs)"
        parts.append(text + (f", {_usd(t)}" if "cost_usd" in t else ""))
    best_first = ranked(report)
    if best_first:
        by = (report.get("plan") or {}).get("rank")
        best = [f"{i}. {_setup(p, ' ')}" + (f" {_usd(p['time'])}" if "cost_usd" in p["time"] else "")
                for i, p in enumerate(best_first[:3], 1)]
        parts.append(f"ranked by {by}: " + ", ".join(best))
    if not parts:
        return ""
    used = {p["gpu"]: p["time"]["hfu_assumed"] for p in picked.values() if p}  # by the GPU's architecture
    hfu = (f"{next(iter(used.values())):.0%}" if len(set(used.values())) == 1 else
           ", ".join(f"{gpu} {h:.0%}" for gpu, h in used.items()))
    recipes = sorted({f"; {lp['recipe']} linears at {lp['gemm_speedup']:g}x bf16" for p in picked.values()
                      if p and (lp := p["time"].get("low_precision"))})
    return " · ".join(parts) + f" (roofline, {hfu} hardware FLOPs use{''.join(recipes)})"


def layout_lines(report: dict[str, Any]) -> list[str]:
    """Per method and GPU searched for the token budget (`layout_picks`): its fewest-GPU, fastest and cheapest
    layouts, e.g. "layouts, full fine-tune on H100 80GB (90 timed): fewest 16× TP8·FSDP, b1: 11.3k tok/s ·
    24.6 h · $1,571 · fastest ..."; what left a layout untimed after it; [] without --tokens."""
    lines = []
    for entry in report.get("layout_picks") or []:
        parts = []
        for label in ("fewest", "fastest", "cheapest"):
            chosen = entry.get(label)
            if chosen is None:
                priced = label != "cheapest" or entry.get("fastest") is None
                parts.append(f"{label}: " + ("none fits" if priced else f"no price for {entry['gpu']} (--price)"))
                continue
            figures = [f"{chosen['tokens_per_s'] / 1000:,.1f}k tok/s", f"{chosen['hours']:,.2f} h"]
            figures += [_usd(chosen)] if "cost_usd" in chosen else []
            parts.append(f"{label} {chosen['layout']}: " + " · ".join(figures))
        untimed = "".join(f"; not timed at {_counts(u['num_gpus'])} GPUs: {u['reason']}"
                          for u in entry.get("not_timed") or [])
        title = METHOD_TITLES.get(entry["method"], entry["method"])
        lines.append(f"layouts, {title} on {entry['gpu']} ({entry['timed']:,} timed): " + " · ".join(parts)
                     + untimed)
    return lines


def _counts(counts: list[int]) -> str:
    """GPU counts in words: "16", "16 and 32", "16 to 1,024 (7 counts)"."""
    if len(counts) <= 2:
        return " and ".join(f"{n:,}" for n in counts)
    return f"{counts[0]:,} to {counts[-1]:,} ({len(counts)} counts)"


def time_cell(fit: dict[str, Any]) -> str:
    """A fitting cell's speed and, with a budget, its hours and cost: "16.6k tok/s · 16.8 h · $42"; for a cell timed
    with a change or more GPUs, that setup first ("+ckpt: ...", "3×ZeRO-3: 3.8k tok/s ..."); where it cannot be
    timed, why ("3×ZeRO-3: not timed: ..."); "" where nothing fits."""
    t = fit.get("time") or {}
    label = setup_label(fit)
    prefix = f"{label}: " if label else ""
    if not t.get("tokens_per_s"):
        return f"{prefix}not timed: {t['reason']}" if t.get("reason") else ""
    parts = [f"{t['tokens_per_s'] / 1000:,.1f}k tok/s"]
    if "hours" in t:
        parts.append(f"{t['hours']:,.1f} h")
    if "cost_usd" in t:
        parts.append(_usd(t))
    return prefix + " · ".join(parts)


def _setup(pick: dict[str, Any], joint: str) -> str:
    """A timed setup in words: "LoRA on 3× H100 80GB" (joint " on ") or "LoRA 3× H100 80GB" (joint " "); a change
    it is timed with in brackets: "QLoRA (+ckpt) on 1× H100 80GB"; a searched layout after the GPUs: "full
    fine-tune on 64× H100 80GB (64× TP8·FSDP, b1)"."""
    change = f" ({advice_label(pick['advice'])})" if pick["time"].get("setup") == "change" else ""
    layout = f" ({pick['layout']})" if "layout" in pick else ""
    title = METHOD_TITLES.get(pick["method"], pick["method"])
    return f"{title}{change}{joint}{pick['num_gpus']}× {pick['gpu']}{layout}"


def wants_time_table(report: dict[str, Any]) -> bool:
    """Whether a report asks for the time per fitting cell: a token budget or a price was given."""
    plan = report.get("plan") or {}
    return bool(plan.get("tokens") or plan.get("prices_usd_per_gpu_hour"))


def price_text(report: dict[str, Any], given: str = "--price") -> str:
    """Where the price of each costed GPU came from, e.g. "USD/GPU-h: H100 80GB 2.5 (--price); A100 80GB 2.79
    (default table of 2026-09-20: lambda.ai/instances, read 2026-09-20)"; "" where no cell has a cost."""
    costed = {fit["gpu"]["name"] for fit in cells(report) if "cost_usd" in (fit.get("time") or {})}
    return price_words(report.get("prices") or {}, costed, given)


def price_words(prices: dict[str, Any], names: Collection[str], given: str) -> str:
    """A report's `prices` entry in words for the GPUs `names`, grouped by origin (`price_text`); `given` names a
    given price's origin."""
    groups: dict[str, list[str]] = {}
    for name, (usd, origin) in (prices.get("by_gpu") or {}).items():
        if name in names:
            groups.setdefault(origin, []).append(f"{name} {usd:g}")
    parts = []
    for origin, listed in sorted(groups.items(), key=lambda g: g[0] != "given"):  # the given prices first
        src = (prices.get("sources") or {}).get(origin) or {}
        where = given if origin == "given" else (f"default table of {prices.get('default_as_of')}: "
                                                 f"{str(src.get('url')).split('://', 1)[-1]}, read {src.get('read')}")
        parts.append(f"{', '.join(listed)} ({where})")
    return "USD/GPU-h: " + "; ".join(parts) if parts else ""


def _usd(time: dict[str, Any]) -> str:
    return f"${time['cost_usd']:,.0f}"


def napkin_line(report: dict[str, Any]) -> str:
    """The napkin rule as a contrast, in the table's unit, beside each method's figure from the table's own cells."""
    napkin = estimates(report)[0]["rule_of_thumb"]["napkin_gib"]
    methods, rows = fit_grid(report)
    cells = rows[0][2] if rows else {}
    figures = ", ".join(f"{METHOD_TITLES.get(m, m).removesuffix(' fine-tune')} "
                        f"{short_gib(cells[m]['total_bytes'])}"
                        for m in methods if m in cells)
    return f"\"6 × params(B) GB\" napkin: {napkin:,.1f} GiB · hfmem: {figures} GiB"
