"""`hfmem scan` end to end against the fake Hub: one record per model, failures recorded, shared builds,
429s honoured, kill + resume equal to an uninterrupted scan, Hub listing, shards and exports."""

from __future__ import annotations

import csv
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hfmem.cli.main import run
from hfmem.memory.record import cells
from hfmem.scan.runner import iter_records
from hubserver import sha_of
from programs import script, start
from scan_repos import ORG, add_scan_repos

SECRET = "hf_scan_test_secret_token"


def by_model(path: Path) -> dict[str, dict]:
    """The records of a JSONL file by model, asserting every line is whole and no model repeats."""
    lines = path.read_bytes().splitlines()
    records = list(iter_records(path))
    assert len(records) == len(lines), "a line that is not a whole record"
    models = [r["model"] for r in records]
    assert len(models) == len(set(models)), "duplicate records"
    return {r["model"]: r for r in records}


def write_list(tmp_path: Path, models: list[str]) -> Path:
    path = tmp_path / "models.txt"
    path.write_text("# generated candidates\n" + "\n".join(models) + "\n")
    return path


def test_scan_records_every_model_once(hub, tmp_path, capsys):
    repos = add_scan_repos(hub, 200)
    hub.inject(f"/api/models/{ORG}/ft-0003*", status=429, retry_after=1, times=2)
    hub.inject(f"*/{ORG}/ft-0011/resolve/*", latency=0.3, times=None)
    out = tmp_path / "out.jsonl"
    code = run(["scan", str(write_list(tmp_path, repos.models)), "-o", str(out), "--token", SECRET,
                "--csv", str(tmp_path / "out.csv"), "--markdown", str(tmp_path / "out.md"), "--concurrency", "16", "--gpu", "rtx4090"])
    captured = capsys.readouterr()
    records = by_model(out)
    assert set(records) == set(repos.models)
    for model, record in records.items():
        expected = repos.failures.get(model)
        if expected is None:
            repo_id, _, ref = model.partition("@")
            assert record["status"] == "ok" and record["sha"] == sha_of(repo_id, ref or "main"), model
            assert record["report"]["parameters"]["total"] == record["report"]["parameters"]["checkpoint_total"]
        else:
            assert record["status"] == "error" and expected in ("*", record["error"]["type"]), (model, record["error"])
    assert records[f"{ORG}/ft-0003"]["status"] == "ok"  # two 429s waited out
    assert code == 1 and captured.err.strip().endswith(f"{len(repos.failures)} of {len(records)} models failed; "
                                                      f"their records in {out} say why.")
    assert "1 meta-model builds" in captured.err  # four configs, one shape (they differ in rope_theta only)
    assert SECRET not in captured.err + captured.out + out.read_text()
    rows = list(csv.DictReader((tmp_path / "out.csv").open()))
    assert len(rows) == len(records) and sum(r["status"] == "error" for r in rows) == len(repos.failures)
    assert f"{len(records)} models: {len(records) - len(repos.failures)} analysed" in (tmp_path / "out.md").read_text()


def test_fits_filter_on_real_reports(hub, tmp_path, capsys):
    repos = add_scan_repos(hub, 6)
    out = tmp_path / "out.jsonl"
    plan = ["--method", "qlora", "--method", "lora", "--gpu", "rtx4090", "--gpu", "tiny=0.5"]  # 0.5 GiB: no room
    run(["scan", str(write_list(tmp_path, repos.models)), "-o", str(out), *plan, "--fits", "qlora:4090",
         "--csv", str(tmp_path / "fit.csv")])
    analysed = sorted(m for m, r in by_model(out).items() if r["status"] == "ok")
    assert len(analysed) == 6 and all(len(cells(r["report"])) == 4 for r in by_model(out).values() if r["report"])
    rows = list(csv.DictReader((tmp_path / "fit.csv").open()))
    assert sorted(r["model"] for r in rows) == analysed
    assert {r["fits"] for r in rows} == {"qlora:RTX 4090; lora:RTX 4090"}
    assert {r["smallest_fit"] for r in rows} == {"qlora: RTX 4090; lora: RTX 4090"}

    assert run(["scan", "-o", str(out), "--csv", str(tmp_path / "none.csv"), "--fits", "qlora:tiny"]) == 0
    assert (tmp_path / "none.csv").read_text().count("\n") == 1  # the header row only
    assert run(["scan", str(tmp_path / "models.txt"), *plan, "--fits", "full:rtx4090"]) == 2
    assert run(["scan", str(tmp_path / "models.txt"), *plan, "--fits", "qlora:h100"]) == 2
    assert "not among the GPUs fitted" in capsys.readouterr().err


def test_listing_shards_and_concatenated_parts(hub, tmp_path, capsys):
    add_scan_repos(hub, 30)
    assert run(["scan", "--author", ORG, "--list-only"]) == 0
    listed = capsys.readouterr().out.split()
    assert listed == sorted(listed) and len(listed) == 34  # 30 fine-tunes + 4 broken repos; not gated-hidden
    parts = []
    for k in (1, 2, 3):
        assert run(["scan", "--author", ORG, "--shard", f"{k}/3", "--list-only"]) == 0
        parts.append(capsys.readouterr().out.split())
    assert sorted(m for p in parts for m in p) == listed and all(parts)
    assert run(["scan", "--search", "ft-002", "--limit", "5", "--list-only"]) == 0
    assert capsys.readouterr().out.split() == [f"{ORG}/ft-002{i}" for i in range(5)]

    models = write_list(tmp_path, [f"{ORG}/ft-{i:04d}" for i in range(12)])
    for k in (1, 2):
        run(["scan", str(models), "--shard", f"{k}/2", "-o", str(tmp_path / f"part-{k}.jsonl")])
    (tmp_path / "all.jsonl").write_bytes(b"".join((tmp_path / f"part-{k}.jsonl").read_bytes() for k in (1, 2)))
    assert set(by_model(tmp_path / "all.jsonl")) == {f"{ORG}/ft-{i:04d}" for i in range(12)}
    assert run(["scan", "-o", str(tmp_path / "all.jsonl"), "--markdown", str(tmp_path / "all.md")]) == 0
    assert "12 models: 11 analysed, 1 failed." in (tmp_path / "all.md").read_text()  # ft-0007 is gated


def test_refuses_to_append_without_resume_and_bad_options(hub, tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    out.write_text('{"model": "a/b", "settings_digest": "x", "status": "ok"}\n')
    assert run(["scan", str(write_list(tmp_path, ["a/b"])), "-o", str(out)]) == 2
    assert run(["scan", str(tmp_path / "models.txt"), "--shard", "4/3"]) == 2
    assert run(["scan", str(tmp_path / "models.txt"), "--fits", "qlora"]) == 2
    assert run(["scan", str(tmp_path / "nope.txt")]) == 2
    assert run(["scan"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 5 and all(line.startswith("hfmem: error: ") for line in lines)
    assert "--resume" in lines[0] and "K/N" in lines[1] and "METHOD:GPU" in lines[2]


def _start_scan(list_path: Path, out: Path, *extra: str) -> subprocess.Popen:
    """The installed `hfmem scan` in a process of its own (it inherits the environment pointing at the fake Hub)."""
    return start(script(out.parent, "hfmem"), "scan", str(list_path), "-o", str(out), "--concurrency", "4", *extra)


def _wait_for_records(process: subprocess.Popen, out: Path, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if out.exists() and out.read_bytes().count(b"\n") >= count:
            return
        time.sleep(0.05)
    pytest.fail(f"scan ended or stalled before {count} records: {process.communicate()}")


def test_killed_and_resumed_scan_equals_an_uninterrupted_one(hub, tmp_path):
    repos = add_scan_repos(hub, 80)
    hub.inject("*/resolve/*", latency=0.05, times=None)  # slow enough to interrupt midway
    models = write_list(tmp_path, repos.models)
    out = tmp_path / "resumed.jsonl"

    first = _start_scan(models, out)
    _wait_for_records(first, out, 10)
    first.send_signal(signal.SIGINT)
    _, err = first.communicate(timeout=60)
    assert first.returncode == 130 and err.strip().splitlines()[-1].endswith("rerun with --resume.")
    interrupted = len(by_model(out))

    second = _start_scan(models, out, "--resume")
    _wait_for_records(second, out, interrupted + 10)
    second.kill()  # SIGKILL: perhaps mid-line
    second.wait(timeout=10)
    with out.open("ab") as handle:
        handle.write(b'{"model": "cut-off-by-the-kill')  # as if the kill hit mid-write

    hub.clear_faults()
    assert run(["scan", str(models), "-o", str(out), "--resume", "--concurrency", "16"]) == 1
    assert run(["scan", str(models), "-o", str(tmp_path / "straight.jsonl"), "--concurrency", "16"]) == 1
    resumed, straight = by_model(out), by_model(tmp_path / "straight.jsonl")
    assert len(resumed) == len(repos.models) and resumed == straight
