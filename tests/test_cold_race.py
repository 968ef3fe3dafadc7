"""Cold starts, one after another: the background import of transformers and the meta build never race.

`model/load.py` imports transformers in a thread while the Hub answers, and `model/meta.py` builds once the
config is in; a build that started while that import was still under way (about 1 to 1.5 s into it, on an
idle core) read the half-imported package: `internal error (AttributeError: ... 'CONFIG_MAPPING')`. Each
process here is a cold start whose build begins at a different point of the preload, across that window.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DELAYS_S = [1.0, 1.1, 1.2]
"""Where the old code crashed (a build 1.0 to 1.2 s into the preload); one process at a time, so a busy
machine does not move the window past them."""
COLD_START = """
import sys, threading, time
from hfmem.model import load, meta
threading.Thread(target=load._preload_transformers, daemon=True).start()
time.sleep(float(sys.argv[1]))
meta.make_config({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2})
"""


def test_a_build_during_the_preload_never_crashes(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "HF_HOME": str(tmp_path / "hf")}
    failures = []
    for delay in DELAYS_S:
        done = subprocess.run([sys.executable, "-c", COLD_START, str(delay)], env=env, capture_output=True, text=True,
                              timeout=120)
        if done.returncode:
            failures.append((delay, done.stderr.strip().splitlines()[-1:]))
    assert failures == []
