"""Hand-written SVG for the report's charts: scales, axes, reference lines with labels that do not overlap, the frame.

Colours come from the page's stylesheet (classes, CSS variables), so one chart reads in light and dark mode.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from hfmem.render.markup import asset, tag, text

SVG_NAMESPACE = "http://www.w3.org/2000/svg"
_FRAME = re.compile(r'^<svg id="([^"]+)" viewBox="0 0 (\d+) (\d+)"')
"""The start of every frame `chart` draws: its id, width and height."""
LABEL_GAP = 13.0
"""Vertical pixels between two reference-line labels (one line of 11px text)."""


@dataclass(frozen=True)
class Scale:
    """Data values in [lo, hi] onto pixels [start, end], linearly or logarithmically (`base`: 2 or 10)."""

    lo: float
    hi: float
    start: float
    end: float
    base: int = 0
    """0: linear; 2 or 10: logarithmic, ticks at powers of 2 or at 1, 2, 5 × powers of 10."""

    def _t(self, value: float) -> float:
        """The value on the axis's own scale: itself, or its logarithm."""
        return math.log(value) if self.base else value

    def __call__(self, value: float) -> float:
        """The pixel for a value, to a tenth of a pixel."""
        lo, hi = self._t(self.lo), self._t(self.hi)
        share = (self._t(value) - lo) / (hi - lo) if hi > lo else 0.5
        return round(self.start + share * (self.end - self.start), 1)

    def ticks(self) -> list[float]:
        """Round values within [lo, hi] to label the axis with."""
        if self.base == 2:
            return [2.0 ** k for k in range(math.ceil(math.log2(self.lo)), math.floor(math.log2(self.hi)) + 1)]
        if self.base == 10:
            found = [m * 10.0 ** k for k in range(math.floor(math.log10(self.lo)), math.ceil(math.log10(self.hi)) + 1)
                     for m in (1, 2, 5)]
            return [v for v in found if self.lo <= v <= self.hi]
        step = 10 ** math.floor(math.log10((self.hi - self.lo) / 5 or 1))
        step *= next(m for m in (1, 2, 5, 10) if (self.hi - self.lo) / (step * m) <= 6)
        return [i * step for i in range(math.ceil(self.lo / step), math.floor(self.hi / step) + 1)]


def short_number(value: float) -> str:
    """An axis label: 0.5, 20, 1.5k, 128k."""
    if value >= 1000:
        return f"{value / 1024:g}k" if value % 1024 == 0 else f"{value / 1000:g}k"
    return f"{value:g}"


def spread(wanted: list[float], low: float, high: float, gap: float = LABEL_GAP) -> list[float]:
    """Label positions as near `wanted` as possible, at least `gap` apart, kept within [low, high] where they fit."""
    order = sorted(range(len(wanted)), key=lambda i: wanted[i])
    placed: list[float] = []
    for i in order:
        placed.append(max(wanted[i], placed[-1] + gap) if placed else max(wanted[i], low))
    overflow = placed[-1] - high if placed else 0
    if overflow > 0:  # push the stack back up, never above `low` unless it cannot fit
        placed = [p - overflow for p in placed]
        for k in range(len(placed) - 2, -1, -1):
            placed[k] = min(placed[k], placed[k + 1] - gap)
    out = [0.0] * len(wanted)
    for i, y in zip(order, placed, strict=True):
        out[i] = round(y, 1)
    return out


def y_axis(scale: Scale, x: float, x_end: float, unit: str) -> str:
    """Horizontal grid lines with their labels left of x, and the unit above the axis."""
    parts = [text("text", unit, x=x - 8, y=scale.end - 12, class_="axis-unit", text_anchor="end")]
    for value in scale.ticks():
        y = scale(value)
        parts.append(tag("line", x1=x, x2=x_end, y1=y, y2=y, class_="grid"))
        parts.append(text("text", short_number(value), x=x - 6, y=y + 4, class_="tick", text_anchor="end"))
    return tag("g", *parts, aria_hidden="true")


def x_axis(scale: Scale, y: float, y_top: float, label: str) -> str:
    """Vertical grid lines with their labels under y, and the axis label under them."""
    parts = []
    for value in scale.ticks():
        x = scale(value)
        parts.append(tag("line", x1=x, x2=x, y1=y_top, y2=y, class_="grid"))
        parts.append(text("text", short_number(value), x=x, y=y + 15, class_="tick", text_anchor="middle"))
    parts.append(text("text", label, x=(scale.start + scale.end) / 2, y=y + 32, class_="axis-label",
                      text_anchor="middle"))
    return tag("g", *parts, aria_hidden="true")


def reference_lines(lines: list[tuple[str, float]], scale: Scale, x0: float, x1: float, label_x: float) -> str:
    """Horizontal dashed lines (e.g. each GPU's usable memory) across [x0, x1], labelled right of label_x; labels
    that would overlap are spread apart and joined to their line by a short leader."""
    ys = [scale(value) for _, value in lines]
    labels = spread(ys, min(scale.start, scale.end) + 4, max(scale.start, scale.end) + 4)
    parts = []
    for (name, _), y, ly in zip(lines, ys, labels, strict=True):
        parts.append(tag("g", tag("line", x1=x0, x2=x1, y1=y, y2=y, class_="limit"),
                         tag("polyline", points=f"{x1},{y} {label_x - 4},{ly - 4}", class_="leader"),
                         text("text", name, x=label_x, y=ly, class_="limit-label")))
    return tag("g", *parts)


def legend(entries: list[tuple[str, str]], x: float, y: float, width: float, swatch: str = "rect") -> str:
    """Coloured swatches with their names, left to right, wrapping at `width`; `swatch` "line" draws a line sample."""
    parts, cx, cy = [], x, y
    for css_class, name in entries:
        step = 36 + 6.8 * len(name)
        if cx + step > x + width and cx > x:
            cx, cy = x, cy + 18
        sample = (tag("rect", x=cx, y=cy - 9, width=12, height=12, class_=css_class) if swatch == "rect"
                  else tag("line", x1=cx, x2=cx + 18, y1=cy - 3, y2=cy - 3, class_=css_class))
        parts.append(tag("g", sample, text("text", name, x=cx + (16 if swatch == "rect" else 22), y=cy,
                                           class_="legend-label")))
        cx += step
    return tag("g", *parts, aria_hidden="true")


def chart(chart_id: str, width: int, height: int, title: str, desc: str, *body: str) -> str:
    """The frame: an <svg> image named by its <title> and described by its <desc>, scaled to the page's width."""
    return tag("svg", text("title", title, id=f"{chart_id}-title"), text("desc", desc, id=f"{chart_id}-desc"), *body,
               id=chart_id, viewBox=f"0 0 {width} {height}", width=width, height=height, role="img",
               aria_labelledby=f"{chart_id}-title {chart_id}-desc", class_="chart")


def frame(chart_markup: str) -> tuple[str, int, int]:
    """The id, width and height of a frame drawn by `chart`."""
    found = _FRAME.match(chart_markup)
    if found is None:
        raise ValueError("not a chart drawn by hfmem.render.svg.chart")
    return found[1], int(found[2]), int(found[3])


def standalone(chart_markup: str, title: str) -> str:
    """A chart as an SVG file of its own: the XML declaration and namespace, the charts' stylesheet inline (light or
    dark from the reader's setting), a backdrop in the page colour, and `title` (say, the model) added to its name."""
    chart_id, width, height = frame(chart_markup)
    style = f"<style><![CDATA[{asset('charts.css')}]]></style>"
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            + tag("svg", text("title", title, id="plot-title"), style,
                  tag("rect", width="100%", height="100%", class_="backdrop"), chart_markup,
                  xmlns=SVG_NAMESPACE, viewBox=f"0 0 {width} {height}", width=width, height=height, role="img",
                  aria_labelledby=f"plot-title {chart_id}-title {chart_id}-desc")
            + "\n")
