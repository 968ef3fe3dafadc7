"""Per-rank whole-step peak under real TP, TP+SP, FSDP x TP and pipeline schedules on CPU (gloo) vs hfmem's
most-loaded-rank estimate (hfmem.memory.parallel).

    python bench/parallel_ranks.py [KIND ...]

Each case trains a tiny Llama (tests/tiny_models.py; the -qwen2 and -mixtral TP cases a tiny Qwen2 or Mixtral) two
steps on 2 or 4 processes (tests/layout_ranks.py: torchtitan's TP plan, its MoE plan for Mixtral's experts, FSDP2
over the data-parallel mesh dimension, torch.distributed.pipelining's GPipe, 1F1B and interleaved 1F1B);
every rank's second-step peak of live tensors comes from LiveBytes (tests/live_peak.py). Printed per case: each
rank's measured peak, hfmem's allocated_peak for that rank's stage, the error and hfmem's terms. Not a test:
several processes per case.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from layout_ranks import WORLD, base_kind, config, measure  # noqa: E402

from hfmem.memory.estimate import Context, rank_estimate  # noqa: E402
from hfmem.memory.parallel import Layout  # noqa: E402
from hfmem.memory.settings import TrainingSettings  # noqa: E402
from hfmem.model.architecture import read_architecture  # noqa: E402
from hfmem.model.meta import build_inventory  # noqa: E402

CASES = [("tp", 2, 128, 1), ("tp-sp", 2, 128, 1), ("tp", 4, 256, 1), ("tp-sp", 4, 256, 1),
         ("tp-qwen2", 2, 128, 1), ("tp-sp-qwen2", 2, 128, 1), ("tp-mixtral", 2, 128, 1), ("tp-sp-mixtral", 2, 128, 1),
         ("fsdp-tp", 2, 128, 1), ("pp-gpipe", 2, 128, 4), ("pp-1f1b", 2, 128, 4), ("pp-interleaved", 2, 128, 4)]
"""(kind, micro-batch, sequence, micro-batches a step)."""
TERMS = ("weights", "gradients", "optimizer", "sharding_buffers", "activations", "parallel_buffers",
         "gradient_activation_overlap", "allocated_peak")


def settings_of(case: tuple[str, int, int, int]) -> TrainingSettings:
    """The hfmem settings that describe a case as tests/layout_ranks.py runs it."""
    kind, b, s, micro = case
    layout: dict[str, Any] = {
        "tp": {"tp": 2}, "tp-sp": {"tp": 2, "sequence_parallel": "dtensor"},
        "fsdp-tp": {"tp": 2, "sequence_parallel": "dtensor", "num_gpus": 4, "sharding": "fsdp_full_shard"},
        "pp-gpipe": {"pp": 2, "pp_schedule": "gpipe"}, "pp-1f1b": {"pp": 2, "pp_schedule": "1f1b"},
        "pp-interleaved": {"pp": 2, "pp_schedule": "interleaved", "vpp": 2},
    }[base_kind(kind)]
    return TrainingSettings(method="full", dtype="bf16-pure", optimizer="adamw", micro_batch_size=b, seq_len=s,
                            attention="sdpa", gradient_accumulation_steps=micro, **layout)


def predicted(case: tuple[str, int, int, int], stage: int) -> dict[str, int]:
    """hfmem's per-GPU terms for a rank of pipeline stage `stage` in the case."""
    cfg = config(case[0])
    s = settings_of(case).validated()
    ctx = Context(read_architecture(cfg), build_inventory(cfg))
    return rank_estimate(ctx, s, s.seq_len or 0, Layout.of(s), stage)[3].to_dict()


def stage_of(case: tuple[str, int, int, int], rank: int) -> int:
    """The pipeline stage of a rank: its rank in the pipeline cases, the first stage elsewhere."""
    return rank if case[0].startswith("pp") else 0


def main() -> None:
    kinds = set(sys.argv[1:]) or set(WORLD)
    print(f"{'case':<32} {'rank':>4} {'measured':>12} {'predicted':>12} {'error':>7}  terms (predicted)")
    for case in CASES:
        kind, b, s, micro = case
        if kind not in kinds:
            continue
        title = f"{kind} x{WORLD[kind]} b={b} s={s} m={micro}"
        for rank, result in enumerate(measure(case)):
            terms = predicted(case, stage_of(case, rank))
            error = terms["allocated_peak"] / result["peak"] - 1
            shown = ", ".join(f"{k} {terms[k]:,}" for k in TERMS[:-1] if terms[k])
            print(f"{title:<32} {rank:>4} {result['peak']:>12,} {terms['allocated_peak']:>12,} {error:>+7.1%}  {shown}")


if __name__ == "__main__":
    main()
