"""The generated tables of docs/ (settings.md, exit-codes.md), written from the code so that they cannot drift.

Section `name` lives in `docs/{name}.md` between its `<!-- BEGIN name -->` and `<!-- END name -->` lines;
`python -m hfmem._readme` rewrites them all, and tests/test_readme.py fails while any differs from what SECTIONS makes.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from hfmem.errors import ExitCode

DOCS = Path(__file__).resolve().parent.parent / "docs"


def markdown_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """A GitHub markdown table, one line per row, ending in a newline."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def exit_code_table() -> str:
    """Every `ExitCode` with its meaning: the table of docs/exit-codes.md."""
    return markdown_table(("code", "meaning"), [(str(int(code)), code.phrase) for code in ExitCode])


def settings_table() -> str:
    """Every estimate flag with its default, accepted values and meaning: the table of docs/settings.md."""
    from hfmem.cli.reference import table

    return table()


SECTIONS: dict[str, Callable[[], str]] = {"exit-codes": exit_code_table, "settings": settings_table}
"""Each generated section's name (its markers and its file, docs/NAME.md) and the function that writes its text."""


def path(name: str) -> Path:
    """The file that holds section `name`: one page of docs/ per generated table."""
    return DOCS / f"{name}.md"


def _find(text: str, name: str) -> re.Match[str]:
    """Section `name` of `text`, its body as group 1 (ValueError if its markers are missing)."""
    pattern = rf"^<!-- BEGIN {re.escape(name)} [^\n]*-->\n(.*?)^<!-- END {re.escape(name)} -->$"
    match = re.search(pattern, text, re.DOTALL | re.MULTILINE)
    if match is None:
        raise ValueError(f"{path(name).name} has no <!-- BEGIN {name} --> ... <!-- END {name} --> section.")
    return match


def section(text: str, name: str) -> str:
    """The current body of section `name` in `text`."""
    return _find(text, name)[1]


def generated(name: str) -> str:
    """What section `name` should hold: SECTIONS' text between blank lines (so markdown keeps it a block)."""
    return "\n" + SECTIONS[name]() + "\n"


def regenerate(text: str, name: str) -> str:
    """`text` with section `name` rewritten from the code, everything outside its markers as it was."""
    match = _find(text, name)
    return text[:match.start(1)] + generated(name) + text[match.end(1):]


def main() -> None:
    """Rewrite each generated section in its docs/ page and say, per page, whether anything changed."""
    for name in SECTIONS:
        old = path(name).read_text(encoding="utf-8")
        new = regenerate(old, name)
        if new != old:
            path(name).write_text(new, encoding="utf-8")
        sys.stdout.write(f"{path(name)}: {'updated' if new != old else 'up to date'}\n")


if __name__ == "__main__":
    main()
