"""The memory-saving optimizers against hfmem: state bytes after the first step and the step's transient peak.

Runs each real optimizer on CPU over a scaled-down Llama (tests/tiny_models.py, fp32 weights as mixed precision's
master copy holds them): full fine-tuning, the decoder's 2-D matrices in the projected / Muon group and the rest
(embeddings, head, norms) in AdamW's, as transformers' Trainer groups them for GaLore and APOLLO
(optim_target_modules) and torch.optim.Muon requires. State bytes are the unique storages in optimizer.state
(a projector object's tensors included) after the first step; the step's transient is the peak of live tensors
(tests/live_peak.py LiveBytes) inside the second step above what was alive before it, with the projection updated
on that step (update_proj_gap=1). Packages that are not installed are skipped (pip install --target DIR galore-torch
apollo-torch adam-mini schedulefree came-pytorch; PYTHONPATH=DIR). Prints one row per optimizer.

    PYTHONPATH=.:tests:/tmp/optpkgs python bench/optimizers.py
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "tests")]
from live_peak import LiveBytes  # noqa: E402
from saved_activations import build_model  # noqa: E402
from tiny_models import tiny_config  # noqa: E402

from hfmem.memory.model_state import parameter_split  # noqa: E402
from hfmem.memory.optimizers import optimizer_state  # noqa: E402
from hfmem.memory.settings import TrainingSettings  # noqa: E402
from hfmem.model.architecture import read_architecture  # noqa: E402
from hfmem.model.meta import build_inventory  # noqa: E402

MODEL = "meta-llama/Meta-Llama-3-8B"
RANK = 16


def _groups(model: Any) -> tuple[list, list]:
    """The decoder's 2-D weights and every other parameter."""
    hidden = [p for n, p in model.named_parameters() if p.ndim == 2 and ".layers." in n]
    ids = {id(p) for p in hidden}
    return hidden, [p for p in model.parameters() if id(p) not in ids]


def build(name: str, model: Any) -> list[Any] | None:
    """The real optimizer(s) for `name` over the model, or None when its package is missing."""
    hidden, rest = _groups(model)
    need = {"galore_adamw": "galore_torch", "apollo_adamw": "apollo_torch", "adam_mini": "adam_mini",
            "schedulefree_adamw": "schedulefree", "came": "came_pytorch"}.get(name)
    if need and importlib.util.find_spec(need) is None:
        return None
    if name == "galore_adamw":
        from galore_torch import GaLoreAdamW

        return [GaLoreAdamW([{"params": rest}, {"params": hidden, "rank": RANK, "update_proj_gap": 1, "scale": 0.25,
                                                "proj_type": "std"}], lr=1e-3)]
    if name == "apollo_adamw":
        from apollo_torch import APOLLOAdamW

        projected = {"params": hidden, "rank": RANK, "proj": "random", "scale_type": "channel", "scale": 1,
                     "update_proj_gap": 1, "proj_type": "std"}
        return [APOLLOAdamW([{"params": rest}, projected], lr=1e-3)]
    if name == "adam_mini":
        from adam_mini import Adam_mini

        cfg = model.config
        return [Adam_mini(model.named_parameters(), lr=1e-3, dim=cfg.hidden_size, n_heads=cfg.num_attention_heads,
                          n_kv_heads=cfg.num_key_value_heads, verbose=False)]
    if name == "muon":
        return [torch.optim.Muon(hidden, lr=1e-3), torch.optim.AdamW(rest, lr=1e-3)]
    if name == "schedulefree_adamw":
        import schedulefree

        opt = schedulefree.AdamWScheduleFree(model.parameters(), lr=1e-3)
        opt.train()
        return [opt]
    if name == "came":
        from came_pytorch import CAME

        return [CAME(model.parameters(), lr=1e-4, weight_decay=0.0, betas=(0.9, 0.999, 0.9999), eps=(1e-30, 1e-16))]
    raise ValueError(name)


def _state_bytes(optimizers: list[Any]) -> int:
    """Unique storages held by the optimizers' states, projector objects' tensors included."""
    seen: dict[int, int] = {}

    def visit(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            seen[value.untyped_storage().data_ptr()] = value.untyped_storage().nbytes()
        elif isinstance(value, dict):
            for v in value.values():
                visit(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                visit(v)
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            for v in vars(value).values():
                visit(v)

    for opt in optimizers:
        for state in opt.state.values():
            visit(state)
    return sum(seen.values())


def measure(name: str) -> tuple[int, int] | None:
    """(state bytes after the first step, the second step's transient peak) of the real optimizer."""
    model = build_model(tiny_config(MODEL, 2), "sdpa", torch.float32)
    optimizers = build(name, model)
    if optimizers is None:
        return None
    ids = torch.randint(0, model.config.vocab_size, (2, 64))
    for step in range(2):
        model(input_ids=ids, labels=ids).loss.backward()
        if step == 1:
            with LiveBytes() as tracker:
                tracker.adopt([p for p in model.parameters()] + [p.grad for p in model.parameters()], "model")
                for opt in optimizers:
                    tracker.adopt([v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)],
                                  "state")
                tracker.reset_peak()
                before = tracker.current
                for opt in optimizers:
                    opt.step()
                transient = tracker.peak - max(before, tracker.current)
        else:
            for opt in optimizers:
                opt.step()
            states = _state_bytes(optimizers)
        for opt in optimizers:
            opt.zero_grad()
    return states, transient


def predicted(name: str) -> tuple[float, float]:
    """hfmem's state bytes and step transient for the same model and fp32 states."""
    config = tiny_config(MODEL, 2)
    split = parameter_split(read_architecture(config), build_inventory(config), TrainingSettings(method="full"))
    state = optimizer_state(name, split.trainable, split.hidden_matrices, 4.0, RANK, matrices=split.trainable_matrices,
                            largest=split.largest_trainable)
    return state.states, state.step


def main() -> None:
    print(f"{'optimizer':20} {'states (real)':>14} {'hfmem':>10} {'err':>7} {'step (real)':>12} {'hfmem':>10}")
    for name in ("galore_adamw", "apollo_adamw", "adam_mini", "muon", "schedulefree_adamw", "came"):
        real = measure(name)
        if real is None:
            print(f"{name:20} (package not installed)")
            continue
        states, step = predicted(name)
        print(f"{name:20} {real[0]:>14,} {states:>10,.0f} {states / real[0] - 1:>+7.1%} {real[1]:>12,} {step:>10,.0f}")


if __name__ == "__main__":
    main()
