"""The output formats every hfmem command offers (`--format`)."""

from __future__ import annotations

from enum import Enum


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"


class PlotFormat(str, Enum):
    """`--plot-format`: each chart as SVG, or as SVG and PNG (drawn by headless Chromium)."""

    svg = "svg"
    png = "png"
