"""Count a real training step's matmul FLOPs with torch's FlopCounterMode on the tiny fixture families.

Used by tests/test_flops.py and bench/flops.py. Attention runs on transformers' eager path: on CPU, SDPA
dispatches to _scaled_dot_product_flash_attention_for_cpu, which FlopCounterMode has no formula for (it counts
the CUDA flash/efficient/cudnn kernels, with the same s² as eager). MoE experts run on transformers' eager
experts loop: the default grouped_mm is not counted by FlopCounterMode.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import torch
from tiny_models import CONFIGS, TINY, TINY_EXTRA, tiny_config
from torch.utils.flop_counter import FlopCounterMode

BATCH, SEQ, LAYERS, RANK = 2, 48, 2, 8


def families() -> dict[str, str]:
    """model_type -> the first fixture model of that type with a tiny version."""
    found: dict[str, str] = {}
    for path in sorted(CONFIGS.glob("*/*/config.json")):
        model_id = f"{path.parent.parent.name}/{path.parent.name}"
        if model_id in TINY or model_id in TINY_EXTRA:
            found.setdefault(json.loads(path.read_text())["model_type"], model_id)
    return found


def fixture_types() -> set[str]:
    return {json.loads(p.read_text())["model_type"] for p in CONFIGS.glob("*/*/config.json")}


def tiny(model_id: str) -> tuple[dict[str, Any], Any, Any]:
    """The tiny config of `model_id`, its Architecture and its meta-build Inventory."""
    from hfmem.model.architecture import read_architecture
    from hfmem.model.meta import build_inventory

    config = tiny_config(model_id, LAYERS)
    return config, read_architecture(config), build_inventory(config)


def build(config: dict[str, Any]) -> Any:
    """The config's own transformers class, randomly initialised in fp32 on CPU, eager attention and experts."""
    import transformers

    data = {k: v for k, v in config.items() if k not in {"architectures", "auto_map", "model_type"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        cfg = transformers.AutoConfig.for_model(config["model_type"], **data)
        cfg._attn_implementation = "eager"
        cfg._experts_implementation = "eager"
        cfg.use_cache = False
        torch.manual_seed(0)
        model = getattr(transformers, config["architectures"][0])._from_config(cfg, dtype=torch.float32)
    model.train()
    return model


def adapted(arch: Any, inventory: Any) -> tuple[tuple[Any, ...], list[str]]:
    """The nn.Linear / Conv1D groups LoRA adapts by leaf name (every one but the head), and those names for PEFT.

    MoE models: the attention projections only. PEFT 0.21 on transformers 5 maps MLP names (gate_proj, ...) onto
    the fused expert tensors (a ParamWrapper folding B·A into the weights), a path hfmem does not model.
    """
    from hfmem.memory.model_state import lora_targets

    allowed = {"attention"} if arch.is_moe else {g.component for g in inventory.linears} - {"head"}
    names = sorted({g.name for g in inventory.linears if g.kind != "experts" and g.component in allowed})
    return tuple(g for g in lora_targets(inventory, tuple(names)) if g.kind != "experts"), names


def prepare(model: Any, *, checkpointing: bool = False, lora_names: list[str] | None = None) -> Any:
    """Reentrant gradient checkpointing and/or PEFT LoRA (rank RANK, input gradients on) on a built model."""
    if lora_names is not None:
        model.enable_input_require_grads()
    if checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": True})
    if lora_names is None:
        return model
    import peft

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = peft.get_peft_model(model, peft.LoraConfig(r=RANK, target_modules=lora_names))
    kinds = {type(m).__name__ for m in model.modules() if type(m).__module__.startswith("peft.tuners")}
    assert "ParamWrapper" not in kinds and "Linear" in kinds, kinds
    return model


def counted(model: Any, *, backward: bool) -> float:
    """FlopCounterMode's total per token for one forward (and backward) of a (BATCH, SEQ) batch."""
    ids = torch.randint(0, model.config.vocab_size, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    counter = FlopCounterMode(display=False)
    with counter, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model(input_ids=ids, labels=ids)
        if backward:
            out.loss.backward()
    return counter.get_total_flops() / (BATCH * SEQ)
