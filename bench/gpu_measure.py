"""Predicted vs measured peak GPU memory for real training steps, for a machine with a CUDA GPU.

    python bench/gpu_measure.py --out bench/results/gpu_measure.json   # on a GPU: measure every case
    python bench/gpu_measure.py --dry-run                              # anywhere: tiny models on CPU, no figures

Each case builds a randomly initialised model from a fixture config (no weights are downloaded),
trains it for three steps with transformers (+ PEFT for LoRA, + bitsandbytes for QLoRA when it
imports) and records torch.cuda.max_memory_allocated / max_memory_reserved over steps 2-3, after the
optimizer states exist. hfmem predicts the same settings; the table and the JSON give both and the
error. The loop drops each step's loss before the next, as transformers' Trainer does.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from hfmem.model.architecture import read_architecture  # noqa: E402
from hfmem.memory.estimate import estimate  # noqa: E402
from hfmem.model.meta import build_inventory  # noqa: E402
from hfmem.memory.settings import TrainingSettings  # noqa: E402
from hfmem.units import GIB  # noqa: E402

HUB = ROOT / "fixtures" / "hub"


@dataclass(frozen=True)
class Case:
    """One training run: a fixture model and the hfmem settings that describe the loop below."""

    model: str
    method: str
    dtype: str = "bf16-pure"
    micro_batch_size: int = 2
    seq_len: int = 2048
    gradient_checkpointing: str = "off"
    optimizer: str = "adamw_foreach"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        ckpt = "+ckpt" if self.gradient_checkpointing != "off" else ""
        return f"{self.model.split('/')[-1]} {self.method} {self.dtype} b{self.micro_batch_size} s{self.seq_len}{ckpt}"

    def settings(self) -> TrainingSettings:
        return TrainingSettings(method=self.method, dtype=self.dtype, micro_batch_size=self.micro_batch_size,
                                seq_len=self.seq_len, gradient_checkpointing=self.gradient_checkpointing,
                                optimizer=self.optimizer, attention="sdpa", lora_rank=16, lora_targets=("all-linear",),
                                **self.extra)


LLAMA_1B, QWEN_05B = "meta-llama/Llama-3.2-1B-Instruct", "Qwen/Qwen2.5-0.5B"
CASES = (
    Case(LLAMA_1B, "full"),
    Case(LLAMA_1B, "full", dtype="amp-bf16"),
    Case(LLAMA_1B, "full", gradient_checkpointing="full", seq_len=4096),
    Case(LLAMA_1B, "lora"),
    Case(LLAMA_1B, "lora", gradient_checkpointing="full", micro_batch_size=4),
    Case(LLAMA_1B, "qlora", gradient_checkpointing="full", optimizer="paged_adamw_8bit"),
    Case(QWEN_05B, "full"),
    Case(QWEN_05B, "lora", micro_batch_size=4),
    Case(QWEN_05B, "qlora", gradient_checkpointing="full", micro_batch_size=4, optimizer="paged_adamw_8bit"),
)


def config_of(model: str) -> dict[str, Any]:
    config = json.loads((HUB / model / "config.json").read_text())
    config.pop("_note", None)
    return config


def predict(case: Case, config: dict[str, Any]) -> dict[str, float]:
    est = estimate(read_architecture(config), build_inventory(config), case.settings())
    peaks = est.per_gpu_bytes
    return {"allocated_peak": peaks.allocated_peak / GIB, "reserved_peak": peaks.reserved_peak / GIB}


def build(case: Case, config: dict[str, Any], device: str) -> Any:
    """The model as the case trains it: random weights, sdpa attention, adapters / 4-bit layers as stated."""
    import torch
    import transformers

    data = {k: v for k, v in config.items() if k not in {"architectures", "auto_map"}}
    hf_config = transformers.AutoConfig.for_model(data.pop("model_type"), **data)
    hf_config.use_cache = False
    weights_dtype = torch.float32 if case.dtype in {"amp-bf16", "fp32"} else torch.bfloat16
    torch.manual_seed(0)
    if case.method == "qlora":
        with tempfile.TemporaryDirectory() as tmp:  # bitsandbytes quantises while loading a checkpoint
            transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.bfloat16).save_pretrained(tmp)
            quant = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                    bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)
            model = transformers.AutoModelForCausalLM.from_pretrained(
                tmp, quantization_config=quant, dtype=torch.bfloat16, attn_implementation="sdpa", device_map={"": device})
    else:
        model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=weights_dtype, attn_implementation="sdpa")
        model.to(device)
    if case.gradient_checkpointing != "off":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if case.method in {"lora", "qlora"}:
        import peft

        model = peft.get_peft_model(model, peft.LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                                           lora_dropout=0.0, task_type="CAUSAL_LM"))
    model.train()
    return model


def optimizer_for(case: Case, params: list[Any]) -> Any:
    import torch

    if case.optimizer == "paged_adamw_8bit":
        import bitsandbytes as bnb

        return bnb.optim.PagedAdamW8bit(params, lr=1e-5)
    return torch.optim.AdamW(params, lr=1e-5, foreach=True)


def measure(case: Case, config: dict[str, Any], device: str, steps: int = 3) -> dict[str, float] | None:
    """Peak allocated / reserved GiB over steps 2..steps (None on CPU, where nothing is measured)."""
    import torch

    model = build(case, config, device)
    optimizer = optimizer_for(case, [p for p in model.parameters() if p.requires_grad])
    ids = torch.randint(0, config["vocab_size"], (case.micro_batch_size, case.seq_len), device=device)
    amp = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=case.dtype == "amp-bf16")
    for step in range(steps):
        if step == 1 and device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        with amp:
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        del loss
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    result = {"allocated_peak": torch.cuda.max_memory_allocated() / GIB,
              "reserved_peak": torch.cuda.max_memory_reserved() / GIB}
    del model, optimizer
    torch.cuda.empty_cache()
    return result


def dry_run_cases() -> list[tuple[Case, dict[str, Any]]]:
    """Scaled-down versions of the cases (tests/tiny_models.py) that run on a CPU in seconds."""
    from tiny_models import tiny_config

    config = tiny_config("meta-llama/Meta-Llama-3-8B", 2)
    return [(Case("tiny-llama", method, micro_batch_size=2, seq_len=64), config) for method in ("full", "lora")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    parser.add_argument("--dry-run", action="store_true", help="tiny models on CPU: exercise the code, measure nothing")
    args = parser.parse_args()
    import torch

    device = "cuda" if torch.cuda.is_available() and not args.dry_run else "cpu"
    if device == "cpu" and not args.dry_run:
        sys.exit("gpu_measure: no CUDA device here (use --dry-run to check the script on a CPU)")
    cases = dry_run_cases() if args.dry_run else [(c, config_of(c.model)) for c in CASES]
    rows = []
    print(f"{'case':48} {'pred alloc':>10} {'meas alloc':>10} {'err':>7} {'pred resv':>10} {'meas resv':>10} {'err':>7}")
    for case, config in cases:
        row: dict[str, Any] = {"case": case.name, "settings": case.settings().to_dict(),
                               "predicted_gib": predict(case, config)}
        started = time.perf_counter()
        try:
            row["measured_gib"] = measure(case, config, device)
        except ImportError as exc:  # bitsandbytes or peft missing on this machine
            row["skipped"] = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # a CUDA OOM or a library error: keep the other cases
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        row["seconds"] = round(time.perf_counter() - started, 1)
        rows.append(row)
        pred, meas = row["predicted_gib"], row.get("measured_gib")
        cells = [f"{pred['allocated_peak']:10.2f}", f"{meas['allocated_peak']:10.2f}" if meas else f"{'-':>10}",
                 f"{pred['allocated_peak'] / meas['allocated_peak'] - 1:+7.1%}" if meas else f"{'-':>7}",
                 f"{pred['reserved_peak']:10.2f}", f"{meas['reserved_peak']:10.2f}" if meas else f"{'-':>10}",
                 f"{pred['reserved_peak'] / meas['reserved_peak'] - 1:+7.1%}" if meas else f"{'-':>7}"]
        print(f"{case.name[:48]:48} " + " ".join(cells) + (f"  {row.get('skipped') or row.get('error')}"
                                                           if not meas and device == "cuda" else ""))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (dry run)",
                                        "torch": torch.__version__, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
