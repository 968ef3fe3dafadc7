"""README.md's settings table, generated from the estimate flags: `python -m hfmem.cli.reference [--update]`.

The table sits between two marker comments in the "### Settings" section. A plain run prints how README.md
differs from the code (exit 1 if it does); --update rewrites the table in place.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from hfmem.cli.options import Flag, plan_flags

README = Path(__file__).resolve().parents[2] / "README.md"
START = "<!-- BEGIN settings (generated from hfmem/memory/settings.py by `python -m hfmem.cli.reference --update`) -->"
END = "<!-- END settings -->"


def code(text: str) -> str:
    """A literal in backticks (a Code for the README)."""
    return f"`{text}`"


def default_text(flag: Flag) -> str:
    """A flag's default as the table shows it."""
    if flag.shown:
        return flag.shown
    if flag.kind is bool:
        return "on" if flag.default else "off"
    return code(flag.default)


def row(flag: Flag) -> str:
    """One table row: flag spellings, default, accepted values, meaning."""
    cells = [" ".join(code(n) for n in flag.names), default_text(flag), flag.describe(code), flag.doc]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def table() -> str:
    """The settings table: a row per estimate flag, ending in a newline."""
    head = ["| flag | default | accepts | meaning |", "|---|---|---|---|"]
    return "\n".join([*head, *(row(f) for f in plan_flags())]) + "\n"


def with_table(text: str) -> str:
    """README text with the table between its markers regenerated (set off by blank lines); ValueError without them."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README has no settings table between {START!r} and {END!r}")
    return text[:start + len(START)] + "\n\n" + table() + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    """Check README.md against the code (exit 1 and a diff when they differ), or rewrite it with --update."""
    parser = argparse.ArgumentParser(prog="python -m hfmem.cli.reference", description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite the table in README.md")
    parser.add_argument("--readme", type=Path, default=README, help="the README to check or update")
    args = parser.parse_args(argv)
    try:
        text = args.readme.read_text(encoding="utf-8")
        expected = with_table(text)
    except (OSError, ValueError) as err:
        print(f"hfmem.cli.reference: error: {err}", file=sys.stderr)
        return 2
    if expected == text:
        return 0
    if args.update:
        args.readme.write_text(expected, encoding="utf-8")
        return 0
    sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), expected.splitlines(True),
                                               str(args.readme), "generated from the settings"))
    return 1


if __name__ == "__main__":
    sys.exit(main())
