"""Real DeepSpeed ZeRO-3 on CPU (gloo, 2 processes): the most parameter elements its coordinator holds gathered in a
training step, under several residency sizes, and hfmem's replay of the same rules (hfmem.memory.zero3_gather).

A tiny Llama (tests/tiny_models.py, LAYERS layers, hidden 256) trains three steps under deepspeed.initialize with bf16
and each case's stage3_max_live_parameters, stage3_max_reuse_distance and stage3_prefetch_bucket_size (persistence
threshold Hugging Face's "auto", 10 x hidden). DeepSpeed records its module trace in the first steps and applies the
residency rules from then on; the third step's count is read after every fetch from the coordinator itself
(PartitionedParameterCoordinator.__n_available_params), so the figure is DeepSpeed's own, not a memory reading: the
most over the step, and the most from the head's forward through the last layer's backward (around the loss).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
from deepspeed_ranks import ds_config  # noqa: E402
from ranks import deepspeed_rank, leave, spawn  # noqa: E402
from saved_activations import build_model  # noqa: E402
from tiny_models import tiny_config  # noqa: E402

MODEL, LAYERS, B, S = "meta-llama/Meta-Llama-3-8B", 4, 1, 16
CASES = {
    "defaults": (10**9, 10**9, None, False),
    "reuse-65k-recompute": (10**9, 65_536, None, True),
    "live-400k": (400_000, 65_536, None, False),
    "live-1m-bucket-100k": (10**6, 65_536, 100_000, False),
    "no-prefetch-recompute": (10**9, 300_000, 0, True),
    "reuse-500k-no-prefetch": (10**9, 500_000, 0, False),
    "reuse-1m-no-prefetch-recompute": (10**9, 10**6, 0, True),
    "live-2m-recompute": (2 * 10**6, 65_536, None, True),
}
"""name: (stage3_max_live_parameters, stage3_max_reuse_distance, stage3_prefetch_bucket_size or None for HF's "auto"
0.9 x hidden², full recomputation)."""


def _config(hidden: int, live: int, reuse: int, bucket: int | None) -> dict[str, Any]:
    """The case's ZeRO-3 sizes over deepspeed_ranks' config (Hugging Face's "auto" sizes elsewhere)."""
    sizes = {"stage3_max_live_parameters": live, "stage3_max_reuse_distance": reuse}
    if bucket is not None:
        sizes["stage3_prefetch_bucket_size"] = bucket
    return ds_config(hidden, 3, micro_batch=B, **sizes)


def _rank(rank: int, port: int, world: int, out: str) -> None:
    """One rank: each case's engine in turn, three steps each; the last step's most gathered elements per case."""
    deepspeed = deepspeed_rank(rank, port, world)
    peaks = {}
    for name, (live, reuse, bucket, recompute) in CASES.items():
        model = build_model(tiny_config(MODEL, LAYERS), "sdpa", torch.float32)
        if recompute:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer,
                                          config=_config(model.config.hidden_size, live, reuse, bucket))
        coordinator = engine.optimizer.parameter_offload.get_param_coordinator()
        names = {id(module): name for name, module in model.named_modules()}
        counts: list[tuple[str, bool, int]] = []
        fetch = coordinator.fetch_sub_module

        def counted(module: Any, forward: bool, fetch: Any = fetch, coordinator: Any = coordinator,
                    counts: list[tuple[str, bool, int]] = counts, names: dict[int, str] = names) -> None:
            fetch(module, forward)
            counts.append((names[id(module)], forward,
                           coordinator._PartitionedParameterCoordinator__n_available_params))

        coordinator.fetch_sub_module = counted
        ids = torch.randint(0, model.config.vocab_size, (B, S), generator=torch.Generator().manual_seed(0))
        for _ in range(3):
            counts.clear()
            loss = engine(input_ids=ids, labels=ids, use_cache=False).loss
            engine.backward(loss)
            engine.step()
        start = next(i for i, (module, _, _) in enumerate(counts) if module == "lm_head")
        end = next(i for i, (module, forward, _) in enumerate(counts)
                   if module == f"model.layers.{LAYERS - 2}" and not forward)
        peaks[name] = [max(n for _, _, n in counts), max(n for _, _, n in counts[start:end])]
    Path(f"{out}.{rank}").write_text(json.dumps(peaks))
    leave()


def measure() -> dict[str, list[int]]:
    """Each case's most gathered elements over the step and around the loss, as rank 0's coordinator counted them
    (every rank counts the same)."""
    import deepspeed  # noqa: F401
    import deepspeed.runtime.zero.muon.muon_optimizer  # noqa: F401  (imported once, before the ranks fork)

    build_model(tiny_config(MODEL, LAYERS), "sdpa")
    ranks = spawn(_rank, 2, 2, start_method="fork")
    assert ranks[0] == ranks[1], ranks
    return ranks[0]
