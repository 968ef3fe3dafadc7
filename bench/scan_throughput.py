"""Models per second of `hfmem scan` against the test Hub, with latency injected into every request.

Run by hand:  python bench/scan_throughput.py [--models 500] [--distinct [--shapes]] [--latency 0.05] [--concurrency 1,8,32]
              [-- SCAN FLAGS]

The test Hub serves generated tiny Llama fine-tunes sharing four configs (tests/scan_repos.py) from
this process; each scan is a real `hfmem scan` subprocess with fresh caches ("cold": every config,
index and header fetched, one meta build, since the four differ in rope_theta only; with `--distinct` every
model has a config of its own, still of one shape; with `--shapes` too, every model has a shape of its own
(max_position_embeddings), so every one needs its own build and fit search) and then again with the caches it
left ("warm": one API request per model, since branches are re-resolved). The figure is the scan's own models/s, which
starts after the list is read (so torch's import inside the first build is included). Flags after
`--` go to every scan, e.g. `-- --method qlora --gpu rtx4090` to fit one cell instead of the catalogue.
Peak RSS is the scan process's own (`wait4`), so a figure that grows with --models is memory held per model.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from hubserver import HubServer  # noqa: E402
from scan_repos import add_scan_repos  # noqa: E402

SUMMARY = re.compile(r"scanned (\d+) models: done (\d+) · failed (\d+) · cached (\d+) · skipped \d+ · ([\d.]+) models/s")


def scan(env: dict[str, str], models: Path, out: Path, concurrency: int,
         extra: list[str]) -> tuple[float, int, int, float]:
    """Run one `hfmem scan`; (models/s, records, cached) from its summary line, and its peak RSS in MB."""
    child = subprocess.Popen([sys.executable, "-m", "hfmem", "scan", str(models), "-o", str(out),
                              "--concurrency", str(concurrency), *extra], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    stderr = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    match = SUMMARY.search(stderr)
    if not match:
        raise SystemExit(f"scan failed ({os.waitstatus_to_exitcode(status)}): {stderr.strip()[-500:]}")
    return float(match[5]), int(match[2]) + int(match[3]), int(match[4]), usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=500, help="generated fine-tunes to scan")
    parser.add_argument("--distinct", action="store_true", help="every fine-tune with a config of its own")
    parser.add_argument("--shapes", action="store_true", help="with --distinct: every config of a shape of its own")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds added to every request")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated --concurrency values")
    parser.add_argument("scan_args", nargs="*", help="extra `hfmem scan` flags (after --)")
    args = parser.parse_args()

    with HubServer() as hub, tempfile.TemporaryDirectory() as tmp:
        repos = add_scan_repos(hub, args.models, args.models if args.distinct else None, args.shapes)
        models = Path(tmp) / "models.txt"
        models.write_text("\n".join(repos.models) + "\n")
        hub.inject("*", latency=args.latency, times=None)
        print(f"{len(repos.models)} models ({len(repos.failures)} fail by design, {repos.distinct_configs} distinct "
              f"configs{', each its own shape' if args.shapes else ''}), "
              f"{args.latency * 1000:g} ms added per request; scan flags: {' '.join(args.scan_args) or '(defaults)'}")
        print(f"{'concurrency':>11} {'cold models/s':>14} {'requests/model':>15} {'cold peak MB':>13} "
              f"{'warm models/s':>14} {'cached':>7} {'warm peak MB':>13}")
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            run_dir = Path(tmp) / f"c{concurrency}"
            env = os.environ | {"HF_ENDPOINT": hub.url, "HF_HOME": str(run_dir / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1",
                                "HF_HUB_CACHE": str(run_dir / "hf" / "hub"), "HFMEM_CACHE_DIR": str(run_dir / "hfmem")}
            env.pop("HF_TOKEN", None)
            hub.reset_log()
            cold, records, _, cold_rss = scan(env, models, run_dir / "cold.jsonl", concurrency, args.scan_args)
            requests = hub.total_requests() / records
            warm, _, cached, warm_rss = scan(env, models, run_dir / "warm.jsonl", concurrency, args.scan_args)
            print(f"{concurrency:>11} {cold:>14.1f} {requests:>15.1f} {cold_rss:>13.0f} {warm:>14.1f} {cached:>7} "
                  f"{warm_rss:>13.0f}")


if __name__ == "__main__":
    main()
