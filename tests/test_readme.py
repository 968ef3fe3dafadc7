"""README.md's generated sections match the code they are generated from (`python -m hfmem._readme` fixes them)."""

from __future__ import annotations

import pytest

from hfmem import _readme
from hfmem.errors import ExitCode


@pytest.mark.parametrize("name", sorted(_readme.SECTIONS))
def test_readme_section_is_up_to_date(name: str) -> None:
    text = _readme.README.read_text(encoding="utf-8")
    assert _readme.section(text, name) == _readme.generated(name), "README drifted: run python -m hfmem._readme"


def test_exit_code_table_lists_every_code() -> None:
    rows = _readme.exit_code_table().splitlines()[2:]
    assert rows == [f"| {int(code)} | {code.phrase} |" for code in ExitCode]


def test_regenerate_rewrites_only_between_the_markers() -> None:
    text = "intro\n<!-- BEGIN exit-codes (generated) -->\nstale table\n<!-- END exit-codes -->\noutro\n"
    new = _readme.regenerate(text)
    assert new.startswith("intro\n<!-- BEGIN exit-codes (generated) -->\n")
    assert new.endswith("<!-- END exit-codes -->\noutro\n")
    assert "stale" not in new and _readme.section(new, "exit-codes") == _readme.generated("exit-codes")


def test_a_lost_section_is_an_error() -> None:
    with pytest.raises(ValueError, match="exit-codes"):
        _readme.regenerate("no markers here\n")
