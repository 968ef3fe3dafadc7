"""docs/'s generated tables match the code they are generated from (`python -m hfmem._readme` fixes them), and the
README's example output is what its command prints."""

from __future__ import annotations

import re

import pytest

from hfmem import _readme
from hfmem.cli.main import run
from hfmem.errors import ExitCode

README = _readme.DOCS.parent / "README.md"


@pytest.mark.parametrize("name", sorted(_readme.SECTIONS))
def test_generated_section_is_up_to_date(name: str) -> None:
    text = _readme.path(name).read_text(encoding="utf-8")
    assert _readme.section(text, name) == _readme.generated(name), f"docs/{name}.md drifted: python -m hfmem._readme"


def test_each_table_has_its_own_page_in_docs() -> None:
    pages = {name: _readme.path(name) for name in _readme.SECTIONS}
    assert all(page.parent == _readme.DOCS and page.is_file() for page in pages.values())
    assert len(set(pages.values())) == len(pages)


def test_exit_code_table_lists_every_code() -> None:
    rows = _readme.exit_code_table().splitlines()[2:]
    assert rows == [f"| {int(code)} | {code.phrase} |" for code in ExitCode]


@pytest.mark.parametrize("name", sorted(_readme.SECTIONS))
def test_regenerate_rewrites_only_between_the_markers(name: str) -> None:
    text = f"intro\n<!-- BEGIN {name} (generated) -->\nstale table\n<!-- END {name} -->\noutro\n"
    new = _readme.regenerate(text, name)
    assert new.startswith(f"intro\n<!-- BEGIN {name} (generated) -->\n") and new.endswith("-->\noutro\n")
    assert "stale" not in new
    assert _readme.section(new, name) == _readme.generated(name)


def test_a_lost_section_is_an_error() -> None:
    with pytest.raises(ValueError, match="exit-codes.md has no"):
        _readme.regenerate("no markers here\n", "exit-codes")


def test_the_readme_example_is_what_its_command_prints(capsys, monkeypatch, tmp_path) -> None:
    """The front page's 80-column fit matrix, run again: the sample may not drift from the CLI."""
    text = README.read_text(encoding="utf-8")
    (command, sample), *_ = re.findall(r"^`hfmem (example:\S+[^`]*)` \(an 80-column terminal\):\n\n```text\n(.*?)```",
                                       text, re.M | re.S)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))
    assert run(command.split()) == 0
    assert "".join(line.rstrip() + "\n" for line in capsys.readouterr().out.splitlines()) == sample


def test_the_front_page_stays_short() -> None:
    """The README is a front page: five commands, five lines of Python and the Action in ten, the rest in docs/."""
    text = README.read_text(encoding="utf-8")
    blocks = dict(re.findall(r"^```(bash|python|yaml)\n(.*?)^```", text.split("## The commands", 1)[1], re.M | re.S))
    assert len(text.splitlines()) <= 200
    assert [line.split()[0] for line in blocks["bash"].splitlines()] == ["hfmem"] * 5
    assert len(blocks["python"].splitlines()) <= 5 and len(blocks["yaml"].splitlines()) <= 10
