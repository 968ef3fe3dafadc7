"""hfmem against published peak-memory measurements (fixtures/published_memory.json, via bench/published.py).

Every row is a hfmem command line; the bench's figure must be what the real CLI prints for it, and every setting
the source does not state must say where its value came from.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import published

from hfmem.cli.options import settings_flags
from hfmem.frameworks.torchtune import CONFIGS as TORCHTUNE_CONFIGS
from hfmem.memory.settings import TrainingSettings

ENTRY_KEYS = {"id", "kind", "split", "model", "provenance", "framework", "run", "inferred", "unmodelled", "measured_gib",
              "reported", "notes"}
PROVENANCE_KEYS = {"url", "commit_or_date", "section", "hardware", "metric", "unit"}


@pytest.fixture(scope="module")
def entries() -> list[dict]:
    return published.load_entries()


@pytest.fixture(scope="module")
def table() -> list:
    """Every bench row, computed once when a test asks (not while pytest collects)."""
    return published.rows()


@pytest.fixture(scope="module")
def measured(table) -> list:
    return [r for r in table if r.kind == "measured"]


def _flag_values(args: list[str]) -> dict[str, str | bool]:
    """The settings a command line sets, by field name: a switch as True/False, any other flag as its text."""
    names = {}
    for flag in settings_flags(TrainingSettings):
        for spelling in flag.names:
            on, _, off = spelling.partition("/")
            names[on] = (flag.param, True if off else None)
            if off:
                names[off] = (flag.param, False)
    values: dict[str, str | bool] = {}
    rest = iter(args)
    for arg in rest:
        if arg in names:
            param, switch = names[arg]
            values[param] = switch if switch is not None else next(rest)
    return values


def test_every_row_is_structured(entries) -> None:
    """Provenance, framework and run are fields of their own; no setting is left in a free-text field."""
    ids = [e["id"] for e in entries]
    assert len(ids) == len(set(ids)), "duplicate ids"
    for e in entries:
        assert set(e) == ENTRY_KEYS, (e["id"], set(e) ^ ENTRY_KEYS)
        assert set(e["provenance"]) == PROVENANCE_KEYS, e["id"]
        assert e["provenance"]["url"].startswith("https://"), e["id"]
        assert set(e["framework"]) == {"name", "version"} and e["framework"]["name"], e["id"]
        if e["run"] is None:
            assert e["unmodelled"], f"{e['id']}: a row without a run says why in `unmodelled`"
            continue
        assert (published.ROOT / e["run"]["model"]).is_file(), e["id"]
        if e["run"].get("config"):
            assert e["run"]["config"].startswith("fixtures/training_configs/"), e["id"]
        assert e["run"]["args"][:1] == ["-m"] and len([a for a in e["run"]["args"] if a in ("-m", "--method")]) == 1


def test_every_inferred_setting_is_in_the_run_with_its_source(entries) -> None:
    """Each value the source does not state is named in `inferred` with where it came from, and the run uses it."""
    fields = {f.param for f in settings_flags(TrainingSettings)}
    for e in entries:
        values = _flag_values(e["run"]["args"]) if e["run"] else {}
        for item in e["inferred"]:
            assert set(item) == {"setting", "value", "from"} and item["from"].strip(), (e["id"], item)
            assert item["setting"] in fields, (e["id"], item["setting"])
            assert item["setting"] in values, f"{e['id']}: inferred {item['setting']} is not a flag of the run"
            given = values[item["setting"]]
            assert given == item["value"] if isinstance(given, bool) else float(given) == item["value"] \
                if isinstance(item["value"], (int, float)) else given == item["value"], (e["id"], item, given)


def test_held_out_rows_follow_the_id_rule(entries, table) -> None:
    """`split` is fit or held_out; a held-out row is one whose id hashes to 0 mod 5 (the rule in schema_notes, which
    reads the id, never the error), and the bench reports the held-out rows as a part of their own."""
    assert {e["split"] for e in entries} == {"fit", published.HELD_OUT}
    held_out = [e["id"] for e in entries if e["split"] == published.HELD_OUT]
    assert all(hashlib.sha256(i.encode()).digest()[0] % 5 == 0 for i in held_out), held_out
    count, _ = published.medians_by(table, "split")[published.HELD_OUT]
    assert count == len([r for r in published.scored(table) if r.id in held_out]) > 0
    assert f"{count:3} rows  {published.HELD_OUT}" in published.render(table)


def test_the_markdown_table_is_the_json(entries) -> None:
    """fixtures/published_memory.md lists every entry as the JSON has it (python bench/published.py
    --write-markdown rewrites it)."""
    text = published.MARKDOWN.read_text()
    assert published.markdown(text, entries) == text, "drifted: run python bench/published.py --write-markdown"
    assert f"{len(entries)} entries." in text


def test_no_duplicate_rows(entries) -> None:
    """No two rows of one source with the same settings and the same figure (one measurement counted twice)."""
    seen: dict[tuple, str] = {}
    for e in entries:
        if e["run"] is None:
            continue
        args = tuple(e["run"]["args"])
        key = (e["provenance"]["section"], args, e["measured_gib"])
        assert key not in seen, f"{e['id']} repeats {seen[key]}"
        seen[key] = e["id"]


def test_the_hfmem_program_gives_the_bench_figure(entries, table) -> None:
    """One row through `python -m hfmem` in its own process: the bench's figure is what the program prints (the bench
    computes every row through the same CLI code, so one row checks the seam; rerunning all of them would compare
    hfmem with itself)."""
    entry = next(e for e in entries if e["run"] and "--offload-params" in e["run"]["args"])
    done = subprocess.run([sys.executable, "-m", "hfmem", *published.argv(entry)], capture_output=True, text=True,
                          check=True, cwd=published.ROOT)
    row = next(r for r in table if r.id == entry["id"])
    assert published.figure_gib(json.loads(done.stdout), entry["provenance"]["metric"]) == pytest.approx(
        row.predicted_gib, rel=1e-12)


def test_every_measured_entry_is_predicted(measured) -> None:
    """No measured entry is skipped, and each is scored against its own measurement."""
    assert measured, "fixtures/published_memory.json has no measured entries"
    missing = [r.id for r in measured if r.predicted_gib is None]
    assert not missing, f"no prediction for {missing}"
    for r in measured:
        assert r.predicted_gib > 0 and r.measured_gib > 0, r.id
        assert r.error == pytest.approx(r.predicted_gib / r.measured_gib - 1, abs=1e-9), r.id


def test_median_absolute_error_below_10_percent(table) -> None:
    """The issue's acceptance line, over every measured entry (unstated settings come from the config the source
    names, the framework's source, then hfmem's defaults; nothing is dropped)."""
    assert published.median_abs_error(table) < 0.10, published.render(table)


def test_entries_with_every_setting_from_the_source_are_close(entries, measured) -> None:
    """Rows whose settings come from the source, the config it names or its framework's code (none from an hfmem
    default, none from a torchtune recipe config standing in for one the source does not name): median within 10%."""
    def stand_in(item: dict) -> bool:
        return item["from"].startswith("hfmem default") or item["from"].startswith(TORCHTUNE_CONFIGS)

    own = {e["id"] for e in entries if not any(stand_in(i) for i in e["inferred"])}
    errors = sorted(abs(r.error) for r in measured if r.id in own)
    assert len(errors) >= 40
    assert errors[len(errors) // 2] < 0.10


def test_no_row_gets_worse_than_its_baseline(table) -> None:
    """Against fixtures/published_baseline.json (python bench/published.py --write-baseline): no row more than 3
    points further from its measurement, the median no higher, no row dropped."""
    recorded = json.loads(published.BASELINE.read_text())
    now = published.baseline(table)
    missing = sorted(set(recorded["rows_error_pct"]) - set(now["rows_error_pct"]))
    assert not missing, f"rows no longer scored: {missing}"
    worse = {k: (recorded["rows_error_pct"][k], v) for k, v in now["rows_error_pct"].items()
             if k in recorded["rows_error_pct"] and abs(v) > abs(recorded["rows_error_pct"][k]) + 3}
    assert not worse, f"rows more than 3 points worse (baseline, now): {worse}"
    assert now["median_abs_error_pct"] <= recorded["median_abs_error_pct"] + 0.05
