"""HTTP requests, bytes and wall time of one `hfmem MODEL` run against the test Hub: cold, branch-cached, pinned.

Run by hand:  python bench/hub_requests.py [--latency 0.05] [MODEL ...]
Each run is a fresh `hfmem` process (so torch/transformers import time is included), with the
test Hub's request log giving the requests and body bytes; `--latency` adds that many seconds to
every request, as a distant Hub would.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from hubserver import GRANTED_TOKEN, HubServer  # noqa: E402


def run_once(server: HubServer, env: dict[str, str], model: str) -> tuple[float, int, int, int]:
    server.reset_log()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "hfmem", model, "--format", "json"], env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{model}: {done.stderr.strip()}")
    return wall, server.total_requests(), server.total_bytes(), len(server.weight_downloads())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["openai-community/gpt2", "mistralai/Mistral-7B-v0.1",
                                                      "meta-llama/Llama-2-70b-hf", "mistralai/Mixtral-8x7B-v0.1"])
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every request")
    args = parser.parse_args()
    with HubServer(ROOT / "fixtures" / "hub") as server, tempfile.TemporaryDirectory() as tmp:
        if args.latency:
            server.inject("*", latency=args.latency, times=None)
        print(f"latency per request: {args.latency * 1000:.0f} ms")
        print(f"{'model':32} {'run':8} {'wall s':>7} {'requests':>8} {'bytes':>10} {'weight GETs':>11}")
        for model in args.models:
            env = os.environ | {"HF_ENDPOINT": server.url, "HF_TOKEN": GRANTED_TOKEN, "HF_HOME": f"{tmp}/{model}/hf",
                                "HFMEM_CACHE_DIR": f"{tmp}/{model}/hfmem", "HF_HUB_DISABLE_TELEMETRY": "1"}
            cold = run_once(server, env, model)
            cached = run_once(server, env, model)
            sha = server.find_repo(model).sha
            pinned = run_once(server, env, f"{model}@{sha}")
            for label, (wall, requests, size, weights) in (("cold", cold), ("branch", cached), ("pinned", pinned)):
                print(f"{model:32} {label:8} {wall:7.2f} {requests:8d} {size:10,d} {weights:11d}")


if __name__ == "__main__":
    main()
