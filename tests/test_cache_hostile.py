"""hfmem's own cache as hostile input: truncated, edited, forged, deeply nested, swapped, oversized and non-regular
entries of every kind are misses, so the answer is the one the Hub gives, and the entry is rewritten; never a hang,
an internal error or another model's report. The real Hub client runs against the test Hub (tests/hubserver.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hfmem import errors
from hfmem.cli.main import run
from hfmem.hub import cache
from hfmem.hub.modelref import parse_model_ref
from hfmem.hub.hub_settings import HubSettings
from hfmem.model.derive import INVENTORY_ENTRY, SHAPE_ENTRY, inventory_key, shape_hash
from hfmem.model.load import REF_ENTRY, REPO_ENTRY, analyse

MODEL = "openai-community/gpt2"
OTHER = "Qwen/Qwen2.5-0.5B"
SCHEMAS = {"refs": REF_ENTRY, "repos": REPO_ENTRY, "inventories": INVENTORY_ENTRY, "shapes": SHAPE_ENTRY}
OPEN_PARTS = {"config", "normalised_config"}
"""Entry fields holding a config: any JSON is a valid shape there, so forged type changes go elsewhere."""
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])
LEAF = st.one_of(st.booleans(), st.integers(-(2**65), 2**65), st.floats(allow_nan=False), st.text(max_size=8))
VALUE = st.recursive(LEAF, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                  st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                     max_leaves=6)


def keys_of(model: str) -> dict[str, str]:
    """The key of each of the model's entries, read from its repos entry (the sha and config the Hub served)."""
    sha = cache.load("refs", f"{model}@main", REF_ENTRY)["sha"]
    config = cache.load("repos", f"{model}@{sha}", REPO_ENTRY)["config"]
    return {"refs": f"{model}@main", "repos": f"{model}@{sha}", "inventories": inventory_key(config),
            "shapes": shape_hash(config)}


@pytest.fixture(scope="module")
def warm(hub_server, tmp_path_factory) -> dict[str, Any]:
    """A cache holding every entry of both models, built for real once, their reports and each entry's key."""
    root = tmp_path_factory.mktemp("warm") / "hfmem"
    hub_settings = HubSettings(endpoint=hub_server.url, token=None, cache_dir=str(root.parent / "hf"), offline=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HFMEM_CACHE_DIR", str(root))
        reports = {m: analyse(parse_model_ref(m), hub_settings).to_dict() for m in (MODEL, OTHER)}
        keys = {m: keys_of(m) for m in (MODEL, OTHER)}
    return {"root": root, "reports": reports, "keys": keys}


@pytest.fixture
def cold_hub(hub, warm, tmp_path) -> Path:
    """The test Hub's environment (conftest.hub) with a fresh copy of the warm cache; its root."""
    root = tmp_path / "hfmem_cache"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(warm["root"], root)
    return root


def restore(warm: dict[str, Any]) -> None:
    shutil.rmtree(cache.cache_root(), ignore_errors=True)
    shutil.copytree(warm["root"], cache.cache_root())


def file_bytes(kind: str, key: str, body: bytes) -> bytes:
    """A cache file as hfmem writes one (a head line naming kind, key and the body's digest), around any body."""
    head = json.dumps({"kind": kind, "key": key, "sha256": hashlib.sha256(body).hexdigest()})
    return head.encode() + b"\n" + body


def paths(entry: Any, prefix: tuple = ()) -> list[tuple[tuple, Any]]:
    """Every (path, value) inside an entry, configs left out."""
    found = []
    items = entry.items() if isinstance(entry, dict) else enumerate(entry) if isinstance(entry, list) else ()
    for key, value in items:
        if prefix or key not in OPEN_PARTS:
            found.append((prefix + (key,), value))
            found += paths(value, prefix + (key,))
    return found


def replaced(entry: Any, path: tuple, value: Any) -> Any:
    copy = json.loads(json.dumps(entry))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return copy


@st.composite
def corrupted(draw: st.DrawFn, kind: str, key: str, original: bytes, swapped: bytes) -> tuple[str, bytes]:
    """A bad file in place of `original`: (how, its bytes). Byte-level damage keeps the head line; forged entries
    carry a correct digest, so only the key check or the shape check can refuse them."""
    entry = json.loads(original.partition(b"\n")[2])
    how = draw(st.sampled_from(["truncated", "flipped", "random", "swapped", "retyped", "forged", "key dropped",
                                "key added", "nested"]))
    if how == "truncated":
        return how, original[:draw(st.integers(0, len(original) - 1))]
    if how == "flipped":
        at = draw(st.integers(0, len(original) - 1))
        return how, original[:at] + bytes([original[at] ^ draw(st.integers(1, 255))]) + original[at + 1:]
    if how == "random":
        return how, draw(st.binary(max_size=256))
    if how == "swapped":
        return how, swapped
    if how == "retyped":
        path, old = draw(st.sampled_from(paths(entry)))
        new = draw(VALUE.filter(lambda v: type(v) is not type(old)))
        return f"retyped {path}", file_bytes(kind, key, json.dumps(replaced(entry, path, new)).encode())
    if how == "forged":
        fake = draw(st.dictionaries(st.text(max_size=8), VALUE, max_size=4))
        return how, file_bytes(kind, key, json.dumps(fake).encode())
    if how == "key dropped":
        name = draw(st.sampled_from(sorted(entry)))
        kept = {k: v for k, v in entry.items() if k != name}
        return f"dropped {name}", file_bytes(kind, key, json.dumps(kept).encode())
    if how == "key added":
        return how, file_bytes(kind, key, json.dumps(entry | {draw(st.text(min_size=1, max_size=6).filter(
            lambda k: k not in entry)): draw(VALUE)}).encode())
    depth = draw(st.integers(17, 100_000))
    name = draw(st.sampled_from(sorted(entry)))
    body = json.dumps({k: v for k, v in entry.items() if k != name})[:-1].encode()
    return f"nested {depth}", file_bytes(kind, key, body + b', "%s": ' % name.encode() + b"[" * depth + b"]" * depth
                                         + b"}")


@FUZZ
@given(kind=st.sampled_from(sorted(SCHEMAS)), data=st.data())
def test_a_bad_entry_of_any_kind_is_a_miss_and_is_rewritten(cold_hub, warm, monkeypatch, kind, data):
    """Whatever the damage, the report is the Hub's (for refs, read only offline: a miss), and the entry is whole
    again after the run."""
    restore(warm)
    key, other_key = warm["keys"][MODEL][kind], warm["keys"][OTHER][kind]
    path, other = cache._path(kind, key), cache._path(kind, other_key)
    how, bad = data.draw(corrupted(kind, key, path.read_bytes(), other.read_bytes()))
    path.write_bytes(bad)
    if kind == "shapes":  # the inventory entry answers first; without it the build's inventory is read
        cache._path("inventories", warm["keys"][MODEL]["inventories"]).unlink()
    if kind == "refs":  # read only offline: a bad ref is a miss, which offline cannot fill
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        with pytest.raises(errors.OfflineCacheMissError):
            analyse(parse_model_ref(MODEL))
        monkeypatch.delenv("HF_HUB_OFFLINE")
    assert analyse(parse_model_ref(MODEL)).to_dict() == warm["reports"][MODEL], how
    assert cache.load(kind, key, SCHEMAS[kind]) is not None, f"{how}: not rewritten"


def test_an_entry_reads_back_as_written(cold_hub, warm):
    """The checks refuse nothing hfmem wrote itself: every entry of both models loads, and offline answers."""
    for model in (MODEL, OTHER):
        for kind, key in warm["keys"][model].items():
            assert cache.load(kind, key, SCHEMAS[kind]) is not None, (model, kind)


# ---------------------------------------------------------------------- the reproductions, through the CLI

def json_report(capsys, *args: str) -> tuple[int, dict | None, str]:
    capsys.readouterr()
    code = run([MODEL, "--format", "json", "-m", "lora", "-g", "h100", *args])
    out, err = capsys.readouterr()
    return code, json.loads(out) if code == 0 else None, err


def inventories_path(warm: dict[str, Any]) -> Path:
    return cache._path("inventories", warm["keys"][MODEL]["inventories"])


@pytest.mark.parametrize("body", [
    (b'{"normalised_config": {}, "inventory": {"model_class": 5, "total": "many", "by_component": [], "linears": {},'
     b' "tied": 1, "buffers": null, "approximate": 3}}'),
    b'{"normalised_config": {}, "inventory": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"normalised_config": ' + b"{\"a\": " * 100_000 + b"1" + b"}" * 100_000 + b', "inventory": {}}',
], ids=["wrong types", "100,000 nested brackets", "100,000 nested objects"])
def test_a_forged_inventory_is_rebuilt_not_an_internal_error(cold_hub, warm, capsys, body):
    """The issue's inventories entries, with a correct digest so that only the shape check stands in the way."""
    code, _, clean_err = json_report(capsys)
    assert code == 0, clean_err
    expected = json_report(capsys)[1]
    inventories_path(warm).write_bytes(file_bytes("inventories", warm["keys"][MODEL]["inventories"], body))
    code, report, err = json_report(capsys)
    assert code == 0, err
    assert report == expected
    assert cache.load("inventories", warm["keys"][MODEL]["inventories"], INVENTORY_ENTRY) is not None


def subprocess_run(*args: str, timeout: float = 120) -> tuple[int, str, int]:
    """`hfmem MODEL ARGS` in a fresh process: exit code, stderr and its peak RSS in kB (VmHWM: this program's own,
    where ru_maxrss would start from the forking test process's)."""
    probe = ("import re, sys\nfrom hfmem.cli.main import run\ncode = run(sys.argv[1:])\n"
             "peak = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())[1]\n"
             "sys.stderr.write(f'\\nmaxrss={peak}\\n')\nsys.exit(code)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    done = subprocess.run([sys.executable, "-c", probe, MODEL, "--format", "json", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, check=False)
    err, _, rss = done.stderr.rpartition("\nmaxrss=")
    return done.returncode, err, int(rss)


@pytest.mark.parametrize("make", ["fifo", "symlink to /dev/zero", "directory"])
def test_a_special_file_in_place_of_an_entry_is_a_miss_not_a_hang(cold_hub, warm, make):
    """A FIFO never opened for reading (a read would block forever: the timeout fails it), a symlink to /dev/zero
    never followed (a read would end in MemoryError), a directory: each a miss, replaced by a written entry."""
    path = inventories_path(warm)
    path.unlink()
    {"fifo": os.mkfifo, "directory": os.mkdir, "symlink to /dev/zero": lambda p: os.symlink("/dev/zero", p)}[make](path)
    code, err, _ = subprocess_run(timeout=120)
    assert code == 0, err
    if make != "directory":  # os.replace cannot put a file where a directory is: that entry stays a miss
        assert cache.load("inventories", warm["keys"][MODEL]["inventories"], INVENTORY_ENTRY) is not None


def test_a_200_mb_entry_is_never_read(cold_hub, warm):
    """Past its kind's bound a file is refused by its size: the run's peak RSS is that of a run that finds no entry
    (both read the build's inventory and import transformers for the config), not 440 MB more."""
    path = inventories_path(warm)
    path.unlink()
    _, _, missing_rss = subprocess_run()
    with path.open("r+b") as handle:
        handle.truncate(200 << 20)  # sparse: no disk used, every byte still readable
    code, err, rss = subprocess_run()
    assert code == 0, err
    assert rss < missing_rss + 50_000, (rss, missing_rss)
    assert path.stat().st_size < cache.MAX_ENTRY_BYTES["inventories"]  # rewritten


def test_another_models_entry_is_not_served(cold_hub, warm, capsys):
    """Qwen2.5-0.5B's entries copied over gpt2's (repo, inventory, build): asking for gpt2 answers gpt2."""
    for kind in ("repos", "inventories", "shapes"):
        shutil.copyfile(cache._path(kind, warm["keys"][OTHER][kind]), cache._path(kind, warm["keys"][MODEL][kind]))
    code, report, err = json_report(capsys)
    assert code == 0, err
    assert report["model"] == MODEL
    assert report["parameters"]["total"] == warm["reports"][MODEL]["parameters"]["total"] != \
        warm["reports"][OTHER]["parameters"]["total"]
    assert report["architecture"]["model_type"] == "gpt2"


def test_a_pinned_commit_swapped_for_another_is_not_served(cold_hub, warm, capsys):
    """A pinned run answers from the cache without asking the Hub: a swapped entry there is refused too."""
    sha = warm["keys"][MODEL]["repos"].rpartition("@")[2]
    shutil.copyfile(cache._path("repos", warm["keys"][OTHER]["repos"]), cache._path("repos", f"{MODEL}@{sha}"))
    capsys.readouterr()
    code = run([f"{MODEL}@{sha}", "--format", "json", "-m", "lora", "-g", "h100"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["parameters"]["total"] == warm["reports"][MODEL]["parameters"]["total"]


@pytest.mark.parametrize("ref", [{"repo_id": "a\x00b", "sha": "c"}, {"repo_id": MODEL, "sha": "\x00"},
                                 {"repo_id": "../../..", "sha": "../etc/passwd"}], ids=["NUL id", "NUL sha", "dots"])
def test_a_forged_ref_offline_is_a_miss(cold_hub, warm, capsys, monkeypatch, ref):
    """A ref of the right shape whose strings are hostile (its digest correct): the commit it names has no entry, so
    offline the run is a cache miss (exit 10), never an internal error, and nothing is read outside the cache."""
    key = warm["keys"][MODEL]["refs"]
    cache._path("refs", key).write_bytes(file_bytes("refs", key, json.dumps(ref).encode()))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    capsys.readouterr()
    code = run([MODEL, "--format", "json"])
    err = capsys.readouterr().err
    assert code == errors.ExitCode.OFFLINE_CACHE_MISS, err
    assert err.count("\n") == 1 and "Traceback" not in err
