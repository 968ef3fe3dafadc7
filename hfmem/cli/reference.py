"""docs/settings.md's table, generated from the estimate flags (`python -m hfmem._readme` rewrites it)."""

from __future__ import annotations

from hfmem.cli.options import Flag, plan_flags


def code(text: str) -> str:
    """A literal in backticks (a Code for docs/settings.md)."""
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
