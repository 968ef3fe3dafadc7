"""Untrusted text (model ids, config values, error messages) made inert per output format: one function a format.

HTML has its own in render/markup.py (html.escape over `visible`); markdown and CSV are here, below every layer,
so the renderers, the scan's exports and the Action's comment escape the same way.
"""

from __future__ import annotations

import re
from typing import Any

# Control, zero-width and bidi-override characters: they could hide or reorder what a reader sees.
_INVISIBLE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()+!|~:-])")
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
"""What makes a spreadsheet read a CSV cell as a formula (OWASP, "CSV Injection"); such text cells get a `'`."""


def visible(text: Any) -> str:
    """Untrusted text on one line, its invisible characters turned into spaces (every renderer escapes from this)."""
    return " ".join(_INVISIBLE.sub(" ", str(text)).split())


def markdown(text: Any) -> str:
    """Neutralise markdown, HTML, @mentions and #references in untrusted text (model ids, paths, errors).

    HTML goes as entities, so the result is inert in raw HTML blocks too; `@` and `#` get a zero-width
    space after them, since GitHub links mentions and issue numbers even when backslash-escaped.
    """
    flat = visible(text)
    flat = flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN_SPECIAL.sub(r"\\\1", flat).replace("#", "#&#8203;").replace("@", "@&#8203;")


def csv_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as written: text starting with a formula prefix gets a leading `'` (OWASP's
    advice); numbers stay numbers, negative ones too, since only text (a str) is neutralised."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_PREFIXES) else value
