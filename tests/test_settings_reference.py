"""README.md's settings table is generated from the settings' metadata: it fails here when the two drift apart."""

from __future__ import annotations

import difflib

import pytest

from hfmem.cli.options import plan_flags
from hfmem.constants import DEFAULT_SEQ_LEN
from hfmem.cli.reference import END, README, START, main, table, with_table


def test_readme_settings_table_matches_the_code() -> None:
    text = README.read_text(encoding="utf-8")
    expected = with_table(text)
    diff = "".join(difflib.unified_diff(text.splitlines(True), expected.splitlines(True), "README.md", "generated"))
    assert expected == text, f"README.md's settings table is stale; run `python -m hfmem.cli.reference --update`:\n{diff}"


def test_the_table_has_a_row_per_flag_with_its_spellings_default_and_values() -> None:
    rows = table().splitlines()[2:]
    assert len(rows) == len(plan_flags())
    for flag, row in zip(plan_flags(), rows):
        assert row.startswith("| " + " ".join(f"`{n}`" for n in flag.names) + " |")
    text = "\n".join(rows)
    assert "| `--batch-size` `-b` | `1` | an integer >= 1 |" in text
    assert "| `--loss-upcast/--no-loss-upcast` | on | on or off |" in text
    assert f"| `--seq-len` | {DEFAULT_SEQ_LEN}, or the model's maximum if smaller |" in text
    assert "`amp-bf16` (`amp_bf16`)" in text and "`adamw_foreach` (`adamw_torch`, `adam`, `torch_adamw`)" in text


def test_check_reports_drift_and_update_fixes_it(tmp_path, capsys) -> None:
    readme = tmp_path / "README.md"
    stale = f"# x\n\n{START}\n| old |\n{END}\nafter\n"
    readme.write_text(stale, encoding="utf-8")
    assert main(["--readme", str(readme)]) == 1
    assert "-| old |" in capsys.readouterr().out and readme.read_text(encoding="utf-8") == stale
    assert main(["--readme", str(readme), "--update"]) == 0
    updated = readme.read_text(encoding="utf-8")
    assert updated == f"# x\n\n{START}\n\n{table()}\n{END}\nafter\n"
    assert main(["--readme", str(readme)]) == 0


@pytest.mark.parametrize("text", ["no markers here\n", f"{END}\n{START}\n"])
def test_missing_markers_are_a_one_line_error(tmp_path, capsys, text: str) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(text, encoding="utf-8")
    assert main(["--readme", str(readme)]) == 2
    err = capsys.readouterr().err
    assert "no settings table" in err and err.count("\n") == 1
