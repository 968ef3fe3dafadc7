"""Predicted vs published tokens/s per GPU for the FP8/MXFP8/NVFP4 rows of fixtures/throughput_multinode.json.

    python bench/lowprecision_throughput.py

Each row runs through the CLI in-process with its own flags (`--dtype fp8-te`, `mxfp8`, ...) and `--tokens 1e9`; the
asked cell's tokens/s over its GPUs is compared with the published figure. A bare `--sequence-parallel` in a row's
flags (the fixture's spelling) is read as `megatron`. The recipe's speed is compute.roofline's GEMM_SPEEDUP on its
quantized linears over the stack's bf16 utilisation, both cited, never set from these rows. Prints every row and the
median |error| per split. Needs torch and transformers (the meta build).
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from hfmem.cli.main import run  # noqa: E402
from hfmem.memory.lowprecision import RECIPES  # noqa: E402

FIXTURE = ROOT / "fixtures" / "throughput_multinode.json"


def flags_of(row: dict) -> list[str]:
    """The row's flags, a bare --sequence-parallel given its value."""
    flags = list(row["flags"])
    for i, flag in enumerate(flags):
        if flag == "--sequence-parallel" and (i + 1 == len(flags) or flags[i + 1].startswith("--")):
            flags.insert(i + 1, "megatron")
    return flags


def main() -> None:
    data = json.loads(FIXTURE.read_text())
    errors: list[tuple[str, float]] = []
    for row in data["rows"]:
        if not row.get("flags") or row.get("dtype") not in RECIPES:
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = run([str(ROOT / data["models"][row["model"]]), *flags_of(row), "--tokens", "1e9",
                        "--format", "json"])
        if code:
            print(f"{row['id']:88} exit {code}")
            continue
        time = json.loads(out.getvalue())["fit"][0].get("time") or {}
        published = row["published"]["tokens_per_s_per_gpu"]
        if not time.get("tokens_per_s") or published is None:
            print(f"{row['id']:88} {time.get('reason') or 'no published tokens/s'}")
            continue
        predicted = time["tokens_per_s"] / row["num_gpus"]
        errors.append((row["split"], predicted / published - 1))
        print(f"{row['id']:88} {row['split']:8} {published:8.0f} {predicted:8.0f} {errors[-1][1]:+7.1%}")
    for split in ("fit", "held_out"):
        chosen = [abs(e) for s, e in errors if s == split]
        if chosen:
            print(f"{split}: {len(chosen)} rows, median |error| {statistics.median(chosen):.1%}")


if __name__ == "__main__":
    main()
