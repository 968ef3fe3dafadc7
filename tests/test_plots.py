"""`--plot-dir`: each chart of the HTML report as a standalone SVG file (valid XML, named, drawn, the JSON's figures,
the very chart the page shows, hostile names as text) and, where Chromium or Chrome is on PATH, as a real PNG."""

from __future__ import annotations

import json
import re
import shutil
import struct
import warnings
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path
from typing import Any

import pytest
from test_html import EXAMPLES, HOSTILE, check_figures, hostile_report, parse, resolve

from hfmem.cli.main import run
from hfmem.cli.plots import BROWSERS, PNG_SCALE
from hfmem.cli.png import SIGNATURE, chunk, chunks, crop_height
from hfmem.memory.record import cells, path
from hfmem.text import visible

NS = "{http://www.w3.org/2000/svg}"
NAMES = ("fit", "terms", "seq-len", "micro-batch-size")
DRAWN = {f"{NS}{t}" for t in ("rect", "line", "polyline", "circle", "text")}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))


def export(tmp_path: Path, capsys, *flags: str, model: str = "example:Meta-Llama-3-8B") -> tuple[dict[str, Any], Path]:
    """`hfmem MODEL --format json --plot-dir DIR FLAGS`: the JSON it printed and DIR."""
    out = tmp_path / "plots" / "nested"
    capsys.readouterr()
    assert run([model, "--format", "json", "--plot-dir", str(out), *flags]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out), out


def figures(root: ET.Element, report: dict[str, Any]) -> set[str]:
    """Every drawn mark naming a JSON path holds that path's value; the paths seen."""
    seen = set()
    for node in root.iter():
        if (src := node.get("data-src")) is not None:
            assert float(resolve(report, src)) == float(node.get("data-value")), src
            seen.add(src)
    return seen


def test_each_chart_is_a_standalone_svg_with_the_jsons_figures(tmp_path, capsys):
    report, out = export(tmp_path, capsys, "--html", str(tmp_path / "r.html"))
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{n}.svg" for n in NAMES)
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    seen: set[str] = set()
    for name in NAMES:
        text = (out / f"{name}.svg").read_text(encoding="utf-8")
        root = ET.fromstring(text.encode())  # parses as XML: a stray `<` or `&` would fail here
        assert root.tag == f"{NS}svg" and root.get("width") and root.get("height")
        assert root.find(f"{NS}title").text == "hfmem · example:Meta-Llama-3-8B"
        (chart,) = root.findall(f"{NS}svg")
        assert chart.find(f"{NS}title").text and len(chart.find(f"{NS}desc").text) > 40
        assert all(i in {e.get("id") for e in root.iter()} for i in root.get("aria-labelledby").split())
        assert sum(e.tag in DRAWN for e in chart.iter()) > 20
        assert root.find(f"{NS}rect").get("class") == "backdrop" and "prefers-color-scheme: dark" in text
        inline = re.search(rf'<svg id="{chart.get("id")}".*?</svg>', page, re.S).group()
        assert inline in text  # the same chart, mark for mark, as the HTML report shows
        seen |= figures(root, report)
    fits = {path(c, "total_bytes") for c in cells(report)}
    curves = {f"curves.{a}.required_bytes.{m}.{k}" for a, c in report["curves"].items()
              for m, s in c["required_bytes"].items() for k in range(len(s))}
    assert fits | curves <= seen and any(".per_gpu_bytes.weights" in s for s in seen)


PRICED = ("--tokens", "2e9", "--price", "h100=2.5", "--price", "a100-80gb=1.8", "--price", "rtx4090=0.4",
          "-g", "h100", "-g", "a100", "-g", "rtx4090")


def test_the_frontier_marks_the_setups_no_other_beats(tmp_path, capsys):
    report, out = export(tmp_path, capsys, *PRICED, "--html", str(tmp_path / "r.html"))
    assert sorted(p.stem for p in out.iterdir()) == sorted(NAMES + ("frontier",))
    priced = {path(c, "time"): c["time"] for c in cells(report)
              if isinstance(c.get("time"), dict) and c["time"].get("cost_usd") is not None}
    cell_setups = {(c["method"], c["gpu"]["name"], t["hours"], t["cost_usd"])
                   for c in cells(report) if path(c, "time") in priced for t in [c["time"]]}
    priced |= {f"layout_picks.{i}.frontier.{j}": point for i, entry in enumerate(report["layout_picks"])
               for j, point in enumerate(entry["frontier"])  # each GPU's searched layouts, a cell's own drawn once
               if (entry["method"], entry["gpu"], point["hours"], point["cost_usd"]) not in cell_setups}
    beaten = {src for src, t in priced.items()
              if any((o["hours"] <= t["hours"] and o["cost_usd"] < t["cost_usd"])
                     or (o["hours"] < t["hours"] and o["cost_usd"] <= t["cost_usd"]) for o in priced.values())}
    root = ET.parse(out / "frontier.svg").getroot()
    dots = list(root.iter(f"{NS}circle"))
    assert sorted(d.get("data-src").rsplit(".", 1)[0] for d in dots) == sorted(priced)  # one dot per priced setup
    on = {d.get("data-src").rsplit(".", 1)[0] for d in dots if "on-frontier" in d.get("class")}
    assert on == set(priced) - beaten and 1 < len(on) < len(priced)
    assert figures(root, report) == {d.get("data-src") for d in dots}
    desc = root.find(f"{NS}svg").find(f"{NS}desc").text
    assert desc.count(" USD, ") == len(on) and f"for {len(priced)} priced setups" in desc
    seen = check_figures(parse((tmp_path / "r.html").read_text(encoding="utf-8")), report)
    # each setup: its dot, and its tokens/s, hours, GPU-hours and USD in the table, each traced to the JSON
    assert sum(s.rsplit(".", 1)[0] in priced for s in seen) == 5 * len(priced)


def test_no_prices_no_frontier(tmp_path, capsys):
    """GPUs the default price table has no price for, and no --price: nothing is priced, so no frontier is drawn."""
    report, out = export(tmp_path, capsys, "--tokens", "2e9", "-g", "rtx4090", "-g", "rtx3090")
    assert not any(c["time"].get("cost_usd") for c in cells(report) if isinstance(c.get("time"), dict))
    assert sorted(p.stem for p in out.iterdir()) == sorted(NAMES)


def test_hostile_names_stay_text_in_the_svg(tmp_path, capsys):
    from hfmem.render.charts import chart_files

    model = tmp_path / '<img src=x onerror=alert(1)>"&\'<svg onload=alert(2)>'
    model.mkdir()
    shutil.copy(EXAMPLES / "Meta-Llama-3-8B" / "config.json", model / "config.json")
    report, out = export(tmp_path, capsys, "-m", "qlora", "--gpu", "T4", model=str(model))
    files = [(out / f"{n}.svg").read_text(encoding="utf-8") for n in NAMES]
    files += [svg for svg, _, _ in chart_files(hostile_report(report)).values()]
    for text in files:
        root = ET.fromstring(text.encode())
        assert {e.tag for e in root.iter()} <= {f"{NS}{t}" for t in ("svg", "title", "desc", "style", "g", "rect",
                                                                     "line", "polyline", "circle", "text", "tspan")}
        assert not [k for e in root.iter() for k in e.attrib if k.startswith("on")]
        assert "\u202e" not in text and "<img" not in text and "<script" not in text
    titles = [ET.fromstring(t.encode()).find(f"{NS}title").text for t in files]
    assert titles[0] == f"hfmem · {visible(model)}" and titles[-1] == f"hfmem · {visible(HOSTILE)}"
    assert any(visible(HOSTILE) in (e.text or "") for e in ET.fromstring(files[-4].encode()).iter())  # a GPU row


def png_size_of(data: bytes) -> tuple[int, int]:
    """A PNG's width and height from its IHDR chunk, after checking the signature."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def png_size(png: Path) -> tuple[int, int]:
    return png_size_of(png.read_bytes()[:24])


def test_png_export_draws_each_chart(tmp_path, capsys):
    if not any(shutil.which(b) for b in BROWSERS):
        message = f"none of {', '.join(BROWSERS)} is on PATH: the PNG export did not run"
        warnings.warn(message, stacklevel=1)
        pytest.skip(message)
    _, out = export(tmp_path, capsys, "--plot-format", "png", "-g", "h100", "-g", "a100", "-g", "rtx4090")
    for name in NAMES:
        root = ET.parse(out / f"{name}.svg").getroot()
        png = out / f"{name}.png"
        assert png_size(png) == (PNG_SCALE * int(root.get("width")), PNG_SCALE * int(root.get("height")))
        assert png.stat().st_size > 30_000  # blank, or cut short (the 100-pixel fit grid), it compresses to a few KB


def test_a_png_cut_to_its_top_rows_is_those_rows():
    rows = [bytes([0]) + bytes([r * 40 + c for c in range(12)]) for r in range(4)]  # 3 RGBA pixels, filter none
    header = struct.pack(">IIBBBBB", 3, 4, 8, 6, 0, 0, 0)
    image = SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b"")
    cut = crop_height(image, 2)
    parts = chunks(cut)
    assert [k for k, _ in parts] == [b"IHDR", b"IDAT", b"IEND"] and png_size_of(cut) == (3, 2)
    assert zlib.decompress(parts[1][1]) == b"".join(rows[:2])
    assert cut == crop_height(cut, 2)  # CRCs and lengths as written, so a second cut changes nothing


def test_png_without_a_browser_keeps_the_svgs_and_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    out = tmp_path / "plots"
    assert run(["example:Meta-Llama-3-8B", "--plot-dir", str(out), "--plot-format", "png", "-f", "json"]) == 14
    err = capsys.readouterr().err
    assert err.startswith("hfmem: error: --plot-format png needs Chromium or Chrome") and err.count("\n") == 1
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{n}.svg" for n in NAMES)


def test_plot_format_without_a_folder_is_bad_input(capsys):
    assert run(["example:Meta-Llama-3-8B", "--plot-format", "svg"]) == 2
    err = capsys.readouterr().err
    assert err == "hfmem: error: --plot-format needs --plot-dir DIR, the folder to write the charts in.\n"


def test_an_unwritable_plot_folder_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert run(["example:Meta-Llama-3-8B", "--plot-dir", str(tmp_path / "file" / "sub")]) == 14
    assert capsys.readouterr().err.startswith("hfmem: error: cannot create")


def test_the_documented_charts_are_what_the_command_above_them_draws(tmp_path, capsys):
    """docs/output.md's `--plot-dir docs/img` command, run again: each committed chart is what it writes."""
    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "output.md").read_text(encoding="utf-8")
    (command,) = re.findall(r"^hfmem (example:\S+ .*) --plot-dir docs/img$", page, re.M)
    assert "](img/terms.svg)" in page
    out = tmp_path / "img"
    assert run([*command.split(), "--plot-dir", str(out)]) == 0
    committed = sorted(p.name for p in (root / "docs" / "img").iterdir())
    assert committed == sorted(p.name for p in out.iterdir()) == sorted(f"{n}.svg" for n in NAMES)
    for name in committed:
        assert (root / "docs" / "img" / name).read_bytes() == (out / name).read_bytes(), name
