"""Predicted vs measured saved bytes of PEFT's methods beyond LoRA (the table behind tests/test_peft_methods.py).

    python bench/peft_methods.py [METHOD ...]

Needs torch, transformers and peft. Wraps each dense tiny architecture with PEFT's own DoRA, LoRA-FA, VeRA, IA3,
OFT, BOFT, prompt or prefix tuning (rank 8 on every linear layer but the head, 20 virtual tokens), runs a real
forward + loss (b=2, s=100, pure bf16 with PEFT's fp32 adapters, CPU) and compares the storages saved for backward
that are still alive with hfmem, per layer (2-layer minus 1-layer model) and in total.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import torch  # noqa: E402
from test_peft_methods import B, FEEDFORWARD, METHODS, S, alive_saved_bytes, peft_model, predicted_saved  # noqa: E402


def main(methods: list[str]) -> None:
    print(f"{'model':36} {'method':14} {'layer pred':>11} {'layer meas':>11} {'err':>7} {'total pred':>11} "
          f"{'total meas':>11} {'err':>7}")
    for model_id in sorted(FEEDFORWARD):
        for method in methods:
            if method in {"oft", "boft"} and model_id == "openai-community/gpt2":
                continue  # PEFT's OFT and BOFT refuse Conv1D layers
            measured = {}
            for layers in (1, 2):
                measured[layers], backends = alive_saved_bytes(peft_model(model_id, method, layers, torch.bfloat16),
                                                               B, S)
            est = predicted_saved(model_id, method, 2, backends)
            layer = measured[2] - measured[1]
            print(f"{model_id:36} {method:14} {est.layers[-1].bytes:>11,} {layer:>11,} "
                  f"{est.layers[-1].bytes / layer - 1:>+7.1%} {est.stored:>11,} {measured[2]:>11,} "
                  f"{est.stored / measured[2] - 1:>+7.1%}")


if __name__ == "__main__":
    main(sys.argv[1:] or list(METHODS))
