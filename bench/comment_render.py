"""How long the Action's pull-request comment takes to render for many models (the size-capped markdown).

One real report (Llama-3-8B with a token budget and a price, three GPUs) under N model names, rendered into
GitHub's 65,536-character limit:

    python bench/comment_render.py [--models 300,3000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from hfmem.render.comment import Item, render

LIMIT = 65_536
COMMAND = ["example:Meta-Llama-3-8B", "--format", "json", "--tokens", "1e9", "--price", "h100-80gb=2.5",
           "-g", "rtx4090", "-g", "a100-80gb", "-g", "h100-80gb"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="300,3000", help="comma-separated model counts")
    args = parser.parse_args()
    head = json.loads(subprocess.run([sys.executable, "-m", "hfmem", *COMMAND], check=True, capture_output=True,
                                     text=True).stdout)
    for n in (int(x) for x in args.models.split(",")):
        items = [Item(f"org/model-{i:05d}", "model", head=head) for i in range(n)]
        start = time.perf_counter()
        body = render(items, "settings", LIMIT)
        print(f"{n:>6} models: {time.perf_counter() - start:6.2f} s, {len(body):,} characters")


if __name__ == "__main__":
    main()
