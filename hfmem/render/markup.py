"""HTML and SVG markup from Python values: every text and attribute escaped, JSON embedded inert, one page shell.

Nothing here reaches the network: the stylesheet and script are read from `assets/` and inlined.
"""

from __future__ import annotations

import html
import json
from functools import cache
from importlib.resources import files
from typing import Any

from hfmem.text import visible


def escape(value: Any) -> str:
    """Untrusted text as inert HTML/SVG text or attribute value: one line, no invisible characters, `<>&"'` as
    entities (so `<script>`, `</svg>` or a quote in a model name stay text)."""
    return html.escape(visible(value), quote=True)


def attributes(attrs: dict[str, Any]) -> str:
    """` name="value"` pairs; `class_` -> class, `data_src` -> data-src; None and False are left out, True is bare."""
    out = []
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        name = key.rstrip("_").replace("_", "-")
        out.append(f" {name}" if value is True else f' {name}="{escape(value)}"')
    return "".join(out)


VOID = frozenset({"input"})
"""The HTML elements written here that have no content and no end tag."""


def tag(name: str, *children: str, **attrs: Any) -> str:
    """An element around children that are already markup (build them with `tag`, `text` or `escape`)."""
    if name in VOID:
        return f"<{name}{attributes(attrs)}>"
    return f"<{name}{attributes(attrs)}>{''.join(children)}</{name}>"


def text(name: str, content: Any, **attrs: Any) -> str:
    """An element holding escaped text."""
    return tag(name, escape(content), **attrs)


def number(shown: str, value: float, src: str | None, unit: str) -> str:
    """A figure from the report: the text shown, the raw value and its JSON path (`fit.3.total_bytes`; None
    for a figure the record derives rather than writes), and the unit it is shown in (`GiB`, `count`), so a reader
    or a test can trace every number to the JSON."""
    return tag("data", escape(shown), value=repr(value), data_src=src, data_unit=unit)


def json_script(element_id: str, data: Any) -> str:
    """Data for the page's script, inert: `<`, `>` and `&` as JSON escapes, so no `</script>` can close it."""
    blob = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    blob = blob.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" id="{escape(element_id)}">{blob}</script>'


@cache
def asset(name: str) -> str:
    """A stylesheet or script shipped in hfmem/render/assets/."""
    return files("hfmem.render").joinpath("assets", name).read_text(encoding="utf-8")


def document(title: str, body: str, script: str = "") -> str:
    """A whole self-contained page: the stylesheets inline (the charts' colours, then the page's), then the body,
    then an optional inline script."""
    tail = f"<script>{script}</script>" if script else ""
    return ("<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<meta name="color-scheme" content="light dark">'
            f"<title>{escape(title)}</title><style>{asset('charts.css')}{asset('report.css')}</style></head>"
            f"<body>{body}{tail}</body></html>\n")
