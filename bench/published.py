"""Predicted vs published peak training memory, for every entry of fixtures/published_memory.json.

    python bench/published.py            # the table and the median absolute error (measured rows)
    python bench/published.py --json     # the rows as JSON
    python bench/published.py --write-baseline   # record each row's error in fixtures/published_baseline.json

Each entry's model config comes from fixtures/hub/<org>/<name>/config.json, else fixtures/configs/
(fixtures are self-contained: nothing is read from outside the repository). Settings are taken in
this order: what the source states; what its default config states (`inferred_from_config`); hfmem's
default. The table says which settings were not stated. The predicted figure is the one matching
the source's metric: max_memory_allocated / peak_memory_active -> the allocated peak; reserved ->
allocated + fragmentation; nvidia-smi -> + CUDA context; unknown -> the allocated peak (what
torch.cuda.max_memory_allocated, the usual printout, reports).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hfmem.model.architecture import read_architecture  # noqa: E402
from hfmem.memory.estimate import estimate  # noqa: E402
from hfmem.model.meta import build_inventory  # noqa: E402
from hfmem.memory.settings import Overhead, TrainingSettings  # noqa: E402
from hfmem.units import GIB  # noqa: E402

FIXTURES = ROOT / "fixtures"

_DTYPE = {"bf16": "bf16-pure", "mixed-bf16": "bf16", "mixed-fp16": "fp16", "fp32": "fp32", "fp16": "fp16",
          "amp-fp16": "amp-fp16"}
_OPTIMIZER = {"adamw": "adamw", "adamw8bit": "adamw_8bit", "paged_adamw": "paged_adamw",
              "paged_adamw32bit": "paged_adamw", "paged_adamw8bit": "paged_adamw_8bit"}
_SHARDING = {"fsdp": "fsdp_full_shard", "zero3": "zero3", "zero2": "zero2", "ddp": "ddp"}
_TORCHTUNE_NAMES = {"output_proj": "o_proj", "q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj"}
# PEFT's default LoRA targets per model type (peft.utils.constants, TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING)
_PEFT_DEFAULT_TARGETS = {"t5": ["q", "v"], "mt5": ["q", "v"], "bloom": ["query_key_value"], "llama": ["q_proj", "v_proj"],
                         "mistral": ["q_proj", "v_proj"], "falcon": ["query_key_value"], "gpt2": ["c_attn"]}
# Defaults of the scripts a source names, read from those scripts (PEFT's examples/*/peft_lora_*_ds_zero3_offload.py:
# batch_size 8, the causal-LM script pads to max_length 64; the seq2seq one pads to the longest tweet, taken as 64 too).
_SCRIPT_DEFAULTS = {"PEFT README": {"micro_batch_size": 8, "seq_len": 64}}
# torchtune's recipe configs (llama2/llama3_1 *_lora*, *_full*): pure bf16, fused AdamW, activation
# checkpointing on, LoRA rank 8 on q/v/output projections and the MLP. Used where a torchtune row states nothing.
_FRAMEWORK_DEFAULTS = {"torchtune": {"dtype": "bf16", "gradient_checkpointing": True, "lora_rank": 8,
                                     "lora_targets": ["q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}}
# The 4-bit linear each source ran. LitGPT's finetune scripts warn on any bitsandbytes but 0.42.0; the PEFT
# FSDP/DeepSpeed QLoRA guides date from bitsandbytes 0.43.0 (March 2024, the first with quant_storage for FSDP);
# the QLoRA paper's code is from 2023. All of these predate 0.43.2 (July 2024), which stopped MatMul4Bit from
# keeping its input. torchtune quantises with torchao's NF4.
_QLORA_KERNELS = {"torchtune": "torchao", "litgpt": "bitsandbytes-legacy", "peft docs": "bitsandbytes-legacy",
                  "qlora paper": "bitsandbytes-legacy"}
_QLORA_KERNEL_WHY = {"torchao": "torchtune's NF4", "bitsandbytes-legacy": "bitsandbytes < 0.43.2 in the source's time"}
# CUDA context the source itself measured (used for its nvidia-smi rows)
_SOURCE_CONTEXT_MIB = {"HF Transformers docs": 1343}

_METRIC = {"max_memory_allocated": "allocated_peak", "peak_memory_active": "allocated_peak",
           "max_memory_reserved": "reserved_peak", "nvidia-smi": "total", "unknown": "allocated_peak"}


@dataclass
class Row:
    """One entry: its settings as used, the predicted and measured GiB, and what was assumed."""

    id: str
    model: str
    method: str
    kind: str
    metric: str
    measured_gib: float
    predicted_gib: float | None = None
    error: float | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    assumed: list[str] = field(default_factory=list)
    unmodelled: list[str] = field(default_factory=list)
    skipped: str | None = None


def config_path(entry: dict[str, Any]) -> Path | None:
    """The fixture config for the entry: the hub fixture of its hub_config or model id, else fixtures/configs."""
    for name in (entry.get("hub_config"), entry.get("model")):
        if not name:
            continue
        for base in (FIXTURES / "hub", FIXTURES / "configs"):
            path = base / name / "config.json"
            if path.exists():
                return path
        if name.endswith("-Instruct"):
            for base in (FIXTURES / "hub", FIXTURES / "configs"):
                path = base / name.removesuffix("-Instruct") / "config.json"
                if path.exists():
                    return path
    return None


def _lora_targets(entry: dict[str, Any], inferred: dict[str, Any]) -> tuple[list[str] | None, bool]:
    """LoRA target names from the entry (or the torchtune config it cites); whether they were stated."""
    targets = entry.get("lora_targets")
    if targets:
        return [t.split(" ")[0] for t in targets], True
    attn = inferred.get("lora_attn_modules")
    if attn:
        names = [_TORCHTUNE_NAMES.get(a, a) for a in attn]
        if inferred.get("apply_lora_to_mlp"):
            names += ["gate_proj", "up_proj", "down_proj"]
        return names, False
    return None, False


def _from_notes(pattern: str, notes: str) -> str | None:
    match = re.search(pattern, notes, re.I)
    return match.group(1) if match else None


def settings_for(entry: dict[str, Any], model_type: str) -> tuple[TrainingSettings, list[str], list[str]]:
    """TrainingSettings for an entry, the settings that were not stated, and memory savers not modelled."""
    inferred = entry.get("inferred_from_config") or {}
    assumed: list[str] = []
    unmodelled: list[str] = []
    source = (entry.get("source") or "").lower()
    notes = entry.get("notes") or ""
    native_bf16 = "torchtune" in source or "litgpt" in source
    # Which AdamW implementation the source ran: torchtune configs use fused AdamW; LitGPT, the PEFT
    # scripts and guides (TrainingArguments' adamw_torch of their time) and the ULT trainer use
    # torch.optim.AdamW's default multi-tensor (foreach) path; the HF docs' Trainer of 2023 used adamw_hf.
    foreach = any(k in source for k in ("litgpt", "peft", "universal-llm-trainer")) or "torch.optim.adamw" in notes.lower()
    kw: dict[str, Any] = {"method": entry["method"]}
    for name, context in _SOURCE_CONTEXT_MIB.items():
        if name.lower() in source:
            kw["overhead"] = Overhead(cuda_context_gib=context / 1024)
            assumed.append(f"CUDA context {context} MiB (measured by the source)")

    dtype = entry.get("dtype")
    if dtype is None and inferred.get("dtype"):
        dtype = str(inferred["dtype"]).split(" ")[0]
        assumed.append(f"dtype={dtype} (source's config)")
    if dtype == "mixed-fp16" and "trainer" in notes.lower() and "fp32" in notes.lower():
        dtype = "amp-fp16"  # HF Trainer --fp16 on the fp32-loaded model: torch autocast
    framework = next((v for k, v in _FRAMEWORK_DEFAULTS.items() if k in source), {})
    if dtype is None and "dtype" in framework:
        dtype = framework["dtype"]
        assumed.append(f"dtype={dtype} (framework default config)")
    if dtype is None:
        assumed.append("dtype=bf16 mixed (hfmem default)")
    else:
        kw["dtype"] = _DTYPE.get(dtype, "bf16")

    optimizer = entry.get("optimizer")
    inferred_opt = str(inferred.get("optimizer") or "").lower()
    if optimizer is None and inferred_opt:
        optimizer = "paged_adamw8bit" if "8bit" in inferred_opt.replace("-", "") or "8-bit" in inferred_opt else "adamw"
        assumed.append(f"optimizer={optimizer} (source's config)")
    if optimizer is None and framework:
        optimizer = "adamw"
        assumed.append("optimizer=fused adamw (framework default config)")
    if optimizer is None:
        assumed.append("optimizer=adamw (hfmem default)" if entry["method"] != "qlora" else "optimizer=paged_adamw_8bit (hfmem QLoRA default)")
    else:
        kw["optimizer"] = _OPTIMIZER.get(optimizer.replace("-", "").lower(), "adamw")
        if kw["optimizer"] == "adamw" and foreach:
            kw["optimizer"] = "adamw_foreach"
    if inferred.get("optimizer_in_bwd"):
        kw["optimizer_in_backward"] = True
        assumed.append("optimizer in backward (source's config)")

    script = next((v for k, v in _SCRIPT_DEFAULTS.items() if k.lower() in source), {})
    for name in ("micro_batch_size", "seq_len"):
        value = entry.get(name)
        if value is None and name in script:
            value = script[name]
            assumed.append(f"{name}={value} (the source's example script)")
        elif value is None and name == "micro_batch_size" and inferred.get("batch_size"):
            value = inferred["batch_size"]
            assumed.append(f"micro_batch_size={value} (source's script)")
        if value is None:
            assumed.append(f"{name}=hfmem default")
        else:
            kw[name] = int(value)
    split = re.search(r"grad(?:ient)? accumulation (\d+) \(full\) / (\d+) \(lora\)", notes, re.I)
    accumulation = (split.group(1) if entry["method"] == "full" else split.group(2)) if split else \
        _from_notes(r"grad(?:ient)? accumulation(?: steps)?:? (\d+)", notes)
    accumulation = accumulation or inferred.get("gradient_accumulation_steps")
    if accumulation:
        kw["gradient_accumulation_steps"] = int(accumulation)

    gc = entry.get("gradient_checkpointing")
    if gc is None and "enable_activation_checkpointing" in inferred:
        gc = bool(inferred["enable_activation_checkpointing"])
        assumed.append(f"gradient_checkpointing={'on' if gc else 'off'} (source's config)")
    if gc is None and "gradient_checkpointing" in framework:
        gc = framework["gradient_checkpointing"]
        assumed.append(f"gradient_checkpointing={'on' if gc else 'off'} (framework default config)")
    if gc is None:
        assumed.append("gradient_checkpointing=off (hfmem default)")
    else:
        kw["gradient_checkpointing"] = "full" if gc else "off"

    attention = entry.get("attention")
    if attention is None:
        assumed.append("attention=sdpa (transformers/torchtune default)")
        kw["attention"] = "sdpa"
    else:
        kw["attention"] = {"flash": "flash_attention_2", "sdpa": "sdpa", "eager": "eager"}.get(attention, "sdpa")

    if entry["method"] != "full":
        targets, stated = _lora_targets(entry, inferred)
        if not targets and "peft default target modules" in notes.lower() and model_type in _PEFT_DEFAULT_TARGETS:
            targets = _PEFT_DEFAULT_TARGETS[model_type]
            assumed.append(f"lora targets {','.join(targets)} (PEFT's default for {model_type})")
        elif targets and not stated:
            assumed.append("lora targets (source's config)")
        if not targets and "lora_targets" in framework:
            targets = framework["lora_targets"]
            assumed.append("lora targets (framework default config)")
        if targets:
            kw["lora_targets"] = tuple(targets)
        else:
            assumed.append("lora_targets=all-linear (hfmem default)")
        dropout = inferred.get("lora_dropout") or _from_notes(r"lora[^.;]*?dropout[ =:]+(0\.\d+)", notes)
        if dropout:
            kw["lora_dropout"] = float(dropout)
        rank = entry.get("lora_rank") or inferred.get("lora_rank") or inferred.get("lora_r")
        if rank:
            kw["lora_rank"] = int(rank)
            if not entry.get("lora_rank"):
                assumed.append(f"lora_rank={rank} (source's config)")
        elif "lora_rank" in framework:
            kw["lora_rank"] = framework["lora_rank"]
            assumed.append(f"lora_rank={framework['lora_rank']} (framework default config)")
        else:
            assumed.append("lora_rank=16 (hfmem default)")
        if native_bf16:
            kw["adapter_dtype"] = "compute"
        if entry["method"] == "qlora":
            kernel = next((k for name, k in _QLORA_KERNELS.items() if name in source), "bitsandbytes")
            kw["qlora_kernel"] = kernel
            if kernel != "bitsandbytes":
                assumed.append(f"4-bit kernel {kernel} ({_QLORA_KERNEL_WHY[kernel]})")
            if "litgpt" in source:
                kw["previous_step_alive"] = True  # LitGPT's fit() keeps `logits` (and its graph) into the next forward
        if entry["method"] == "qlora" and re.search(r"\bbnb\.nf4\b(?!-dq)", notes):
            # LitGPT --quantize bnb.nf4 (not bnb.nf4-dq): lightning's BitsandbytesPrecision uses _NF4Linear,
            # compress_statistics=False, so bitsandbytes keeps an fp32 absmax per 64 weights.
            kw["qlora_double_quant"] = False

    n = int(entry.get("num_gpus") or 1)
    kw["num_gpus"] = n
    sharding = entry.get("sharding")
    if n > 1:
        default = "fsdp_full_shard" if "torchtune" in source else "ddp"
        kw["sharding"] = _SHARDING.get(sharding or "", default)
        if sharding is None:
            assumed.append(f"sharding={default}")
    elif sharding in {"zero3", "fsdp"}:
        kw["sharding"] = _SHARDING[sharding]
    if inferred.get("custom_sharded_layers"):
        kw["fsdp_wrap_embeddings"] = True  # torchtune shards tok_embeddings and output as units of their own
    offload = str(entry.get("cpu_offload") or "")
    if offload and offload != "False":
        if "activation" in offload:
            kw["activation_offloading"] = True  # torchtune enable_activation_offloading
        if "param" in offload or offload == "fsdp_cpu_offload":
            kw["offload_params"] = True
            kw["offload_optimizer"] = True
        elif "optimizer" in offload:
            kw["offload_optimizer"] = True
    if "universal-llm-trainer" in source:
        kw["loss_upcast"] = False  # nn.CrossEntropyLoss on model(...).logits, bf16 (univlt/models/*.py)
        assumed.append("bf16 cross-entropy (the trainer's own criterion on the logits)")
    chunks = int(entry.get("loss_chunks") or inferred.get("loss_chunks") or 1)
    if chunks > 1:
        kw["loss_chunks"] = chunks
    if entry.get("compile"):
        # torchtune's compile=True compiles each decoder layer and the loss. The loss is modelled when the
        # fp32 upcast happens inside it (chunked CE); the layers' saved set is compile_layers.
        if chunks > 1:
            kw["compile_loss"] = True
        kw["compile_layers"] = True
    return TrainingSettings(**kw), assumed, sorted(set(unmodelled))


def _litgpt(arch: Any, settings: TrainingSettings) -> tuple[TrainingSettings, str]:
    """What LitGPT's own model code and finetune scripts do, read from their source.

    GELU through F.gelu (tanh approximation), never the python gelu_new; attention expands grouped K/V
    into a copy per query head and reaches a fused SDPA kernel; the loss is chunked_cross_entropy on the
    bf16 logits in 128-token chunks (LoRA/QLoRA: the head runs per 128 positions of each row; full: the
    flattened b·s rows split by 128). With a bitsandbytes plugin (lightning's BitsandbytesPrecision,
    which quantises every nn.Linear, the head included) the scripts swap AdamW for bnb.optim.PagedAdamW
    (litgpt.utils.instantiate_bnb_optimizer): 32-bit states in CUDA managed memory.
    """
    activation = "gelu_tanh_fused" if arch.hidden_act.startswith("gelu") else None
    tokens_per_chunk = 128 * (settings.micro_batch_size if settings.method != "full" else 1)
    chunks = max(1, settings.micro_batch_size * (settings.seq_len or 0) // tokens_per_chunk)
    qlora = settings.method == "qlora"
    # LitGPT's GPT has its own lm_head parameter: convert_hf_checkpoint copies the embedding into it when the HF
    # checkpoint ties them (Gemma, Falcon), and its finetune scripts reject tie_embeddings.
    settings = replace(settings, attention="flash_attention_2", repeat_kv=True, quantize_head=qlora, loss_upcast=False,
                       loss_chunks=chunks, optimizer="paged_adamw" if qlora else settings.optimizer,
                       activation_fn=activation, tie_word_embeddings=False)
    return settings, ("LitGPT model code (F.gelu, fused SDPA, untied lm_head"
                            + (", 4-bit lm_head, bnb PagedAdamW" if qlora else "")
                            + f", bf16 cross-entropy in {chunks} chunks)")


def predict(entry: dict[str, Any]) -> Row:
    """Predict one entry; rows that cannot be predicted say why."""
    row = Row(id=entry["id"], model=entry["model"], method=entry["method"], kind=entry["kind"],
              metric=entry["metric"], measured_gib=float(entry["measured_gib"]))
    path = config_path(entry)
    if path is None:
        row.skipped = "no config for this model in fixtures/"
        return row
    config = json.loads(path.read_text())
    config.pop("_note", None)
    litgpt = "litgpt" in (entry.get("source") or "").lower()
    arch = read_architecture(config)
    settings, row.assumed, row.unmodelled = settings_for(entry, arch.model_type)
    if litgpt:
        settings, note = _litgpt(arch, settings)
        row.assumed.append(note)
    est = estimate(arch, build_inventory(config), settings)
    key = _METRIC.get(entry["metric"], "total")
    row.predicted_gib = getattr(est.per_gpu_bytes, key) / GIB
    row.error = row.predicted_gib / row.measured_gib - 1
    row.settings = est.to_dict()["settings"] | {"metric_term": key}
    return row


def load_entries() -> list[dict[str, Any]]:
    return json.loads((FIXTURES / "published_memory.json").read_text())["entries"]


def rows() -> list[Row]:
    return [predict(e) for e in load_entries()]


def median_abs_error(table: list[Row]) -> float:
    """Median |predicted/measured - 1| over the rows labelled measured."""
    errors = [abs(r.error) for r in table if r.kind == "measured" and r.error is not None]
    return statistics.median(errors)


def render(table: list[Row]) -> str:
    lines = [f"{'id':50} {'method':6} {'metric':21} {'meas GiB':>9} {'pred GiB':>9} {'error':>8}  settings not stated / not modelled"]
    for r in table:
        pred = f"{r.predicted_gib:9.2f}" if r.predicted_gib is not None else f"{'-':>9}"
        err = f"{r.error:+8.1%}" if r.error is not None else f"{'-':>8}"
        extra = "; ".join(r.assumed) if r.assumed else "all stated"
        if r.unmodelled:
            extra += " | not modelled: " + ", ".join(r.unmodelled)
        if r.skipped:
            extra = "SKIPPED: " + r.skipped
        kind = "" if r.kind == "measured" else f" [{r.kind}]"
        lines.append(f"{r.id[:50]:50} {r.method:6} {r.metric[:21]:21} {r.measured_gib:9.2f} {pred} {err}  {extra}{kind}")
    lines.append(f"median absolute error over {sum(1 for r in table if r.kind == 'measured' and r.error is not None)} "
                 f"measured entries: {median_abs_error(table):.1%}")
    return "\n".join(lines)


BASELINE = ROOT / "fixtures" / "published_baseline.json"
"""Each measured row's signed error when it was last accepted: tests/test_published.py fails on a row 3 points
worse or a higher median, so a change that helps one row and hurts five shows."""


def baseline(table: list[Row]) -> dict[str, Any]:
    """The errors to record: each measured row's, rounded to 0.1 point, and the median."""
    errors = {r.id: round(r.error * 100, 1) for r in table if r.kind == "measured" and r.error is not None}
    return {"median_abs_error_pct": round(median_abs_error(table) * 100, 2), "rows_error_pct": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--write-baseline", action="store_true", help=f"write {BASELINE.name} from this run")
    args = parser.parse_args()
    table = rows()
    if args.write_baseline:
        BASELINE.write_text(json.dumps(baseline(table), indent=1, sort_keys=True) + "\n")
    if args.json:
        print(json.dumps([r.__dict__ for r in table], indent=1))
    else:
        print(render(table))


if __name__ == "__main__":
    main()
