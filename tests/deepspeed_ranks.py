"""Real DeepSpeed ZeRO-1/2/3 on CPU (gloo, 2 or 4 processes): every rank's whole-step peak of live tensors, and
hfmem's.

DeepSpeed's CPU accelerator (DS_ACCELERATOR=cpu) falls back to gloo without oneCCL. A tiny Llama
(tests/tiny_models.py), full or with PEFT LoRA (r=8 on q_proj, v_proj), trains two steps under
deepspeed.initialize with bf16 on (16-bit weights, fp32 master partition), torch's fused AdamW
(zero_allow_untested_optimizer; the Trainer's adamw_torch_fused) and the bucket sizes Hugging Face's integration
fills in for "auto" (transformers/integrations/deepspeed.py: reduce_bucket_size hidden², stage3_prefetch_bucket_size
0.9·hidden², stage3_param_persistence_threshold 10·hidden), the sizes hfmem assumes. The second step's peak comes
from LiveBytes (tests/live_peak.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
from live_peak import LiveBytes  # noqa: E402
from ranks import deepspeed_rank, leave, spawn  # noqa: E402
from saved_activations import build_model  # noqa: E402
from step_peak import LORA_TARGETS, cpu_prediction, lora_model  # noqa: E402
from tiny_models import tiny_config  # noqa: E402

from hfmem.memory.settings import TrainingSettings  # noqa: E402

MODEL = "meta-llama/Meta-Llama-3-8B"
WORLD, B, S = 2, 2, 128
CASES = [(stage, method, 1) for method in ("full", "lora") for stage in (1, 2, 3)] + [(1, "full", 2), (2, "full", 2)]
"""(ZeRO stage, method, gradient accumulation steps), each on WORLD ranks."""
WIDE = [(3, "full", 1), (2, "lora", 1)]
"""Cases also run on 4 ranks: the partitions' 1/N, twice as fine."""
TERMS = ("weights", "gradients", "master_weights", "optimizer_states", "sharding_buffers", "activations",
         "optimizer_step_transient", "allocated_peak")


def case_name(case: tuple[int, str, int]) -> str:
    """e.g. "zero2-full" or "zero1-full-gas2"."""
    stage, method, gas = case
    return f"zero{stage}-{method}" + (f"-gas{gas}" if gas > 1 else "")


def ds_config(hidden: int, stage: int, gas: int = 1, micro_batch: int = B, **zero3: Any) -> dict[str, Any]:
    """A bf16 DeepSpeed config with Hugging Face's "auto" bucket sizes for this hidden size; `zero3`: ZeRO-3 keys
    that replace or join them (stage3_max_live_parameters=...)."""
    zero: dict[str, Any] = {"stage": stage, "reduce_bucket_size": hidden * hidden}
    if stage == 3:
        zero |= {"stage3_prefetch_bucket_size": int(0.9 * hidden * hidden),
                 "stage3_param_persistence_threshold": 10 * hidden} | zero3
    return {"train_micro_batch_size_per_gpu": micro_batch, "gradient_accumulation_steps": gas,
            "bf16": {"enabled": True}, "zero_optimization": zero, "zero_allow_untested_optimizer": True,
            "steps_per_print": 10**9}


def _rank(rank: int, port: int, case: tuple[int, str, int], world: int, out: str) -> None:
    """One rank of `world`: initialise DeepSpeed, train two optimizer steps (of `gas` micro-batches each) under
    LiveBytes, write the second one's peak and what was alive then."""
    deepspeed = deepspeed_rank(rank, port, world)
    stage, method, gas = case
    model = lora_model(MODEL, 2, "sdpa", 0.0) if method == "lora" else build_model(tiny_config(MODEL, 2), "sdpa",
                                                                                     torch.float32)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, fused=True)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer,
                                      config=ds_config(model.config.hidden_size, stage, gas))
    ids = torch.randint(0, model.config.vocab_size, (B, S), generator=torch.Generator().manual_seed(rank))
    live = LiveBytes()
    with live:
        live.adopt(list(engine.module.parameters()) + list(engine.module.buffers()), "weights")
        for step in range(2):
            if step == 1:
                live.reset_peak()
            for _ in range(gas):  # engine.step() applies the optimizer at the accumulation boundary only
                with live.phase("forward"):
                    loss = engine(input_ids=ids, labels=ids, use_cache=False).loss
                with live.phase("backward"):
                    engine.backward(loss)
                del loss
                with live.phase("step"):
                    engine.step()
    Path(f"{out}.{rank}").write_text(json.dumps({"peak": live.peak, "when": live.peak_op,
                                                 "breakdown": list(live.breakdown().items())}))
    leave()



def measure(case: tuple[int, str, int], world: int = WORLD) -> list[dict[str, Any]]:
    """Every rank's peak for the case on `world` ranks, forked from this process once it has imported DeepSpeed (a
    spawned rank spends seconds importing it again)."""
    import deepspeed  # noqa: F401
    # deepspeed.initialize imports its Muon optimizer (is_zero_supported_optimizer), whose import sets up
    # torch.compile (dynamo, inductor): a third of a forked rank's CPU time when each rank did it again
    import deepspeed.runtime.zero.muon.muon_optimizer  # noqa: F401

    if case[1] == "lora":  # transformers' and PEFT's modules imported once, here, rather than in every rank
        lora_model(MODEL, 2, "sdpa", 0.0)
    else:
        build_model(tiny_config(MODEL, 2), "sdpa")
    return spawn(_rank, world, case, world, start_method="fork")


def predicted(case: tuple[int, str, int], world: int = WORLD) -> dict[str, int]:
    """hfmem's per-GPU terms for the case (ZeRO-`stage` over `world` GPUs, bf16 mixed precision)."""
    stage, method, gas = case
    lora = {"lora_rank": 8, "lora_targets": LORA_TARGETS} if method == "lora" else {}
    settings = TrainingSettings(method=method, dtype="bf16", optimizer="adamw", micro_batch_size=B, seq_len=S,
                                attention="sdpa", sharding=f"zero{stage}", num_gpus=world,
                                gradient_accumulation_steps=gas, **lora)
    return cpu_prediction(tiny_config(MODEL, 2), settings).to_dict()
