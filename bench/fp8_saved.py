"""What torchao's float8 training saves for backward, measured on CPU, against hfmem's fp8-torchao activations.

    pip install torchao          # not a test dependency; 0.18.0 measured
    python bench/fp8_saved.py

Builds the tiny dense architectures of tests/tiny_models.py in bf16 on CPU, converts every decoder nn.Linear (the
head excluded, as torchtitan's converter does) with torchao.float8.convert_to_float8_training(emulate=True) for the
tensorwise and rowwise recipes, and counts the unique non-parameter storages a forward + loss saves for backward
(tests/saved_activations.py). hfmem's fp8-torchao and fp8-torchao-rowwise predict the bf16 figure: torchao's
matmul_with_hp_or_float8_args saves the bf16 input and weight and casts again in backward
(torchao/float8/float8_linear.py line 45). Each row prints both measurements and hfmem's prediction. TransformerEngine
does not run on CPU; its terms are cited in hfmem/memory/lowprecision.py.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import torch  # noqa: E402
from saved_activations import build_model, saved_bytes  # noqa: E402
from tiny_models import tiny_config  # noqa: E402

from hfmem.memory.activations import estimate_activations  # noqa: E402
from hfmem.memory.estimate import Context, activation_settings  # noqa: E402
from hfmem.memory.settings import TrainingSettings  # noqa: E402
from hfmem.model.architecture import read_architecture  # noqa: E402
from hfmem.model.meta import build_inventory  # noqa: E402

B, S = 2, 128
MODELS = ("meta-llama/Meta-Llama-3-8B", "Qwen/Qwen2.5-0.5B", "mistralai/Mistral-7B-v0.1", "microsoft/phi-2")
RECIPES = {"fp8-torchao": "tensorwise", "fp8-torchao-rowwise": "rowwise"}


def converted(model: torch.nn.Module, recipe: str) -> torch.nn.Module:
    """The model with its decoder linears as torchao Float8Linear (emulated matmuls, so it runs on CPU)."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    config = Float8LinearConfig.from_recipe_name(recipe)
    config = Float8LinearConfig(**{**config.__dict__, "emulate": True})
    return convert_to_float8_training(model, config=config, module_filter_fn=lambda _m, fqn: "lm_head" not in fqn)


def predicted(config: dict, dtype: str, kernel: str) -> int:
    """hfmem's stored activations for the tiny model at b=B, s=S under `dtype`, with the kernel that ran and CPU's
    dropout masks (as bench/activations.py)."""
    arch, inventory = read_architecture(config), build_inventory(config)
    settings = TrainingSettings(dtype=dtype, micro_batch_size=B, seq_len=S).validated()
    step = activation_settings(Context(arch, inventory), settings, S)
    step = replace(step, attention=kernel, dropout_mask_bytes=None)
    return estimate_activations(arch, inventory, step).stored


def main() -> None:
    print(f"{'model':28} {'kernel':6} {'recipe':10} {'bf16 meas':>10} {'fp8 meas':>10} {'fp8-bf16':>9} "
          f"{'hfmem':>10} {'err':>7}")
    for model_id in MODELS:
        config = tiny_config(model_id, 2)
        for attention in ("eager", "sdpa"):
            bf16, backends = saved_bytes(build_model(config, attention), B, S)
            kernel = "sdpa_math" if attention == "sdpa" and backends and all(b == 0 for b in backends) else attention
            for dtype, recipe in RECIPES.items():
                fp8 = saved_bytes(converted(build_model(config, attention), recipe), B, S)[0]
                pred = predicted(config, dtype, kernel)
                print(f"{model_id.split('/')[-1]:28} {attention:6} {recipe:10} {bf16:10,} {fp8:10,} {fp8 - bf16:+9,} "
                      f"{pred:10,} {pred / fp8 - 1:+7.2%}")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
