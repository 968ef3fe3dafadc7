"""`--plot-dir DIR`: each chart of the report as a file of its own, SVG, and with `--plot-format png` also PNG, drawn
from the SVG by headless Chromium or Chrome (hfmem ships no rasteriser); a failure is one line and exit code OUTPUT."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import zlib
from pathlib import Path
from typing import Any

from hfmem import errors
from hfmem.cli.formats import PlotFormat
from hfmem.cli.output_files import write_output
from hfmem.cli.png import crop_height
from hfmem.render.charts import chart_files

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
"""The browsers `--plot-format png` looks for on PATH, in this order."""
PNG_SCALE = 2
"""Device pixels per SVG pixel in a PNG: an 800 × 410 chart becomes 1600 × 820, sharp on high-density screens."""
BROWSER_TIMEOUT_S = 120.0
"""Seconds one browser run may take to draw one chart."""
WINDOW_MARGIN = 200
"""Pixels the browser window is taller than the chart, cut off afterwards: Chromium draws short windows short."""


def write_plots(report: dict[str, Any], directory: Path, plot_format: PlotFormat) -> list[Path]:
    """Write every chart as DIR/NAME.svg (and NAME.png); the files written, SVGs first (kept when PNGs fail)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise errors.OutputError(f"cannot create {directory}: {err.strerror or err}.") from None
    files = chart_files(report)
    for name, (svg, _, _) in files.items():
        write_output(directory / f"{name}.svg", svg)
    written = [directory / f"{name}.svg" for name in files]
    if plot_format is PlotFormat.svg:
        return written
    browser = find_browser(directory)
    for name, (_, width, height) in files.items():
        screenshot(browser, directory / f"{name}.svg", directory / f"{name}.png", width, height)
        written.append(directory / f"{name}.png")
    return written


def find_browser(directory: Path) -> str:
    """The first of BROWSERS on PATH; none: an OutputError saying the SVGs are written."""
    for name in BROWSERS:
        if found := shutil.which(name):
            return found
    raise errors.OutputError(f"--plot-format png needs Chromium or Chrome on PATH (looked for {', '.join(BROWSERS)}); "
                             f"the SVG files are in {directory}.")


def screenshot(browser: str, svg: Path, png: Path, width: int, height: int) -> None:
    """Draw one SVG file as a PNG of width × height SVG pixels, at PNG_SCALE, in a throwaway browser profile, in a
    window WINDOW_MARGIN taller, cut to size."""
    png.unlink(missing_ok=True)  # a PNG left by an earlier run must not pass for this one
    with tempfile.TemporaryDirectory(prefix="hfmem-browser-") as profile:
        args = [browser, "--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--disable-sync",
                "--disable-background-networking", "--disable-component-update", f"--user-data-dir={profile}",
                f"--force-device-scale-factor={PNG_SCALE}", f"--window-size={width},{height + WINDOW_MARGIN}",
                f"--screenshot={png.resolve()}", svg.resolve().as_uri()]
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # Chromium refuses to start as root with its sandbox
            args.insert(2, "--no-sandbox")
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise errors.OutputError(f"cannot draw {png} with {browser}: {type(err).__name__}.") from None
    if done.returncode != 0 or not png.is_file():
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise errors.OutputError(f"cannot draw {png} with {browser} (exit {done.returncode}): {last}")
    try:
        png.write_bytes(crop_height(png.read_bytes(), height * PNG_SCALE))
    except (OSError, ValueError, zlib.error) as err:
        raise errors.OutputError(f"cannot cut {png} to the chart's size: {err}.") from None
