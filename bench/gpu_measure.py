"""Measured peak GPU memory and step time of real training steps, and hfmem's prediction for each.

    python bench/gpu_measure.py --measure --out gpu.json          # on a CUDA GPU: train every case, record figures
    python bench/gpu_measure.py --score fixtures/gpu_measured.json  # anywhere: the hfmem CLI against a recorded run
    python bench/gpu_measure.py --dry-run                           # anywhere: the measuring loop on tiny CPU models

Each case builds a randomly initialised model from a fixture config (no weights are downloaded) with
transformers (+ PEFT for LoRA, + bitsandbytes 4-bit for QLoRA) and trains it for three steps, either in a
plain loop (forward, backward, AdamW step, zero_grad(set_to_none=True), the loss dropped before the next
step, as transformers' Trainer does) or through transformers.Trainer itself. Steps 2 and 3, after the
optimizer states exist, are measured phase by phase with torch.cuda.max_memory_allocated: what is live
before the forward, the forward's peak and what it leaves for backward, the backward's peak and the
optimizer step's. Measuring needs no hfmem import, so it runs with whatever transformers the GPU machine
has; scoring happens wherever hfmem is installed, from the recorded settings.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HUB = ROOT / "fixtures" / "hub"
GIB = 1 << 30


@dataclass(frozen=True)
class Case:
    """One training run, in hfmem's setting names, so the recorded row is also the question hfmem answers."""

    model: str
    method: str
    micro_batch_size: int
    seq_len: int
    dtype: str = "bf16-pure"
    gradient_checkpointing: str = "off"
    lora_rank: int = 8
    lora_targets: tuple[str, ...] = ("q_proj", "v_proj")
    lora_dropout: float = 0.0
    kbit_preparation: bool = False
    base_quantization: str | None = None
    attention: str = "sdpa"
    padding: bool = False
    eval_batch_size: int | None = None
    loop: str = "plain"

    @property
    def name(self) -> str:
        parts = [self.model.split("/")[-1], self.method, self.dtype, f"b{self.micro_batch_size}", f"s{self.seq_len}"]
        if self.method != "full":
            parts.append(f"r{self.lora_rank}:{'+'.join(t.removesuffix('_proj') for t in self.lora_targets)}")
        parts += ["ckpt"] * (self.gradient_checkpointing != "off")
        parts += [f"drop{self.lora_dropout}"] * bool(self.lora_dropout)
        parts += ["kbit-prep"] * self.kbit_preparation + [self.base_quantization or ""] * bool(self.base_quantization)
        parts += [self.attention] * (self.attention != "sdpa") + ["padded"] * self.padding
        parts += [f"eval{self.eval_batch_size}"] * bool(self.eval_batch_size)
        parts += ["trainer"] * (self.loop == "trainer")
        return " ".join(parts)

    def settings(self) -> dict[str, Any]:
        """The hfmem settings that describe this run (every one stated, none left to a default)."""
        stated = {"method": self.method, "dtype": self.dtype, "micro_batch_size": self.micro_batch_size,
                  "seq_len": self.seq_len, "gradient_checkpointing": self.gradient_checkpointing,
                  "attention": self.attention, "optimizer": "adamw_torch", "loss_upcast": True,
                  "padding_mask": self.padding}
        if self.method != "full":
            stated |= {"lora_rank": self.lora_rank, "lora_targets": self.lora_targets,
                       "lora_dropout": self.lora_dropout, "adapter_dtype": "fp32"}
        if self.kbit_preparation:
            stated["kbit_upcast"] = True
        if self.eval_batch_size:
            stated["eval_batch_size"] = self.eval_batch_size
        if self.base_quantization:
            stated["base_quantization"] = self.base_quantization
        return stated


LLAMA2_7B, MISTRAL_7B, LLAMA31_8B = "meta-llama/Llama-2-7b-hf", "mistralai/Mistral-7B-v0.1", "meta-llama/Llama-3.1-8B"
GEMMA_2B, PHI_2, QWEN25_7B = "google/gemma-2b", "microsoft/phi-2", "Qwen/Qwen2.5-7B"
QWEN3_8B, GEMMA2_9B, MIXTRAL, QWEN3_MOE = "Qwen/Qwen3-8B", "google/gemma-2-9b", "mistralai/Mixtral-8x7B-v0.1", \
    "Qwen/Qwen3-30B-A3B"
LLAMA32_1B, QWEN25_05B, QWEN25_15B = "meta-llama/Llama-3.2-1B-Instruct", "Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-1.5B"
ALL_LINEAR = ("all-linear",)
CASES = (
    # LoRA r=8 on q and v, pure bf16, no checkpointing, ~1k tokens: micro-batch 1, 2, 4
    Case(LLAMA2_7B, "lora", 1, 1024, eval_batch_size=8),
    *(Case(LLAMA2_7B, "lora", mb, 1024) for mb in (2, 4)),
    Case(LLAMA2_7B, "lora", 4, 1024, lora_dropout=0.1),
    *(Case(MISTRAL_7B, "lora", mb, 1024) for mb in (1, 4)),
    Case(GEMMA_2B, "lora", 1, 1024, eval_batch_size=8),
    Case(GEMMA_2B, "lora", 4, 1024),
    *(Case(PHI_2, "lora", mb, 1024) for mb in (1, 4)),
    Case(LLAMA31_8B, "lora", 1, 4096, lora_rank=16, lora_targets=ALL_LINEAR),
    Case(LLAMA31_8B, "lora", 4, 2048, lora_rank=16, lora_targets=ALL_LINEAR, gradient_checkpointing="full"),
    Case(QWEN25_7B, "lora", 2, 2048, lora_rank=16, lora_targets=ALL_LINEAR, gradient_checkpointing="full"),
    Case(LLAMA2_7B, "lora", 1, 1024, attention="eager"),
    Case(LLAMA2_7B, "lora", 4, 1024, padding=True),
    Case(QWEN3_8B, "lora", 2, 2048),
    Case(GEMMA2_9B, "lora", 1, 2048, eval_batch_size=4),
    Case(MIXTRAL, "lora", 1, 1024, eval_batch_size=4),
    Case(QWEN3_MOE, "lora", 1, 2048, eval_batch_size=2),
    # full fine-tunes
    Case(LLAMA32_1B, "full", 2, 2048, eval_batch_size=8),
    Case(LLAMA32_1B, "full", 2, 2048, dtype="amp-bf16", eval_batch_size=8),
    Case(LLAMA32_1B, "full", 2, 4096, gradient_checkpointing="full"),
    Case(QWEN25_05B, "full", 2, 2048, eval_batch_size=8),
    Case(QWEN25_15B, "full", 4, 2048, gradient_checkpointing="full"),
    Case(GEMMA_2B, "full", 1, 2048),
    # transformers.Trainer (bf16=True autocast over the bf16-loaded model)
    Case(LLAMA2_7B, "lora", 4, 1024, dtype="bf16", eval_batch_size=8, loop="trainer"),
    Case(LLAMA32_1B, "full", 2, 2048, dtype="amp-bf16", loop="trainer"),
    # QLoRA (bitsandbytes nf4, double quantisation), with and without PEFT's kbit preparation
    *(Case(LLAMA2_7B, "qlora", mb, 1024) for mb in (1, 4)),
    Case(LLAMA2_7B, "qlora", 1, 1024, kbit_preparation=True, gradient_checkpointing="full", eval_batch_size=8),
    Case(LLAMA2_7B, "qlora", 4, 1024, kbit_preparation=True, gradient_checkpointing="full"),
    Case(LLAMA2_7B, "lora", 1, 1024, base_quantization="int8"),
    Case(LLAMA31_8B, "qlora", 2, 2048, lora_rank=16, lora_targets=ALL_LINEAR, gradient_checkpointing="full"),
)


def config_of(model: str) -> dict[str, Any]:
    """A fixture model's config.json, as the Hub serves it."""
    config = json.loads((HUB / model / "config.json").read_text())
    config.pop("_note", None)
    return config


# ---------------------------------------------------------------- measuring (torch, transformers, peft only)

def _hf_config(config: dict[str, Any]) -> Any:
    import transformers

    data = {k: v for k, v in config.items() if k not in {"architectures", "auto_map", "torch_dtype", "dtype"}}
    hf_config = transformers.AutoConfig.for_model(data.pop("model_type"), **data)
    hf_config.use_cache = False
    return hf_config


def checkpoint_for(config: dict[str, Any], device: str, checkpoints: dict[str, str]) -> str:
    """A bf16 random checkpoint saved once per model: bitsandbytes quantises while it loads real weights."""
    import torch
    import transformers

    key = json.dumps(config, sort_keys=True)
    if key not in checkpoints:
        checkpoints[key] = tempfile.mkdtemp(prefix="hfmem-ckpt-")
        with torch.device(device):
            dense = transformers.AutoModelForCausalLM.from_config(_hf_config(config), dtype=torch.bfloat16)
        dense.save_pretrained(checkpoints[key])
        del dense
        release(device)
    return checkpoints[key]


def release(device: str) -> None:
    """Free what earlier cases left (PEFT and Trainer objects hold reference cycles) before the next is measured."""
    import gc

    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def build(case: Case, config: dict[str, Any], device: str, checkpoint: str | None) -> Any:
    """The model as the case trains it: random weights, the case's attention, adapters / quantised layers."""
    import torch
    import transformers

    torch.manual_seed(0)
    if checkpoint:
        bits = case.base_quantization or "nf4"
        quant = (transformers.BitsAndBytesConfig(load_in_8bit=True) if bits == "int8" else
                 transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                 bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16))
        model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, quantization_config=quant,
                                                                  dtype=torch.bfloat16, device_map={"": device},
                                                                  attn_implementation=case.attention)
    else:
        weights_dtype = torch.float32 if case.dtype in {"amp-bf16", "fp32"} else torch.bfloat16
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(_hf_config(config), dtype=weights_dtype,
                                                                  attn_implementation=case.attention)
    if checkpoint and case.kbit_preparation:
        import peft

        model = peft.prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=case.gradient_checkpointing != "off",
            gradient_checkpointing_kwargs={"use_reentrant": False})
    elif case.gradient_checkpointing != "off":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if case.method != "full":
            model.enable_input_require_grads()
    if case.method != "full":
        import peft

        targets = "all-linear" if case.lora_targets == ALL_LINEAR else list(case.lora_targets)
        model = peft.get_peft_model(model, peft.LoraConfig(r=case.lora_rank, lora_alpha=2 * case.lora_rank,
                                                           target_modules=targets, lora_dropout=case.lora_dropout,
                                                           task_type="CAUSAL_LM"))
    model.train()
    return model


class Meter:
    """Phase-by-phase peaks of torch.cuda's allocator (zeros on a CPU, where nothing is measured)."""

    def __init__(self, device: str) -> None:
        import torch

        self.cuda = torch.cuda if device == "cuda" else None
        self.figures: dict[str, int] = {}

    def live(self) -> int:
        if self.cuda is None:
            return 0
        self.cuda.synchronize()
        return self.cuda.memory_allocated()

    def start(self) -> None:
        if self.cuda is not None:
            self.cuda.synchronize()
            self.cuda.reset_peak_memory_stats()

    def keep(self, name: str, value: int) -> None:
        self.figures[name] = max(self.figures.get(name, 0), value)

    def end(self, phase: str) -> None:
        """Record the phase's peak allocated and reserved bytes, and what it leaves live."""
        if self.cuda is None:
            return
        self.cuda.synchronize()
        self.keep(f"{phase}_peak", self.cuda.max_memory_allocated())
        self.keep("load_reserved_peak" if phase == "load" else "reserved_peak", self.cuda.max_memory_reserved())
        self.keep(f"after_{phase}", self.cuda.memory_allocated())


def _plain_loop(case: Case, model: Any, batch: dict[str, Any], meter: Meter, steps: int,
                evaluation: dict[str, Any] | None) -> list[float]:
    """Training steps; then, with an evaluation batch, one no-grad forward of it (phase "eval") as a Trainer's
    evaluation loop runs it between steps: model.eval(), the optimizer states alive, the loss computed."""
    import torch

    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    amp = torch.autocast(device_type=batch["input_ids"].device.type, dtype=torch.bfloat16,
                         enabled=case.dtype != "bf16-pure")
    seconds = []
    for step in range(steps):
        measured = step > 0
        started = time.perf_counter()
        if measured:
            meter.keep("before_forward", meter.live())
            meter.start()
        with amp:
            loss = model(**batch).loss
        if measured:
            meter.end("forward")
            meter.start()
        loss.backward()
        del loss
        if measured:
            meter.end("backward")
            meter.start()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if measured:
            meter.end("optimizer")
        meter.live()
        seconds.append(time.perf_counter() - started)
    if evaluation:
        model.eval()
        meter.start()
        with torch.no_grad(), amp:
            loss = model(**evaluation).loss
        del loss
        meter.end("eval")
        model.train()
    del optimizer
    return seconds[1:]


def _trainer_loop(case: Case, model: Any, batch: dict[str, Any], meter: Meter, steps: int,
                  evaluation: dict[str, Any] | None) -> list[float]:
    """transformers.Trainer's own step; the peak is reset when step 2 begins and read when training ends; with an
    evaluation batch, Trainer.evaluate then runs it (phase "eval")."""
    import transformers

    seconds: list[float] = []

    class Peaks(transformers.TrainerCallback):
        started = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == 1:
                meter.keep("before_forward", meter.live())
                meter.start()
            self.started = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            meter.live()
            seconds.append(time.perf_counter() - self.started)

    def rows_of(tensors: dict[str, Any]) -> list[dict[str, Any]]:
        columns = {name: tensor.cpu() for name, tensor in tensors.items()}
        return [{name: tensor[i] for name, tensor in columns.items()} for i in range(len(columns["input_ids"]))]

    rows = rows_of(batch) * steps
    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(
            output_dir=out, per_device_train_batch_size=case.micro_batch_size, max_steps=steps, learning_rate=1e-5,
            per_device_eval_batch_size=case.eval_batch_size or 8,
            bf16=True, optim="adamw_torch", gradient_checkpointing=case.gradient_checkpointing != "off",
            gradient_checkpointing_kwargs={"use_reentrant": False}, save_strategy="no", report_to=[],
            logging_strategy="no", dataloader_num_workers=0, use_cpu=batch["input_ids"].device.type == "cpu")
        trainer = transformers.Trainer(model=model, args=args, train_dataset=rows, callbacks=[Peaks()])
        trainer.train()
        meter.end("trainer")
        if evaluation:
            meter.start()
            trainer.evaluate(eval_dataset=rows_of(evaluation))
            meter.end("eval")
        del trainer
    return seconds[1:]


def batch_for(case: Case, vocab_size: int, device: str, rows: int | None = None) -> dict[str, Any]:
    """Random token ids as input and labels (`rows` of them, else a micro-batch); padded cases mask the last
    quarter of the first sequence."""
    import torch

    ids = torch.randint(0, vocab_size, (rows or case.micro_batch_size, case.seq_len), device=device)
    if not case.padding:
        return {"input_ids": ids, "labels": ids}
    mask = torch.ones_like(ids)
    mask[0, -case.seq_len // 4:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def measure(case: Case, config: dict[str, Any], device: str, checkpoints: dict[str, str],
            steps: int = 3) -> dict[str, Any]:
    """Bytes at each phase (load, then steps 2..steps) and the steps' mean wall time; zeros on a CPU.

    `leftover` is what is still allocated when the case begins, once earlier cases are freed: torch's cuBLAS
    workspaces, made at the first matmul and kept for the process (64 MiB on an H200). A run has them too, so
    the figures include them, as they include them in the first case, where they appear mid-step."""
    meter = Meter(device)
    release(device)
    meter.keep("leftover", meter.live())
    quantised = case.method == "qlora" or case.base_quantization is not None
    checkpoint = checkpoint_for(config, device, checkpoints) if quantised else None
    meter.start()
    model = build(case, config, device, checkpoint)
    meter.end("load")
    loop = _trainer_loop if case.loop == "trainer" else _plain_loop
    evaluation = batch_for(case, config["vocab_size"], device, case.eval_batch_size) if case.eval_batch_size else None
    seconds = loop(case, model, batch_for(case, config["vocab_size"], device), meter, steps, evaluation)
    figures = meter.figures
    training = {"forward_peak", "backward_peak", "optimizer_peak", "trainer_peak"}
    figures["peak"] = max((v for k, v in figures.items() if k in training), default=0)
    del model
    release(device)
    return {"bytes": figures, "step_seconds": statistics.mean(seconds) if seconds else None}


def versions() -> dict[str, str]:
    """What ran the measurement: the numbers hfmem is scored against depend on these libraries."""
    import importlib.metadata as md

    import torch

    found = {"python": sys.version.split()[0], "cuda": str(torch.version.cuda)}
    for name in ("torch", "transformers", "peft", "accelerate", "bitsandbytes"):
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            found[name] = "absent"
    return found


def run_cases(cases: list[tuple[Case, dict[str, Any]]], device: str, out: Path | None) -> list[dict[str, Any]]:
    """Measure every case, writing the file after each, so that a run cut short keeps what it measured."""
    import torch

    header = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (dry run)",
              "measured_on": time.strftime("%Y-%m-%d"), "versions": versions(), "script": "bench/gpu_measure.py"}
    if device == "cuda":  # what the CUDA context takes before any tensor exists (hfmem's cuda_context term)
        free, total = torch.cuda.mem_get_info()
        header |= {"device_total_bytes": total, "device_used_before_tensors_bytes": total - free}
    rows: list[dict[str, Any]] = []
    checkpoints: dict[str, str] = {}
    for case, config in cases:
        row: dict[str, Any] = {"case": case.name, "model": case.model, "loop": case.loop,
                               "kbit_preparation": case.kbit_preparation, "settings": case.settings()}
        started = time.perf_counter()
        try:
            row |= measure(case, config, device, checkpoints)
        except ImportError as exc:  # bitsandbytes or peft missing on this machine
            row["skipped"] = f"{type(exc).__name__}: {exc}"[:300]
        except Exception as exc:  # a CUDA OOM or a library error: keep the other cases
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        row["seconds"] = round(time.perf_counter() - started, 1)
        rows.append(row)
        peak = row.get("bytes", {}).get("peak")
        print(f"{case.name:60} {row['seconds']:6.1f}s  " + (f"peak {peak / GIB:7.2f} GiB" if peak else
                                                           row.get("skipped") or row.get("error") or "-"), flush=True)
        if out:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(header | {"rows": rows}, indent=1) + "\n")
    return rows


# ---------------------------------------------------------------- scoring (hfmem)

def argv(row: dict[str, Any]) -> list[str]:
    """The `hfmem` command line that asks for a recorded row's run: every setting as its flag, JSON out."""
    sys.path[:0] = [str(ROOT)]
    from hfmem.cli.options import settings_flags
    from hfmem.memory.settings import TrainingSettings

    names = {flag.param: flag.names[0] for flag in settings_flags(TrainingSettings)}
    args = [str(HUB / row["model"] / "config.json")]
    for param, value in row["settings"].items():
        on, _, off = names[param].partition("/")
        if isinstance(value, bool):
            args.append(on if value else off)
        else:
            args += [on, ",".join(value) if isinstance(value, list | tuple) else str(value)]
    return [*args, "--format", "json"]


def predict(row: dict[str, Any], gpu: str) -> dict[str, float]:
    """hfmem's figures for a recorded row on `gpu`, from the CLI's own entry point run in-process: the training
    step's peak allocated bytes, the evaluation phase's (0 without one; no context or fragmentation added, as
    max_memory_allocated counts neither) and the step seconds."""
    sys.path[:0] = [str(ROOT / "bench")]
    from published import cli_report

    from hfmem.memory.record import cells, estimates

    report = cli_report([*argv(row), "--gpu", gpu, "--fragmentation", "0", "--cuda-context-gib", "0"])
    (estimate,) = estimates(report)
    (cell,) = cells(report)
    per_gpu = estimate["per_gpu_bytes"]
    return {"peak": per_gpu["allocated_peak"], "eval_peak": per_gpu["evaluation"], "seconds": cell["time"]["seconds"]}


def score(path: Path) -> dict[str, dict[str, float]]:
    """Each measured row's relative errors ("peak": the training step's allocated peak, "eval_peak" where the row
    evaluates, "seconds": the step time), printed as a table. hfmem's time model is not fitted to these times:
    they show its error."""
    data = json.loads(path.read_text())
    gpu = data["device"].split()[-1].lower()  # "NVIDIA H200" is the catalogue's h200
    errors: dict[str, dict[str, float]] = {}
    print(f"{data['device']}; " + ", ".join(f"{k} {v}" for k, v in data["versions"].items()))
    print(f"{'case':66} {'GiB':>6} {'hfmem':>6} {'error':>6}  {'eval':>6} {'hfmem':>6} {'error':>6}  "
          f"{'step s':>6} {'hfmem':>6} {'error':>6}")
    for row in data["rows"]:
        if "bytes" not in row:
            print(f"{row['case']:66} {row.get('skipped') or row.get('error')}")
            continue
        predicted = predict(row, gpu)
        measured = row["bytes"] | {"seconds": row["step_seconds"]}
        errors[row["case"]] = {k: predicted[k] / measured[k] - 1 for k in predicted if measured.get(k)}
        cells = []
        for key, unit in (("peak", GIB), ("eval_peak", GIB), ("seconds", 1)):
            found = key in errors[row["case"]]
            cells.append(f"{measured[key] / unit:6.2f} {predicted[key] / unit:6.2f} {errors[row['case']][key]:+6.1%}"
                         if found else f"{'':20}")
        print(f"{row['case']:66} " + "  ".join(cells))
    for key, label in (("peak", "training step peak"), ("eval_peak", "evaluation peak"), ("seconds", "step time")):
        found = [e[key] for e in errors.values() if key in e]
        print(f"{label}: median |error| {statistics.median(abs(e) for e in found):.1%} over {len(found)} rows, "
              f"signed median {statistics.median(found):+.1%}, under by more than 5%: {sum(e < -0.05 for e in found)}")
    return errors


def dry_run_cases() -> list[tuple[Case, dict[str, Any]]]:
    """Scaled-down versions of the cases (tests/tiny_models.py) that run on a CPU in seconds."""
    sys.path[:0] = [str(ROOT / "tests")]
    from tiny_models import tiny_config

    config = tiny_config("meta-llama/Meta-Llama-3-8B", 2)
    return [(Case("tiny-llama", "full", 2, 64, eval_batch_size=4), config),
            (Case("tiny-llama", "lora", 2, 64, lora_dropout=0.1), config),
            (Case("tiny-llama", "lora", 2, 64, dtype="bf16", padding=True, eval_batch_size=3, loop="trainer"), config),
            (Case("tiny-llama", "lora", 2, 64, attention="eager", padding=True), config)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", action="store_true", help="train every case on this machine's CUDA GPU")
    parser.add_argument("--dry-run", action="store_true", help="tiny models on CPU: exercise the loop, measure nothing")
    parser.add_argument("--only", help="measure only the cases whose name contains this")
    parser.add_argument("--out", type=Path, help="write the measured rows as JSON here (after every case)")
    parser.add_argument("--score", type=Path, help="print hfmem's prediction against a recorded run")
    args = parser.parse_args()
    if args.score:
        score(args.score)
        return
    if not (args.measure or args.dry_run):
        parser.error("say --measure (on a GPU), --dry-run or --score FILE")
    import torch

    if args.measure and not torch.cuda.is_available():
        sys.exit("gpu_measure: no CUDA device here (use --dry-run to check the script on a CPU)")
    if args.dry_run:
        run_cases(dry_run_cases(), "cpu", args.out)
        return
    cases = [(c, config_of(c.model)) for c in CASES if not args.only or args.only in c.name]
    run_cases(cases, "cuda", args.out)


if __name__ == "__main__":
    main()
