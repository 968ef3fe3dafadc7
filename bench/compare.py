"""hfmem against its peers, on the test Hub with a per-request latency: wall time, requests, bytes, peak RSS.

Run by hand (not part of CI's pass/fail):

    python bench/compare.py [--latency 0.05] [--repeat 5] [--cold-repeat 1] [--example example:Meta-Llama-3-8B]
                            [--peers-python /tmp/peers/bin/python] [--no-accelerate] [MODEL ...]

For each model (default: Meta-Llama-3-8B, gpt2, a 7B, a 70B and an MoE from ``fixtures/hub``) and each
tool, one fresh process per run: ``cold`` starts from empty caches (the median of ``--cold-repeat`` runs),
``warm`` reruns with the caches the last cold run left (the median of ``--repeat`` runs), and for hfmem
``pinned`` reruns at the commit sha, which its cache answers without any request. ``--example`` (an
``example:`` config shipped with hfmem, no Hub at all) runs through hfmem alone. Requests and body bytes
come from the test Hub's request log (``tests/hubserver.py``, both listeners); peak RSS from ``wait4`` on
the child. ``--latency`` delays every request by that many seconds, as a distant Hub would.

The summary at the end puts the fast paths side by side (hfmem on the Hub model and on the example,
hf-mem on the same Hub model) and checks hfmem's warm example against its targets (under 0.25 s and
50 MiB). Children run without PYTHONDONTWRITEBYTECODE, so hfmem's modules are byte-compiled once, as
in an installed package (``__pycache__`` is git-ignored).

Peers, installed outside the project (never project dependencies):

* ``hf-mem`` (PyPI ``hf-mem==0.5.6``, inference-only), in its own venv:
  ``python -m venv /tmp/peers && /tmp/peers/bin/pip install hf-mem==0.5.6``. It hard-codes
  ``https://huggingface.co`` and ignores ``HF_ENDPOINT``, so the bench routes it without touching
  its code: a ``sitecustomize.py`` written to a temp folder on that child's ``PYTHONPATH`` wraps
  ``httpx2.AsyncHTTPTransport.handle_async_request`` (the transport hf-mem's ``AsyncClient``
  uses) to rewrite ``https://huggingface.co/...`` to the test server's ``http://127.0.0.1:PORT/...``
  before the request goes out. Redirects (relative, or to the test CDN) then follow as usual.
* ``accelerate estimate-memory`` (the one in hfmem's own environment: it needs torch and
  transformers, which hfmem already has). It goes through ``huggingface_hub``, which honours
  ``HF_ENDPOINT``.

A peer that fails is reported with its one-line error instead of figures. Ratios are peer wall
time over hfmem's for the same model and run kind (>1: hfmem is faster).

Also measured, in the same run: the torch+transformers import alone, hfmem cold with its
background import thread disabled (does overlapping the imports with the fetch help?), and the
meta build of each model's config in-process (transformers already imported, no cache).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from hubserver import GRANTED_TOKEN, HubServer  # noqa: E402

DEFAULT_MODELS = ["meta-llama/Meta-Llama-3-8B", "openai-community/gpt2", "mistralai/Mistral-7B-v0.1",
                  "meta-llama/Llama-2-70b-hf", "mistralai/Mixtral-8x7B-v0.1"]
DEFAULT_EXAMPLE = "example:Meta-Llama-3-8B"  # the same config as the first default model, without the Hub
TARGET_WALL_S, TARGET_RSS_MIB = 0.25, 50.0  # hfmem's warm example: what a cache hit may cost

SITECUSTOMIZE = '''
import os
import httpx2

_TARGET = httpx2.URL(os.environ["HFMEM_BENCH_HUB"])
_original = httpx2.AsyncHTTPTransport.handle_async_request


async def _rerouted(self, request):
    if request.url.host == "huggingface.co":
        request.url = request.url.copy_with(scheme=_TARGET.scheme, host=_TARGET.host, port=_TARGET.port)
        request.headers["Host"] = request.url.netloc.decode()
    return await _original(self, request)


httpx2.AsyncHTTPTransport.handle_async_request = _rerouted
'''

NO_PRELOAD = ("import sys, hfmem.model.load as a; a._preload_transformers = lambda: None; "
              "from hfmem.cli.main import run; sys.exit(run(sys.argv[1:]))")


@dataclass
class Run:
    wall: float
    requests: int
    bytes: int
    rss_mib: float
    error: str | None = None
    best: float | None = None  # the fastest of the repeats, when there were several


def measure(server: HubServer, argv: list[str], env: dict[str, str]) -> Run:
    server.reset_log()
    start = time.perf_counter()
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert child.stderr is not None
    err = child.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    error = None
    if child.returncode:
        lines = [line for line in err.strip().splitlines() if line.strip()]
        error = f"exit {child.returncode}: {lines[-1][:160] if lines else '(no stderr)'}"
    return Run(wall, server.total_requests(), server.total_bytes(), usage.ru_maxrss / 1024, error)


def median_of(runs: list[Run]) -> Run:
    """The run with the median wall time (or the first failure), with the largest peak RSS and the best wall time."""
    ordered = sorted(runs, key=lambda r: r.wall)
    median = next((r for r in runs if r.error), None) or ordered[len(ordered) // 2]
    best = ordered[0].wall if len(runs) > 1 else None
    return Run(median.wall, median.requests, median.bytes, max(r.rss_mib for r in runs), median.error, best)


def tools(peers_python: str | None, sitecustomize_dir: str,
          accelerate_too: bool) -> dict[str, tuple[list[str], dict[str, str]]]:
    """name -> (argv prefix, extra env); the model id is appended to argv."""
    found: dict[str, tuple[list[str], dict[str, str]]] = {
        "hfmem": ([sys.executable, "-m", "hfmem"], {}),
        "hfmem (no preload)": ([sys.executable, "-c", NO_PRELOAD], {}),
    }
    if peers_python and Path(peers_python).exists():
        script = str(Path(peers_python).parent / "hf-mem")  # its console script (hf_mem.cli has no __main__)
        found["hf-mem"] = ([peers_python, script, "--model-id"], {"PYTHONPATH": sitecustomize_dir})
    accelerate = Path(sys.executable).parent / "accelerate"
    if accelerate_too and accelerate.exists():
        found["accelerate"] = ([str(accelerate), "estimate-memory", "--library_name", "transformers"], {})
    return found


def meta_build_seconds(model: str) -> tuple[float, int]:
    """Time one uncached meta build (transformers imported beforehand) and return the count."""
    from hfmem.model.meta import build_inventory

    config = json.loads((ROOT / "fixtures" / "hub" / model / "config.json").read_text())
    start = time.perf_counter()
    inventory = build_inventory(config)
    return time.perf_counter() - start, inventory.total


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds added to every request (default 0.05)")
    parser.add_argument("--repeat", type=int, default=5, help="warm and pinned runs per tool, median kept (default 5)")
    parser.add_argument("--cold-repeat", type=int, default=1, help="cold runs per tool, median kept (default 1)")
    parser.add_argument("--example", default=DEFAULT_EXAMPLE, help="an example: config, run by hfmem alone")
    parser.add_argument("--peers-python", default="/tmp/peers/bin/python", help="python of the venv with hf-mem")
    parser.add_argument("--no-accelerate", action="store_true", help="leave accelerate estimate-memory out")
    return parser.parse_args()


def kinds(name: str, model: str) -> list[str]:
    """The runs a tool makes of a model: cold and warm, and pinned for hfmem on a Hub model."""
    if name == "hfmem (no preload)":
        return ["cold"]  # the warm path never imports transformers
    return ["cold", "warm", "pinned"] if name == "hfmem" and not model.startswith("example:") else ["cold", "warm"]


def run_all(server: HubServer, tmp: str, args: argparse.Namespace,
            available: dict[str, tuple[list[str], dict[str, str]]]) -> dict[tuple[str, str, str], Run]:
    """Every (model, tool, run kind), each tool with caches of its own per model."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("HF_", "HFMEM_", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "TRANSFORMERS_"))}
    base |= {"HF_ENDPOINT": server.url, "HFMEM_BENCH_HUB": server.url, "HF_TOKEN": GRANTED_TOKEN,
             "HF_HUB_DISABLE_TELEMETRY": "1", "TRANSFORMERS_VERBOSITY": "error",
             "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    results: dict[tuple[str, str, str], Run] = {}
    for model in [*args.models, args.example]:
        for name, (argv, extra) in available.items():
            if model.startswith("example:") and not name.startswith("hfmem"):
                continue  # example: configs are hfmem's own
            folder = Path(tmp, name.replace(" ", "_"), model.replace(":", "_"))
            homes = [folder / str(i) for i in range(max(1, args.cold_repeat))]
            envs = [base | extra | {"HF_HOME": str(home / "hf"), "HF_HUB_CACHE": str(home / "hf" / "hub"),
                                    "HFMEM_CACHE_DIR": str(home / "hfmem")} for home in homes]
            for kind in kinds(name, model):
                target = f"{model}@{server.find_repo(model).sha}" if kind == "pinned" else model
                if kind == "cold":  # each from empty caches of its own; warm runs reuse the last one's
                    runs = [measure(server, [*argv, target], env) for env in envs]
                else:
                    runs = [measure(server, [*argv, target], envs[-1]) for _ in range(args.repeat)]
                results[(model, name, kind)] = median_of(runs)
    return results


def print_runs(results: dict[tuple[str, str, str], Run]) -> None:
    """One row per run, with the peer/hfmem wall-time ratio for the same model and run kind."""
    header = f"{'model':30} {'tool':19} {'run':6} {'wall s':>7} {'req':>4} {'bytes':>10} {'RSS MiB':>8} {'x hfmem':>7}"
    print(header)
    print("-" * len(header))
    errors: list[str] = []
    for (model, name, kind), r in results.items():
        short = model.split("/")[-1]
        if r.error:
            print(f"{short:30} {name:19} {kind:6} {'failed':>7} {r.requests:4d} {r.bytes:10,d} {r.rss_mib:8.0f} "
                  f"{'-':>7}")
            errors.append(f"{name} {kind} {model}: {r.error}")
            continue
        ours = results.get((model, "hfmem", kind))
        ratio = f"{r.wall / ours.wall:7.2f}" if ours and not ours.error and name != "hfmem" else f"{'':7}"
        print(f"{short:30} {name:19} {kind:6} {r.wall:7.2f} {r.requests:4d} {r.bytes:10,d} {r.rss_mib:8.0f} {ratio}")
    for line in errors:
        print("failed:", line)


def print_fast_paths(results: dict[tuple[str, str, str], Run], hub_model: str, example: str) -> None:
    """hfmem (Hub model, example) and hf-mem (same Hub model) side by side, and hfmem's warm-example target."""
    print("\nfast paths: wall s / peak RSS MiB per run kind (median of the repeats, the best in brackets)")
    print(f"{'':40} {'cold':>20} {'warm':>20} {'pinned':>20}")
    rows = [("hfmem", hub_model), ("hfmem", example), ("hf-mem", hub_model)]
    for name, model in rows:
        cells = []
        for kind in ("cold", "warm", "pinned"):
            r = results.get((model, name, kind))
            best = f" ({r.best:.2f})" if r and r.best is not None and r.best != r.wall else ""
            cell = "-" if r is None else "failed" if r.error else f"{r.wall:.2f}{best} / {r.rss_mib:.0f}"
            cells.append(f"{cell:>20}")
        print(f"{name + ' ' + model:40} {' '.join(cells)}")
    warm = results.get((example, "hfmem", "warm"))
    if warm and not warm.error:
        met = warm.wall < TARGET_WALL_S and warm.rss_mib < TARGET_RSS_MIB
        print(f"hfmem warm {example}: median {warm.wall:.3f} s (best {warm.best or warm.wall:.3f} s), "
              f"{warm.rss_mib:.1f} MiB; target < {TARGET_WALL_S} s and < {TARGET_RSS_MIB:.0f} MiB: "
              f"{'met' if met else 'missed'}")


def main() -> None:
    args = parse_args()
    with HubServer(ROOT / "fixtures" / "hub") as server, tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "site").mkdir()
        Path(tmp, "site", "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
        if args.latency:
            server.inject("*", latency=args.latency, times=None)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch, transformers, accelerate"], check=True)
        import_s = time.perf_counter() - start

        available = tools(args.peers_python, str(Path(tmp, "site")), not args.no_accelerate)
        results = run_all(server, tmp, args, available)

        print(f"latency per request: {args.latency * 1000:.0f} ms; torch+transformers+accelerate import alone: "
              f"{import_s:.2f} s")
        if "hf-mem" not in available:
            print(f"hf-mem: not run ({args.peers_python} not found; see this file's docstring to install it)")
        print_runs(results)
        print_fast_paths(results, args.models[0], args.example)

        print()
        import transformers  # noqa: F401  (imported first, so the figures below are the build alone)

        print(f"{'meta build (in-process, no cache)':40} {'s':>6} {'parameters':>16}")
        for model in args.models:
            seconds, total = meta_build_seconds(model)
            print(f"{model:40} {seconds:6.2f} {total:16,d}")


if __name__ == "__main__":
    main()
