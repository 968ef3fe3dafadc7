"""The fast paths import nothing heavy: `--help`, `--version` and warm answers from hfmem's cache.

Each command runs in a fresh interpreter that reports, on exit, which of the heavy packages ended up in
`sys.modules`. A cold build through the same detector must report torch and transformers, so a detector
that saw nothing could not pass these tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hubserver import GRANTED_TOKEN, HubServer, sha_of

import hfmem
from hfmem.hub import files

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "accelerate", "safetensors", "huggingface_hub")
EXAMPLE = "example:Meta-Llama-3-8B"

# Runs the CLI like `python -m hfmem`, then writes the heavy top-level packages it imported to argv[1].
RUNNER = f"""
import json, sys
from hfmem.cli.main import run
code = run(sys.argv[2:])
heavy = sorted({{name.partition(".")[0] for name in sys.modules}} & set({HEAVY!r}))
open(sys.argv[1], "w").write(json.dumps(heavy))
sys.exit(code)
"""


def hfmem_imports(env: dict[str, str], tmp: Path, *args: str) -> tuple[int, str, list[str]]:
    """Run `hfmem ARGS` in a fresh process; its exit status, stdout and the heavy packages it imported."""
    report = tmp / "imported.json"
    report.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-c", RUNNER, str(report), *args], check=False, env=env,
                          capture_output=True, text=True, timeout=300)
    assert report.is_file(), done.stderr
    return done.returncode, done.stdout, json.loads(report.read_text())


def clean_env(tmp: Path, endpoint: str) -> dict[str, str]:
    """This checkout first on the path, empty caches under `tmp`, the Hub at `endpoint`, no other HF setting."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HFMEM_", "TRANSFORMERS_"))}
    return keep | {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                   "HFMEM_CACHE_DIR": str(tmp / "hfmem"), "HF_HOME": str(tmp / "hf"),
                   "HF_HUB_CACHE": str(tmp / "hf" / "hub"), "HF_ENDPOINT": endpoint, "HF_HUB_DISABLE_TELEMETRY": "1"}


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], Path]:
    """Empty caches and an endpoint nothing listens on: these commands must not need the Hub."""
    tmp = tmp_path_factory.mktemp("imports")
    return clean_env(tmp, "http://127.0.0.1:9"), tmp


@pytest.fixture(scope="module")
def warm(fresh: tuple[dict[str, str], Path]) -> tuple[dict[str, str], Path, list[str]]:
    """The example's inventory in hfmem's cache, built by one cold run; that run's heavy imports with it."""
    env, tmp = fresh
    code, _, imported = hfmem_imports(env, tmp, EXAMPLE, "--format", "json")
    assert code == 0
    return env, tmp, imported


def test_the_detector_sees_a_cold_build(warm):
    _, _, imported = warm
    assert {"torch", "transformers"} <= set(imported)


@pytest.mark.parametrize("args", [["--help"], ["scan", "--help"], ["--version"], ["gpus"], ["gpus", "--format", "json"]],
                         ids=["help", "scan-help", "version", "gpus", "gpus-json"])
def test_help_and_version_import_nothing_heavy(fresh, args):
    code, out, imported = hfmem_imports(*fresh, *args)
    assert code == 0 and out
    assert imported == []


def test_version_prints_the_package_version(fresh):
    code, out, _ = hfmem_imports(*fresh, "--version")
    assert (code, out) == (0, f"hfmem {hfmem.__version__}\n")


@pytest.mark.parametrize("output, total", [("table", "8,030,261,248"), ("json", "8030261248"),
                                           ("markdown", "8,030,261,248")])
def test_warm_example_imports_nothing_heavy(warm, output, total):
    env, tmp, _ = warm
    code, out, imported = hfmem_imports(env, tmp, EXAMPLE, "--format", output, "-g", "h100")
    assert code == 0 and total in out
    assert imported == []


def test_warm_local_config_imports_nothing_heavy(warm):
    env, tmp, _ = warm
    config = tmp / "mine" / "config.json"
    config.parent.mkdir(exist_ok=True)
    shutil.copy(ROOT / "hfmem" / "examples" / "Meta-Llama-3-8B" / "config.json", config)
    code, out, imported = hfmem_imports(env, tmp, str(config), "--format", "json")
    assert code == 0 and json.loads(out)["parameters"]["total"] == 8_030_261_248
    assert imported == []


def test_pinned_hub_ref_from_the_cache_imports_nothing_heavy(hub_server: HubServer, tmp_path):
    model = "openai-community/gpt2"
    pinned = f"{model}@{sha_of(model)}"
    env = clean_env(tmp_path, hub_server.url) | {"HF_TOKEN": GRANTED_TOKEN}
    code, first, imported = hfmem_imports(env, tmp_path, pinned, "--format", "json")
    assert code == 0 and "huggingface_hub" in imported  # the cold run did talk to the Hub
    hub_server.reset_log()
    code, again, imported = hfmem_imports(env, tmp_path, pinned, "--format", "json")
    assert code == 0 and json.loads(again) == json.loads(first)
    assert imported == [] and hub_server.log == []


def test_light_file_names_match_huggingface_hub():
    from huggingface_hub import constants

    assert files.INDEX_FILE == constants.SAFETENSORS_INDEX_FILE
    assert files.SINGLE_FILE == constants.SAFETENSORS_SINGLE_FILE
