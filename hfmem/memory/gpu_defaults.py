"""A default the GPU cannot run becomes what it can run: bf16 on Volta and Turing is fp16, FlashAttention-2 is SDPA.

Only defaults move (hfmem's own, or a framework profile's); a value given by a flag or a config file stands, and
the report warns where the GPU cannot run it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from hfmem.errors import InvalidInputError
from hfmem.hardware.capabilities import capabilities, runs_matmuls
from hfmem.hardware.gpus import Gpu, catalogue
from hfmem.memory.settings import TrainingSettings

_WITHOUT_BF16 = {"bf16": "fp16", "amp-bf16": "amp-fp16"}
"""The fp16 form of each bf16 precision (the same bytes; fp16 adds only a loss scaler)."""


def gpu_defaults(settings: TrainingSettings, gpu: Gpu, stated: Collection[str]) -> dict[str, Any] | None:
    """{"changes": {setting: value}, "missing": [what the GPU lacks], "why": text} for the defaults `gpu` cannot
    run; None when it runs them all."""
    caps = capabilities(gpu)
    changes: dict[str, str] = {}
    missing: list[str] = []
    if not caps.bf16 and "dtype" not in stated and settings.dtype in _WITHOUT_BF16:
        changes["dtype"] = _WITHOUT_BF16[settings.dtype]
        missing.append("bf16")
    if not caps.flash_attention_2 and "attention" not in stated and settings.attention == "flash_attention_2":
        changes["attention"] = "sdpa"
        missing.append("FlashAttention-2")
    if not changes:
        return None
    kernel = f"; SDPA runs its {caps.sdpa} kernel" if "attention" in changes else ""
    return {"changes": changes, "missing": missing,
            "why": f"{(caps.arch or gpu.name).title()} has no {' or '.join(missing)}{kernel}"}


def unsupported(settings: TrainingSettings, gpus: Iterable[Gpu], stated: Collection[str]) -> list[str]:
    """Warnings for stated settings some GPUs cannot run (their cells still assume them, as asked)."""
    gpus = tuple(gpus)
    checks = (("dtype", "bf16" in settings.dtype, lambda c: c.bf16, "bf16"),
              ("attention", settings.attention == "flash_attention_2", lambda c: c.flash_attention_2,
               "FlashAttention-2"))
    out = []
    for name, asked, runs, what in checks:
        lacking = [g.name for g in gpus if name in stated and asked and not runs(capabilities(g))]
        if lacking:
            verb = "has" if len(lacking) == 1 else "have"
            out.append(f"{what} was asked for, but {', '.join(lacking)} {verb} no {what}: the cells assume it as asked")
    return out


def matrix_gpus(settings: TrainingSettings, asked: tuple[Gpu, ...]) -> tuple[Gpu, ...]:
    """The GPUs of the fit matrix: those asked, else the catalogue; for a low-precision dtype (fp8-te, mxfp8,
    nvfp4, ...) the catalogue's GPUs that run its matmuls, and InvalidInputError naming an asked GPU that does not."""
    recipe = settings.precision.recipe
    if recipe is None:
        return asked or catalogue()
    if not asked:
        return tuple(g for g in catalogue() if runs_matmuls(capabilities(g), recipe.needs))
    lacking = [g.name for g in asked if not runs_matmuls(capabilities(g), recipe.needs)]
    if lacking:
        chips = {"fp8": "FP8 tensor cores (Ada, Hopper, Blackwell, MI300X)", "mxfp8": "MXFP8 tensor cores (Blackwell)",
                 "fp4": "FP4 tensor cores (Blackwell)"}[recipe.needs]
        raise InvalidInputError(f"dtype {settings.dtype} needs {chips}; {', '.join(lacking)} "
                                f"{'has' if len(lacking) == 1 else 'have'} none: use dtype bf16 there.")
    return asked
