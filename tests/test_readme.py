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
    text = "intro\n" + "".join(f"<!-- BEGIN {name} (generated) -->\nstale table\n<!-- END {name} -->\nbetween\n"
                                for name in _readme.SECTIONS) + "outro\n"
    new = _readme.regenerate(text)
    assert new.startswith(f"intro\n<!-- BEGIN {next(iter(_readme.SECTIONS))} (generated) -->\n")
    assert new.endswith("between\noutro\n") and new.count("between\n") == len(_readme.SECTIONS)
    assert "stale" not in new
    assert all(_readme.section(new, name) == _readme.generated(name) for name in _readme.SECTIONS)


def test_a_lost_section_is_an_error() -> None:
    with pytest.raises(ValueError, match="exit-codes"):
        _readme.regenerate("no markers here\n")
