"""A scan's results as one self-contained HTML page: a sortable, filterable table whose rows a small inline script
renders from one JSON blob, so ten thousand models stay a few megabytes and open offline.

The data is hfmem.scan.export.dashboard_data's dict: `columns` ({key, label, kind}), `rows` (one list of values
per model, in column order), `summary` and `settings` lines. Strings are made visible (no invisible or bidi
characters) before they go into the blob; the script writes them with textContent, never as markup.
"""

from __future__ import annotations

from typing import Any

from hfmem import __version__
from hfmem.render.markup import asset, document, json_script, tag, text
from hfmem.text import visible


def clean(value: Any) -> Any:
    """A cell for the blob: strings visible on one line, numbers and None as they are."""
    return visible(value) if isinstance(value, str) else value


def render(title: str, data: dict[str, Any]) -> str:
    """The dashboard page for the data; the first column heads each row."""
    columns = data["columns"]
    blob = {"columns": columns, "rows": [[clean(v) for v in row] for row in data["rows"]]}
    heads = [tag("th", tag("button", text("span", c["label"]), type="button", data_key=c["key"]), scope="col",
                 class_="num" if c["kind"] != "text" else None) for c in columns]
    controls = tag("div",
                   tag("label", "Filter ", tag("input", id="q", type="search", placeholder="model, type or GPU",
                                               aria_controls="rows")),
                   tag("label", "status ", tag("select", text("option", "all", value=""), text("option", "ok"),
                                               text("option", "failed"), id="status", aria_controls="rows")),
                   tag("output", id="shown", aria_live="polite"), class_="controls")
    body = tag("main",
               tag("header", text("h1", title), *(text("p", line, class_="lead") for line in data.get("summary", [])),
                   *(text("p", f"settings: {line}", class_="assumes") for line in data.get("settings", []))),
               controls,
               tag("table", tag("thead", tag("tr", *heads)), tag("tbody", id="rows"), class_="dashboard"),
               text("noscript", "The table is drawn by the page's script; the same rows are in hfmem scan --csv."),
               text("p", f"Made by hfmem {__version__}: one file, no network access. Click a header to sort; "
                         "#sort=KEY&dir=desc&q=TEXT&status=ok in the address sets the view.", class_="made-by"),
               json_script("scan-data", blob), class_="wide")
    return document(title, body, asset("dashboard.js"))
