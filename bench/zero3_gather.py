"""ZeRO-3's gathered parameters: DeepSpeed's own count on CPU (gloo, 2 ranks, a tiny Llama) against hfmem's replay of
its fetch, prefetch and release rules, for each case's residency sizes; then what the replay gives real models.

    python bench/zero3_gather.py

How the ranks run and what they count: tests/zero3_ranks.py. Needs deepspeed (a test extra); about 20 s.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from tiny_models import tiny_config  # noqa: E402
from zero3_ranks import CASES, LAYERS, MODEL, measure  # noqa: E402

from hfmem.memory.estimate import Context  # noqa: E402
from hfmem.memory.settings import TrainingSettings  # noqa: E402
from hfmem.model.architecture import read_architecture  # noqa: E402
from hfmem.model.meta import build_inventory  # noqa: E402

EXAMPLES = ("Meta-Llama-3-8B", "Llama-2-70b-hf")


def _context(config: dict) -> Context:
    return Context(read_architecture(config), build_inventory(config))


def main() -> None:
    measured = measure()
    ctx = _context(tiny_config(MODEL, LAYERS))
    print(f"tiny Llama, {LAYERS} layers, {ctx.inventory.total:,} parameters; elements gathered at once")
    print(f"{'case':34} {'DeepSpeed step':>15} {'hfmem':>10} {'around loss':>12} {'hfmem':>10}")
    for case, (live, reuse, bucket, recompute) in CASES.items():
        settings = TrainingSettings(max_live_parameters=live, max_reuse_distance=reuse, prefetch_bucket_size=bucket,
                                    gradient_checkpointing="full" if recompute else "off")
        replay = ctx.zero3_gathered(settings)
        step, around = measured[case]
        print(f"{case:34} {step:>15,} {replay.step:>10,} {around:>12,} {replay.around_loss:>10,}")
    print("\nreal models, DeepSpeed's defaults (1e9 live, 1e9 reuse, HF 'auto' prefetch 0.9 x hidden²)")
    for name in EXAMPLES:
        config = json.loads((ROOT / "hfmem" / "examples" / name / "config.json").read_text())
        model = _context(config)
        layer = model.layer_parameters
        for checkpointing in ("off", "full"):
            g = model.zero3_gathered(TrainingSettings(gradient_checkpointing=checkpointing))
            print(f"{name:20} checkpointing {checkpointing:4}: {g.around_loss:>14,} around the loss "
                  f"({g.around_loss / layer:.2f} layers), {g.step:>14,} at most in the step")


if __name__ == "__main__":
    main()
