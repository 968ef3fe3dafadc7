"""One real training step of a tiny model on CPU under LiveBytes: forward, loss, backward, AdamW step, the peak.

The first step creates the optimizer's states (AdamW initialises them lazily); the second is the one measured,
as every later step of a run looks like it: states alive, gradients set to None after each step (the
Trainer's default), the step's own outputs dropped before the next one (`model(ids, labels=ids).loss` keeps
only the loss).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from live_peak import LiveBytes
from saved_activations import build_model, sdpa_backends
from tiny_models import tiny_config

from hfmem.memory.activations import ActivationEstimate, estimate_activations
from hfmem.memory.breakdown import MemoryBreakdown, combine
from hfmem.memory.estimate import Context, activation_settings, state_for
from hfmem.memory.settings import TrainingSettings
from hfmem.model.architecture import Architecture, read_architecture
from hfmem.model.inventory import Inventory
from hfmem.model.meta import build_inventory

LORA_TARGETS = ("q_proj", "v_proj")


@dataclass
class StepPeak:
    """The measured peak of one step, when it happened, and what was alive then."""

    peak: int
    when: str
    breakdown: dict[str, int]
    backends: list[int]
    """The SDPA backends torch chose (0 math, 1 flash), one per attention call of the measured step."""


def lora_model(model_id: str, layers: int, attention: str, dropout: float,
               targets: tuple[str, ...] = LORA_TARGETS, **extra: Any) -> Any:
    """A tiny bf16 model with a real PEFT LoRA (r=8, on q_proj and v_proj unless `targets` says otherwise; fp32
    adapters, PEFT's default)."""
    import peft

    model = build_model(tiny_config(model_id, layers, **extra), attention, torch.bfloat16)
    modules = "all-linear" if targets == ("all-linear",) else list(targets)
    config = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=dropout, target_modules=modules)
    wrapped = peft.get_peft_model(model, config)
    wrapped.train()
    return wrapped


@dataclass(frozen=True)
class Case:
    """One training step: model, attention, method and the settings that shape its peak."""

    model: str
    attention: str = "sdpa"
    method: str = "lora"
    dropout: float = 0.0
    b: int = 2
    s: int = 128
    checkpointing: bool = False
    padding: int | None = None
    """Padded positions in the first sample (None: no attention mask)."""
    layers: int = 2
    extra: tuple[tuple[str, Any], ...] = ()
    """Config overrides."""
    hold_outputs: bool = False
    """The loop keeps the model's output through the backward (not a setting of hfmem: its logits are unmodelled)."""
    targets: tuple[str, ...] = LORA_TARGETS
    """The LoRA target modules ("all-linear": PEFT's, fused MoE expert tensors included)."""

    def __str__(self) -> str:
        flags = [self.model.split("/")[1], self.attention, self.method, f"d{self.dropout}", f"b{self.b}",
                 f"s{self.s}", f"L{self.layers}", "ckpt" if self.checkpointing else "",
                 "pad" if self.padding else "", "held" if self.hold_outputs else "",
                 "" if self.targets == LORA_TARGETS else "+".join(self.targets),
                 "-".join(f"{k}{v}" for k, v in self.extra)]
        return "-".join(f for f in flags if f)


def run_case(case: Case) -> tuple[StepPeak, Any]:
    """Measure the case's training step and predict it with hfmem (its MemoryBreakdown, as on CPU)."""
    config = tiny_config(case.model, case.layers, **dict(case.extra))
    if case.method == "lora":
        model = lora_model(case.model, case.layers, case.attention, case.dropout, case.targets, **dict(case.extra))
    else:
        model = build_model(config, case.attention)
    if case.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        if case.method == "lora":
            model.enable_input_require_grads()  # what the Trainer does for PEFT models with checkpointing
    measured = measure_step(model, case.b, case.s, padding=case.padding, hold_outputs=case.hold_outputs)
    math_only = case.attention == "sdpa" and measured.backends and not any(measured.backends)
    lora = {"lora_rank": 8, "lora_targets": case.targets, "lora_dropout": case.dropout} if case.method == "lora" else {}
    settings = TrainingSettings(
        method=case.method, dtype="bf16-pure", optimizer="adamw", micro_batch_size=case.b, seq_len=case.s,
        attention="sdpa_math" if math_only else case.attention,
        gradient_checkpointing="full" if case.checkpointing else "off", padding_mask=case.padding is not None, **lora)
    return measured, cpu_prediction(config, settings)


def measure_step(model: Any, batch: int, seq: int, *, seed: int = 0, padding: int | None = None,
                 hold_outputs: bool = False) -> StepPeak:
    """The peak of live bytes over the second of two training steps (fused AdamW, gradients set to None).

    padding: pass an attention mask, as data collators do, with this many padded positions at the end of the
    first sample (0: a mask of ones); hold_outputs: the loop keeps the model's output (its logits) through the
    backward, as `outputs = model(**batch); outputs.loss.backward()` does.
    """
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, fused=True)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(seed))
    inputs = {"input_ids": ids, "labels": ids}
    if padding is not None:
        mask = torch.ones_like(ids)
        mask[0, seq - padding:] = 0
        inputs["attention_mask"] = mask
    tracker = LiveBytes()
    head = model.get_output_embeddings()
    hooks = [head.register_forward_hook(lambda *_: setattr(tracker, "phase_name", "loss"))]
    with tracker:
        tracker.adopt(list(model.parameters()) + list(model.buffers()), "weights")
        tracker.adopt(inputs, "inputs")
        hooks += tracker.follow_modules(model)
        for step in range(2):
            if step == 1:
                tracker.reset_peak()
            with sdpa_backends() as backends:
                _train_step(model, optimizer, inputs, tracker, hold_outputs)
            tracker.mark([p.grad for p in trainable], "gradients")
            tracker.mark([optimizer.state[p] for p in trainable], "optimizer_states")
            optimizer.zero_grad(set_to_none=True)
    for h in hooks:
        h.remove()
    return StepPeak(tracker.peak, tracker.peak_op, tracker.breakdown(), backends)


def _train_step(model: Any, optimizer: torch.optim.Optimizer, inputs: dict[str, torch.Tensor], tracker: LiveBytes,
                hold_outputs: bool) -> None:
    """Forward with the loss, backward, optimizer step (nothing of the step is referenced after it)."""
    with tracker.phase("forward"):
        outputs = model(**inputs, use_cache=False)
        loss = outputs.loss
    if not hold_outputs:
        del outputs
    with tracker.phase("backward"):
        loss.backward()
    del loss
    with tracker.phase("step"):
        optimizer.step()


def cpu_prediction(config: dict[str, Any], settings: TrainingSettings) -> MemoryBreakdown:
    """hfmem's per-GPU breakdown for `config` and `settings` as the step runs on CPU (see cpu_activations)."""
    ctx = Context(*_model(config))
    s = settings.validated()
    return combine(s, ctx.split(s), state_for(ctx, s), cpu_activations(config, s))


def cpu_activations(config: dict[str, Any], settings: TrainingSettings) -> ActivationEstimate:
    """hfmem's activation estimate as the step runs on CPU: dropout masks in the masked tensor's dtype (CUDA
    keeps a bool), everything else as for a GPU."""
    ctx = Context(*_model(config))
    s = settings.validated()
    step = replace(activation_settings(ctx, s, s.resolved_seq_len(ctx.arch.max_position_embeddings)),
                   dropout_mask_bytes=None)
    return estimate_activations(ctx.arch, ctx.inventory, step, modules=ctx.modules, cache=ctx.layer_cache)


def _model(config: dict[str, Any]) -> tuple[Architecture, Inventory]:
    """Architecture and inventory of `config` (hfmem's meta build)."""
    return read_architecture(config), build_inventory(config)
