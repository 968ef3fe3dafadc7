"""hfmem.scan.runner and hfmem.scan.export pure parts: lists, shards, the JSONL store, filters and exports."""

from __future__ import annotations

import csv
import io
import json

import pytest

from hfmem import errors
from hfmem.scan.runner import (
    ResultStore,
    error_record,
    ok_record,
    parse_shard,
    read_list,
    iter_records,
    run_scan,
    select_shard,
    settings_digest,
    shard_of,
)
from hfmem.memory.record import COMPACT_COLUMNS, cells, compact_tables
from hfmem.model.load import SCHEMA_VERSION
from hfmem.scan.export import matches_fits, parse_fit_filter, summarise, to_csv, to_markdown

SETTINGS = {"endpoint": "http://hub.test", "offline": False}


def fake_report(model: str, total: int, fit: list | None = None) -> dict:
    """The keys of a compact record (hfmem.memory.record `compact_report`) the exports read; `fit`: fit_entry
    dicts, or (method, anything) as a raw row under that method."""
    entries = [e for e in fit or [] if isinstance(e, dict)]
    tables = compact_tables([[e[k] for k in COMPACT_COLUMNS] for e in entries],
                            {e["gpu"]: e["usable_gib"] for e in entries})
    for method, raw in (e for e in fit or [] if not isinstance(e, dict)):
        tables["fit"]["methods"].setdefault(method, {"total_bytes": 1, "rows": []})["rows"].append(raw)
    return {"schema_version": SCHEMA_VERSION, "model": model, "source": "hub", "revision": None, "sha": "a" * 40,
            "architecture": {"model_type": "llama", "model_class": "LlamaForCausalLM"},
            "parameters": {"total": total, "checkpoint_total": total, "checkpoint_bytes": 2 * total},
            "crosscheck": {"status": "exact"}, **tables}


def fit_entry(method: str, gpu: str, usable_gib: float, fits: bool, gpus_needed: int | None = None) -> dict:
    """One cell as the exports read it: method, GPU, its usable GiB, the verdict and the fewest GPUs needed."""
    return {"method": method, "gpu": gpu, "usable_gib": usable_gib, "verdict": "fits" if fits else "gpus",
            "total_bytes": 10 * 2**30, "max_micro_batch_size": 1 if fits else 0, "gpus_needed": gpus_needed,
            "suggestion": None}


RTX4090 = ("RTX 4090", 23.99, ("4090", "rtx4090", "rtx-4090"))
H100 = ("H100 80GB", 79.2, ("h100",))


def test_read_list_skips_comments_blanks_and_repeats():
    lines = ["# candidates\n", "org/a\n", "\n", "org/b@v1.0  # pinned tag\n", "  org/a \n", "org/c"]
    assert read_list(lines) == ["org/a", "org/b@v1.0", "org/c"]


@pytest.mark.parametrize("text", ["0/4", "5/4", "1", "a/b", "1/0", "-1/3"])
def test_parse_shard_rejects(text):
    with pytest.raises(errors.InvalidInputError):
        parse_shard(text)


def test_shards_partition_the_list_whatever_its_order():
    models = [f"org/model-{i}" for i in range(300)]
    parts = [select_shard(models, (k, 4)) for k in range(1, 5)]
    assert sorted(m for part in parts for m in part) == sorted(models)
    assert all(40 < len(part) < 110 for part in parts)
    assert select_shard(models[::-1], (2, 4)) == parts[1][::-1]
    assert shard_of("org/model-7", 4) == shard_of("org/model-7", 4)
    assert parse_shard("3/8") == (3, 8)


def test_settings_digest_is_order_independent():
    assert settings_digest({"a": 1, "b": [1, 2]}) == settings_digest({"b": [1, 2], "a": 1})
    assert settings_digest({"a": 1}) != settings_digest({"a": 2})


def test_store_refuses_existing_records_without_resume(tmp_path):
    path = tmp_path / "r.jsonl"
    store = ResultStore(path, resume=False)
    store.append(ok_record("org/a", SETTINGS, fake_report("org/a", 10)))
    store.close()
    with pytest.raises(errors.InvalidInputError, match="--resume"):
        ResultStore(path, resume=False)


def test_store_drops_a_line_cut_by_a_kill(tmp_path):
    path = tmp_path / "r.jsonl"
    good = json.dumps(ok_record("org/a", SETTINGS, fake_report("org/a", 10)))
    path.write_text(good + "\n" + good[:40])
    assert [r["model"] for r in iter_records(path)] == ["org/a"]
    store = ResultStore(path, resume=True)
    store.append(error_record("org/b", SETTINGS, errors.GatedRepoError("org/b is gated.")))
    store.close()
    lines = path.read_text().splitlines()
    assert [json.loads(line)["model"] for line in lines] == ["org/a", "org/b"]


def test_second_writer_is_refused(tmp_path):
    path = tmp_path / "r.jsonl"
    first = ResultStore(path, resume=False)
    with pytest.raises(errors.InvalidInputError, match="another scan"):
        ResultStore(path, resume=True)
    first.close()


def test_run_scan_records_each_model_once_and_never_stops(tmp_path):
    def report_fn(ref):
        if ref.name == "org/gated":
            raise errors.GatedRepoError("org/gated is gated.")
        if ref.name == "org/bug":
            raise ZeroDivisionError("boom")
        return fake_report(ref.name, 7)

    models = ["org/a", "org/gated", "org/b@dev", "org/bug", "bad id!"]
    store = ResultStore(tmp_path / "r.jsonl", resume=False)
    stats = run_scan(models, report_fn, SETTINGS, store, concurrency=3)
    store.close()
    records = {r["model"]: r for r in iter_records(tmp_path / "r.jsonl")}
    assert set(records) == set(models) and (stats.ok, stats.failed) == (2, 3)
    assert records["org/gated"]["error"] == {"type": "GatedRepoError", "exit_code": 4, "message": "org/gated is gated."}
    assert records["org/bug"]["error"]["type"] == "InternalError"
    assert records["bad id!"]["error"]["exit_code"] == 2
    assert records["org/b@dev"]["revision"] is None  # the report's own; fake_report has none

    store = ResultStore(tmp_path / "r.jsonl", resume=True)
    again = run_scan(models + ["org/c"], report_fn, SETTINGS, store, concurrency=2)
    other = run_scan(["org/a"], report_fn, SETTINGS | {"offline": True}, store, concurrency=1)
    store.close()
    assert (again.skipped, again.ok, other.ok) == (5, 1, 1)
    assert len(list(iter_records(tmp_path / "r.jsonl"))) == 7


def test_fit_filter_parses_and_matches():
    assert str(parse_fit_filter("QLoRA:rtx-4090")) == "qlora:RTX 4090"
    assert str(parse_fit_filter("lora:my card")) == "lora:my card"  # a custom --gpu name=GiB
    assert str(parse_fit_filter("lora_fa:4090")) == "lora-fa:RTX 4090"  # PEFT's other methods, by alias too
    for bad in ("qlora", "qlora:", ":rtx4090", "adalora:rtx4090", "q lora:x", "-:rtx4090"):
        with pytest.raises(errors.InvalidInputError):
            parse_fit_filter(bad)
    fit = [fit_entry("qlora", RTX4090[0], RTX4090[1], True),
           fit_entry("lora", RTX4090[0], RTX4090[1], False),
           fit_entry("lora", "my card", 40.0, True)]
    record = ok_record("org/a", SETTINGS, fake_report("org/a", 10, fit))
    assert matches_fits(record, [parse_fit_filter("qlora:4090")])
    assert matches_fits(record, [parse_fit_filter("qlora:rtx4090"), parse_fit_filter("lora:My-Card")])
    assert not matches_fits(record, [parse_fit_filter("lora:rtx4090")])
    assert not matches_fits(record, [parse_fit_filter("qlora:rtx4090"), parse_fit_filter("full:h100")])
    assert not matches_fits(error_record("org/x", SETTINGS, errors.RepoNotFoundError("gone")),
                            [parse_fit_filter("qlora:rtx4090")])


def test_exports_deduplicate_and_filter():
    fit = [fit_entry("qlora", *RTX4090[:2], True), fit_entry("qlora", *H100[:2], True),
           fit_entry("full", *RTX4090[:2], False), fit_entry("full", *H100[:2], True)]
    records = [ok_record("org/big", SETTINGS, fake_report("org/big", 70_000_000_000)),
               ok_record("org/small", SETTINGS, fake_report("org/small", 1_000_000, fit)),
               ok_record("org/small", SETTINGS, fake_report("org/small", 1_000_000, fit)),
               error_record("org/gone", SETTINGS, errors.RepoNotFoundError("org/gone was | not found"))]
    rows = list(csv.DictReader(io.StringIO(to_csv(row for row, _ in summarise(records, [])))))
    assert [r["model"] for r in rows] == ["org/big", "org/small", "org/gone"]
    assert rows[1]["fits"] == "qlora:RTX 4090; qlora:H100 80GB; full:H100 80GB"
    assert rows[1]["smallest_fit"] == "qlora: RTX 4090; full: H100 80GB"
    assert rows[2]["error_type"] == "RepoNotFoundError"
    filters = [parse_fit_filter("qlora:rtx4090")]
    assert [(row["model"], chosen) for row, chosen in summarise(records, filters)] == [
        ("org/big", False), ("org/small", True), ("org/gone", False)]
    text = to_markdown([row for row, _ in summarise(records, [])], [])
    assert "3 models: 2 analysed, 1 failed." in text and "was \\| not found" in text
    assert text.index("org/big") < text.index("org/small") and "qlora\\: RTX 4090; full\\: H100 80GB" in text


def test_scan_takes_every_estimate_flag_of_hfmem_model():
    import typer

    from hfmem.cli.main import app
    from hfmem.cli.scan import scan_app

    def flags(typer_app) -> set[str]:
        return {o for p in typer.main.get_command(typer_app).params for o in p.opts}

    model_only = {"MODEL", "model", "--revision", "--format", "-f", "--details"}  # per line as org/name@rev instead
    model_only |= {"--version"}  # hfmem's own version, not an estimate flag
    model_only |= {"--plot-dir", "--plot-format"}  # one model's charts; a scan draws its dashboard (--html)
    assert flags(app) - model_only <= flags(scan_app)


def test_resume_keeps_a_whole_last_record_without_its_newline(tmp_path):
    """The last record is complete but unterminated: it is counted done and kept (it used to be trimmed)."""
    path = tmp_path / "r.jsonl"
    first, last = (json.dumps(ok_record(m, SETTINGS, fake_report(m, 10))) for m in ("org/a", "org/b"))
    path.write_text(first + "\n" + last)
    store = ResultStore(path, resume=True)
    store.append(ok_record("org/c", SETTINGS, fake_report("org/c", 10)))
    store.close()
    assert [r["model"] for r in iter_records(path)] == ["org/a", "org/b", "org/c"]
    assert path.read_text().endswith("\n") and len(path.read_text().splitlines()) == 3


@pytest.mark.parametrize("content", ["org/a\norg/b\n# my models\norg/c", "org/a\n", "not json at all"])
def test_out_that_is_not_a_results_file_is_refused_untouched(tmp_path, content):
    path = tmp_path / "models.txt"
    path.write_text(content)
    for resume in (False, True):
        with pytest.raises(errors.InvalidInputError, match="is not an hfmem scan results file .line 1 is not"):
            ResultStore(path, resume=resume)
    assert path.read_text() == content


def test_out_as_the_model_list_itself_is_refused(tmp_path, capsys):
    from hfmem.cli.main import run

    models = tmp_path / "models.txt"
    models.write_text("org/a\norg/b")
    assert run(["scan", str(models), "-o", str(models)]) == 2
    assert "is not an hfmem scan results file" in capsys.readouterr().err
    assert models.read_text() == "org/a\norg/b"


def test_out_to_a_pipe_is_refused_not_hung(tmp_path):
    """`hfmem scan list -o /dev/stdout | cat` reopened the pipe for reading and waited forever."""
    import subprocess
    import sys

    models = tmp_path / "models.txt"
    models.write_text("org/a\n")
    code = "import sys; from hfmem.cli.main import run; sys.exit(run(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, "scan", str(models), "-o", "/dev/stdout"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, text=True)
    assert done.returncode == 2 and "is not a regular file" in done.stderr


def test_a_full_disk_mid_scan_is_one_line_and_resume_recovers(tmp_path):
    """The file-size limit stands in for a full disk: the write fails mid-record (exit 70 before); the error names the
    file, the cut line stays for --resume, and the resumed scan records every model exactly once."""
    import subprocess
    import sys

    models = tmp_path / "models.txt"
    models.write_text("example:gpt2\nexample:Qwen2.5-0.5B\nexample:Meta-Llama-3-8B\n")
    out = tmp_path / "out.jsonl"
    limited = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
               "resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000)); "
               "from hfmem.cli.main import run; sys.exit(run(sys.argv[1:]))")
    args = ["scan", str(models), "-o", str(out), "-m", "lora", "-g", "h100", "--concurrency", "1"]
    env = {**__import__("os").environ, "HFMEM_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", limited, *args], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 14, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"hfmem: error: cannot write {out}: File too large; the records written so far are kept")
    assert "Traceback" not in done.stderr
    code = "import sys; from hfmem.cli.main import run; sys.exit(run(sys.argv[1:]))"
    resumed = subprocess.run([sys.executable, "-c", code, *args, "--resume"], capture_output=True, text=True,
                             timeout=300, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(r["model"] for r in iter_records(out)) == ["example:Meta-Llama-3-8B", "example:Qwen2.5-0.5B",
                                                             "example:gpt2"]
    assert len(out.read_bytes().splitlines()) == 3


def test_exports_carry_memory_per_method_and_the_settings(tmp_path, monkeypatch):
    """CSV and markdown give, per model and method, the GiB one GPU needs and where it fits, and the settings."""
    from hfmem.cli.main import run

    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))
    models = tmp_path / "models.txt"
    models.write_text("example:gpt2\nexample:Meta-Llama-3-8B\n")
    out, csv_path, md_path = tmp_path / "r.jsonl", tmp_path / "r.csv", tmp_path / "r.md"
    assert run(["scan", str(models), "-o", str(out), "-g", "rtx4090", "-g", "h100", "--seq-len", "1024",
                "--csv", str(csv_path), "--markdown", str(md_path)]) == 0
    rows = {r["model"]: r for r in csv.DictReader(io.StringIO(csv_path.read_text()))}
    reports = {r["model"]: r["report"] for r in iter_records(out)}
    for model, row in rows.items():
        for fit in cells(reports[model]):
            assert float(row[f"{fit['method']}_gib_per_gpu"]) == round(fit["total_bytes"] / 2**30, 2)
        assert row["settings"].startswith("bf16 · adamw · seq 1024 · micro-batch 1")
    assert rows["example:gpt2"]["qlora_fits_on"] == "RTX 4090"
    assert rows["example:Meta-Llama-3-8B"]["full_fits_on"].endswith("× H100 80GB")
    text = md_path.read_text()
    assert "Settings: bf16 · adamw · seq 1024" in text and "full 134 GiB: " not in text  # seq 1024, not 2048
    assert f"lora {float(rows['example:gpt2']['lora_gib_per_gpu']):g} GiB\\: RTX 4090" in text  # `:` escaped


def test_exports_carry_peft_methods_like_lora():
    """A scan of PEFT's other methods exports their GiB and smallest GPU in columns of their own, as LoRA's; the
    dashboard shows a method's columns only when some model has its figure."""
    from hfmem.scan.export import dashboard_data

    fit = [fit_entry("dora", *RTX4090[:2], True), fit_entry("prefix-tuning", H100[0], H100[1], True),
           fit_entry("lora", *RTX4090[:2], True)]
    row = next(row for row, _ in summarise([ok_record("org/x", SETTINGS, fake_report("org/x", 10, fit))], []))
    assert (row["dora_fits_on"], row["prefix-tuning_fits_on"], row["lora_fits_on"]) == ("RTX 4090", "H100 80GB",
                                                                                     "RTX 4090")
    assert row["dora_gib_per_gpu"] == row["lora_gib_per_gpu"] == 10.0 and row["ia3_gib_per_gpu"] is None
    header = to_csv([row]).splitlines()[0]
    assert '"dora_gib_per_gpu","dora_fits_on"' in header and '"prefix-tuning_fits_on"' in header
    assert "dora 10 GiB\\: RTX 4090" in to_markdown([row], [])
    keys = [c["key"] for c in dashboard_data([row], [])["columns"]]
    assert "dora_gib_per_gpu" in keys and "prefix-tuning_fits_on" in keys
    assert "ia3_gib_per_gpu" not in keys and "full_gib_per_gpu" not in keys


def test_exports_survive_malformed_fit_entries():
    """Records in a JSONL file the user hands to --csv may be edited or foreign: odd fit rows are skipped."""
    fit = [fit_entry("qlora", *RTX4090[:2], True), ("qlora", "not a row"), ("full", [7]),
           fit_entry("full", "H100", "x", False, 2), ("lora", [0, 2, 0, "two", None]), ("lora", [0, 99, 0])]
    row = next(row for row, _ in summarise([ok_record("org/x", SETTINGS, fake_report("org/x", 10, fit))], []))
    assert (row["qlora_fits_on"], row["full_fits_on"], row["lora_fits_on"]) == ("RTX 4090", "2× H100", "no fit")
    assert "org/x" in to_csv([row])


