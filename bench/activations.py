"""Predicted vs measured activation bytes for the tiny real architectures (the table behind tests/test_activations.py).

    python bench/activations.py

Needs torch and transformers. Measures unique non-parameter storages saved for backward during a
real forward + loss (b=2, s=128, bf16, CPU) and compares with hfmem per layer and in total.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import torch  # noqa: E402
from saved_activations import build_model, saved_bytes  # noqa: E402
from tiny_models import TINY, tiny_config  # noqa: E402

from hfmem.memory.activations import ActivationSettings, estimate_activations  # noqa: E402
from hfmem.model.architecture import read_architecture  # noqa: E402
from hfmem.model.meta import build_inventory  # noqa: E402

B, S = 2, 128


def main() -> None:
    print(f"{'model':32} {'kernel':10} {'ckpt':5} {'layer pred':>11} {'layer meas':>11} {'err':>7} {'total pred':>11} {'total meas':>11} {'err':>7}")
    for model_id in TINY:
        config = tiny_config(model_id, 2)
        arch, inventory = read_architecture(config), build_inventory(config)
        for attention in ("eager", "sdpa"):
            for ckpt in (False, True):
                one = saved_bytes(build_model(tiny_config(model_id, 1), attention), B, S, checkpointing=ckpt)[0]
                two, backends = saved_bytes(build_model(config, attention), B, S, checkpointing=ckpt)
                kernel = "sdpa_math" if attention == "sdpa" and backends and all(b == 0 for b in backends) else attention
                est = estimate_activations(arch, inventory, ActivationSettings(
                    micro_batch_size=B, seq_len=S, attention=kernel,
                    gradient_checkpointing="full" if ckpt else "off", dropout_mask_bytes=None))
                layer = est.checkpoint_inputs // 2 if ckpt else est.layers[-1].bytes
                print(f"{model_id:32} {kernel:10} {'full' if ckpt else 'off':5} {layer:11,} {two - one:11,} "
                      f"{layer / (two - one) - 1:+7.2%} {est.stored:11,} {two:11,} {est.stored / two - 1:+7.2%}")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
