"""How long one fit matrix takes: Llama-3-8B, every method, the first 15 catalogue GPUs (best of N runs).

    python bench/fit_speed.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from hfmem.hardware.gpus import catalogue
from hfmem.memory.fit import fit_matrix
from hfmem.memory.settings import TrainingSettings
from hfmem.model.architecture import read_architecture
from hfmem.model.meta import build_inventory

CONFIG = Path(__file__).resolve().parent.parent / "fixtures" / "configs" / "meta-llama" / "Meta-Llama-3-8B" / "config.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    config = json.loads(CONFIG.read_text())
    arch, inventory = read_architecture(config), build_inventory(config)
    gpus = catalogue()[:15]
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        fits = fit_matrix(arch, inventory, TrainingSettings(), gpus)
        times.append(time.perf_counter() - start)
    print(f"fit matrix: {len(fits)} cells, best {min(times) * 1000:.1f} ms, median "
          f"{sorted(times)[len(times) // 2] * 1000:.1f} ms over {args.repeat} runs")


if __name__ == "__main__":
    main()
