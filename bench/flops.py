"""hfmem's FLOPs per token vs torch's FlopCounterMode, per fixture family (the table behind tests/test_flops.py).

    python bench/flops.py

Needs torch, transformers and peft. Each family's tiny model (tests/tiny_models.py) runs one step on CPU in fp32
(b=2, s=48, eager attention and experts) under FlopCounterMode: forward, full training, full training with
reentrant checkpointing, PEFT LoRA (rank 8, input gradients on) without and with checkpointing.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from flop_counts import RANK, SEQ, adapted, build, counted, families, prepare, tiny

from hfmem.compute.flops import forward_flops, training_flops

CASES = (("forward", "full", "off", False), ("full", "full", "off", True), ("full+ckpt", "full", "full", True),
         ("lora", "lora", "off", True), ("lora+ckpt", "lora", "full", True))


def main() -> None:
    print("| family | model | case | hfmem FLOPs/token | FlopCounterMode | diff |\n|---|---|---|---:|---:|---:|")
    for family, model_id in families().items():
        config, arch, inventory = tiny(model_id)
        fwd = forward_flops(arch, inventory, SEQ)
        groups, names = adapted(arch, inventory)
        for case, method, ckpt, backward in CASES:
            model = prepare(build(config), checkpointing=ckpt == "full", lora_names=names if method == "lora" else None)
            measured = counted(model, backward=backward)
            step = training_flops(arch, fwd, method=method, adapters=groups, rank=RANK, checkpointing=ckpt)
            predicted = step.hardware if backward else fwd.total
            print(f"| {family} | {model_id} | {case} | {predicted:,.0f} | {measured:,.0f} | "
                  f"{100 * (predicted - measured) / measured:+.2f}% |")


if __name__ == "__main__":
    main()
