"""hfmem against its peers, on the test Hub with a per-request latency: wall time, requests, bytes, peak RSS.

Run by hand (not part of CI's pass/fail):

    python bench/compare.py [--latency 0.05] [--peers-python /tmp/peers/bin/python] [MODEL ...]

For each model (default: gpt2, a 7B, a 70B and an MoE from ``fixtures/hub``) and each tool, one
fresh process per run: ``cold`` starts from empty caches, ``warm`` reruns with the caches the
cold run left. Requests and body bytes come from the test Hub's request log (``tests/hubserver.py``,
both listeners); peak RSS from ``wait4`` on the child. ``--latency`` delays every request by that
many seconds, as a distant Hub would.

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

DEFAULT_MODELS = ["openai-community/gpt2", "mistralai/Mistral-7B-v0.1", "meta-llama/Llama-2-70b-hf",
                  "mistralai/Mixtral-8x7B-v0.1"]

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


def tools(peers_python: str | None, sitecustomize_dir: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    """name -> (argv prefix, extra env); the model id is appended to argv."""
    found: dict[str, tuple[list[str], dict[str, str]]] = {
        "hfmem": ([sys.executable, "-m", "hfmem"], {}),
        "hfmem (no preload)": ([sys.executable, "-c", NO_PRELOAD], {}),
    }
    if peers_python and Path(peers_python).exists():
        script = str(Path(peers_python).parent / "hf-mem")  # its console script (hf_mem.cli has no __main__)
        found["hf-mem"] = ([peers_python, script, "--model-id"], {"PYTHONPATH": sitecustomize_dir})
    accelerate = Path(sys.executable).parent / "accelerate"
    if accelerate.exists():
        found["accelerate"] = ([str(accelerate), "estimate-memory", "--library_name", "transformers"], {})
    return found


def meta_build_seconds(model: str) -> tuple[float, int]:
    """Time one uncached meta build (transformers imported beforehand) and return the count."""
    from hfmem.model.meta import build_inventory

    config = json.loads((ROOT / "fixtures" / "hub" / model / "config.json").read_text())
    start = time.perf_counter()
    inventory = build_inventory(config)
    return time.perf_counter() - start, inventory.total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds added to every request (default 0.05)")
    parser.add_argument("--peers-python", default="/tmp/peers/bin/python", help="python of the venv with hf-mem")
    args = parser.parse_args()

    with HubServer(ROOT / "fixtures" / "hub") as server, tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "site").mkdir()
        Path(tmp, "site", "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
        if args.latency:
            server.inject("*", latency=args.latency, times=None)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HFMEM_", "PYTHONPATH"))}
        base |= {"HF_ENDPOINT": server.url, "HFMEM_BENCH_HUB": server.url, "HF_TOKEN": GRANTED_TOKEN,
                 "HF_HUB_DISABLE_TELEMETRY": "1", "TRANSFORMERS_VERBOSITY": "error"}

        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch, transformers, accelerate"], check=True)
        import_s = time.perf_counter() - start

        results: dict[tuple[str, str, str], Run] = {}
        available = tools(args.peers_python, str(Path(tmp, "site")))
        for model in args.models:
            for name, (argv, extra) in available.items():
                home = Path(tmp, name.replace(" ", "_"), model)
                env = base | extra | {"HF_HOME": str(home / "hf"), "HF_HUB_CACHE": str(home / "hf" / "hub"),
                                      "HFMEM_CACHE_DIR": str(home / "hfmem")}
                for kind in ("cold", "warm"):
                    if name == "hfmem (no preload)" and kind == "warm":
                        continue  # the warm path never imports transformers
                    results[(model, name, kind)] = measure(server, [*argv, model], env)

        print(f"latency per request: {args.latency * 1000:.0f} ms; torch+transformers+accelerate import alone: "
              f"{import_s:.2f} s")
        if "hf-mem" not in available:
            print(f"hf-mem: not run ({args.peers_python} not found; see this file's docstring to install it)")
        header = f"{'model':30} {'tool':19} {'run':4} {'wall s':>7} {'req':>4} {'bytes':>10} {'RSS MiB':>8} {'x hfmem':>7}"
        print(header)
        print("-" * len(header))
        errors: list[str] = []
        for (model, name, kind), r in results.items():
            short = model.split("/")[-1]
            if r.error:
                print(f"{short:30} {name:19} {kind:4} {'failed':>7} {r.requests:4d} {r.bytes:10,d} {r.rss_mib:8.0f} {'-':>7}")
                errors.append(f"{name} {kind} {model}: {r.error}")
                continue
            ours = results.get((model, "hfmem", kind))
            ratio = f"{r.wall / ours.wall:7.2f}" if ours and not ours.error and name != "hfmem" else f"{'':7}"
            print(f"{short:30} {name:19} {kind:4} {r.wall:7.2f} {r.requests:4d} {r.bytes:10,d} {r.rss_mib:8.0f} {ratio}")
        for line in errors:
            print("failed:", line)

        print()
        import transformers  # noqa: F401  (imported first, so the figures below are the build alone)

        print(f"{'meta build (in-process, no cache)':40} {'s':>6} {'parameters':>16}")
        for model in args.models:
            seconds, total = meta_build_seconds(model)
            print(f"{model:40} {seconds:6.2f} {total:16,d}")


if __name__ == "__main__":
    main()
