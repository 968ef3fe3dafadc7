"""The output formats every hfmem command offers (`--format`)."""

from __future__ import annotations

from enum import StrEnum


class OutputFormat(StrEnum):
    table = "table"
    json = "json"
    markdown = "markdown"


class PlotFormat(StrEnum):
    """`--plot-format`: each chart as SVG, or as SVG and PNG (drawn by headless Chromium)."""

    svg = "svg"
    png = "png"
