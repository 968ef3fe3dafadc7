"""Measured vs predicted whole-step peak of tiny real models on CPU (the tables behind tests/test_live_peak.py).

    python bench/live_peak.py                 # every case: a table each, then the summary
    python bench/live_peak.py --grep ckpt     # the cases whose name contains "ckpt"
    python bench/live_peak.py --summary       # the summary only

Each case trains two steps (PEFT LoRA r=8 on q_proj, v_proj or a full fine-tune; pure bf16, fused AdamW) and
reads the second step's peak of live tensors (tests/live_peak.py); hfmem predicts allocated_peak for the same
settings with CPU's dropout masks. Each table shows the predicted terms and what was alive at the measured
peak, grouped by phase, module and the op that made each storage. "held" cases keep the model output through
the backward, which hfmem does not model: their error is that of the logits alone.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from step_peak import Case, run_case  # noqa: E402

MODELS = ("meta-llama/Meta-Llama-3-8B", "mistralai/Mistral-7B-v0.1", "Qwen/Qwen2.5-0.5B", "google/gemma-2b",
          "mistralai/Mixtral-8x7B-v0.1")
LLAMA = MODELS[0]
TERMS = ("weights", "gradients", "optimizer", "activations_stored", "loss_peak", "recompute", "backward_working",
         "activation_transient", "gradient_activation_overlap", "allocated_peak")


def cases() -> list[Case]:
    """LoRA over models, kernels, dropout, micro-batch and length; then checkpointing, padding, a held output and
    full fine-tunes on Llama."""
    grid = [Case(m, attention, dropout=d, b=b, s=s) for m, attention, d, b, s in
            itertools.product(MODELS, ("sdpa", "eager"), (0.0, 0.05), (1, 2, 4), (128, 256))]
    variants = [Case(LLAMA, attention, dropout=0.05, b=b, checkpointing=True) for attention in ("sdpa", "eager")
                for b in (1, 2, 4)]
    variants += [Case(m, b=b, padding=16) for m in (LLAMA, "Qwen/Qwen2.5-0.5B") for b in (2, 4)]
    variants += [Case(LLAMA, b=4, checkpointing=True, padding=16),
                 Case("mistralai/Mistral-7B-v0.1", extra=(("sliding_window", 128),))]
    variants += [Case(LLAMA, b=b, hold_outputs=True) for b in (1, 2, 4)]
    variants += [Case(LLAMA, method="full", b=b, checkpointing=ckpt) for b in (1, 4) for ckpt in (False, True)]
    return grid + variants


def table(case: Case, top: int) -> tuple[str, float]:
    """One case's table and its error."""
    measured, predicted = run_case(case)
    error = predicted.allocated_peak / measured.peak - 1
    terms = predicted.to_dict()
    head = f"   measured {measured.peak:,}  predicted {predicted.allocated_peak:,}  error {error:+.2%}"
    lines = [f"== {case}", f"{head}  peak at {measured.when}",
             "   predicted: " + ", ".join(f"{k} {terms[k]:,}" for k in TERMS)]
    lines += [f"   {n:>12,}  {name.replace('base_model.model.', '')}" for name, n in
              list(measured.breakdown.items())[:top]]
    return "\n".join(lines), error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grep", default="", help="only the cases whose name contains this")
    parser.add_argument("--top", type=int, default=12, help="groups of live storages shown per case")
    parser.add_argument("--summary", action="store_true", help="the summary table only")
    args = parser.parse_args()
    summary = []
    for case in (c for c in cases() if args.grep in str(c)):
        started = time.perf_counter()
        text, error = table(case, args.top)
        if not args.summary:
            print(text, f"({time.perf_counter() - started:.1f} s)", sep="\n", flush=True)
        summary.append((str(case), error))
    print(f"\n{'case':64} {'error':>8}")
    for name, error in summary:
        print(f"{name:64} {error:+8.2%}")
    worst = max(summary, key=lambda row: abs(row[1]))
    print(f"{len(summary)} cases; largest |error| {abs(worst[1]):.2%} ({worst[0]})")


if __name__ == "__main__":
    main()
