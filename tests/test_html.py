"""The HTML report and the scan dashboard: every figure shown traces to the report's JSON, the charts draw those
figures, hostile names and config values stay text, nothing points outside the file; and, where Debian's Chromium
is installed, both pages render headless with no console error and no network request, and the dashboard sorts and
filters."""

from __future__ import annotations

import copy
import json
import math
import re
import shutil
import struct
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from hfmem.cli.main import run
from hfmem.render.labels import fit_grid
from hfmem.memory.record import cells, estimates, path
from hfmem.scan.runner import iter_records
from hfmem.text import visible
from hfmem.units import GIB

EXAMPLES = Path(__file__).resolve().parent.parent / "hfmem" / "examples"
HOSTILE = '<script>alert(1)</script> "q" \'s & </svg><img src=x onerror=alert(2)> \u202eevil'
CHROMIUM = Path("/usr/bin/chromium")
NUMBER = re.compile(r"[+-]?\d[\d,]*(?:\.\d+)?")


class Node:
    """One parsed element: tag, attributes, children (Nodes and text strings)."""

    def __init__(self, tag: str, attrs: dict[str, str], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent, self.children = tag, attrs, parent, []

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            if isinstance(child, Node):
                yield from child.iter()

    def all(self, tag: str) -> list[Node]:
        return [n for n in self.iter() if n.tag == tag]

    def by_id(self, element_id: str) -> Node:
        (found,) = [n for n in self.iter() if n.attrs.get("id") == element_id]
        return found


class Dom(HTMLParser):
    """html.parser into a tree of Nodes (void elements closed at once)."""

    VOID = frozenset({"meta", "input", "br", "img", "link", "hr"})

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = self.current = Node("#root", {}, None)
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs}, self.current)
        self.current.children.append(node)
        if tag not in self.VOID:
            self.current = node

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.current.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.current))

    def handle_endtag(self, tag: str) -> None:
        node = self.current
        while node.parent is not None and node.tag != tag:
            node = node.parent
        assert node.tag == tag, f"</{tag}> closes nothing"
        self.current = node.parent  # type: ignore[assignment]

    def handle_data(self, data: str) -> None:
        self.current.children.append(data)


def parse(page: str) -> Node:
    return Dom(page).root


def resolve(data: Any, path: str) -> Any:
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


def check_figures(root: Node, report: dict[str, Any]) -> list[str]:
    """Every element naming a JSON path holds that path's value, and the number it shows (as text in its unit, or
    in a drawn mark's hover title) is that value; returns the paths seen."""
    seen = []
    for node in root.iter():
        src = node.attrs.get("data-src")
        if src is None:
            continue
        value = float(node.attrs.get("value") or node.attrs["data-value"])
        assert float(resolve(report, src)) == value, src
        if "data-unit" not in node.attrs:  # a drawn mark: its hover title gives the figure (bytes in GiB)
            unit = node.attrs.get("data-mark", "GiB")
            shown = {"GiB": f"{value / GIB:,.2f} GiB", "USD": f"${value:,.2f}", "h": f"{value:,.2f} h"}[unit]
            assert shown in node.all("title")[0].text(), src
        else:
            shown = node.text().strip()
            match = NUMBER.search(shown)
            assert match, (src, shown)
            figure = float(match.group().replace(",", ""))
            if node.attrs["data-unit"] == "count":
                assert figure == value, (src, shown)
            else:  # rounded to the decimals shown: GiB from bytes, the others as they are (h, USD, tokens/s)
                decimals = len(match.group().partition(".")[2])
                expected = value / GIB if node.attrs["data-unit"] == "GiB" else value
                assert abs(figure - expected) <= 0.5 * 10 ** -decimals + 1e-9, (src, shown, expected)
        seen.append(src)
    return seen


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def llama(tmp_path, capsys) -> tuple[dict[str, Any], str]:
    """`hfmem example:Meta-Llama-3-8B --format json --html FILE`: the JSON it printed and the page it wrote."""
    page = tmp_path / "report.html"
    capsys.readouterr()
    assert run(["example:Meta-Llama-3-8B", "--format", "json", "--html", str(page)]) == 0
    return json.loads(capsys.readouterr().out), page.read_text(encoding="utf-8")


def test_every_figure_on_the_page_is_the_jsons(llama):
    report, page = llama
    root = parse(page)
    seen = check_figures(root, report)
    totals = [path(c, "total_bytes") for c in cells(report)]
    fits = set(totals)
    for src in fits:  # each cell's total in the grid and in its table (cells of one estimate share its total)
        assert seen.count(src) >= 2 * totals.count(src), src
    grid = {n.attrs["data-src"] for n in root.by_id("chart-fit").iter() if "data-src" in n.attrs}
    assert grid == fits
    for axis, curve in report["curves"].items():
        for method, series in curve["required_bytes"].items():
            for k in range(len(series)):
                assert seen.count(f"curves.{axis}.required_bytes.{method}.{k}") == 2  # a dot and a table cell
    for method in report["estimates"]:
        assert f"estimates.{method}.per_gpu_bytes.total" in seen and f"estimates.{method}.per_gpu_bytes.required" in seen
    assert {path(c, "max_seq_len") for c in cells(report)} <= set(seen)
    assert "parameters.total" in seen and root.all("h1")[0].text() == "example:Meta-Llama-3-8B"


def test_the_bars_stack_every_term_to_the_total(llama):
    """The stacked terms less the overlap are the training step's total (the estimate's, unless another phase needs
    more), and bar heights are the terms to one scale."""
    from hfmem.render.charts import OVERLAP, PHASES, TERMS

    report, page = llama
    full = estimates(report)
    for est in full:
        terms = est["per_gpu_bytes"]
        assert max(sum(terms[t] for t, _ in TERMS) - terms[OVERLAP], *(terms[p] for p, _ in PHASES)) == terms["total"]
    chart = parse(page).by_id("chart-terms")
    rects = [n for n in chart.all("rect") if "data-src" in n.attrs and "overlap" not in n.attrs["class"]]
    assert len(rects) >= 3 * 4
    scale = [float(r.attrs["height"]) / (float(r.attrs["data-value"]) / GIB) for r in rects]
    for rect, k in zip(rects, scale):
        assert float(rect.attrs["height"]) == pytest.approx(float(rect.attrs["data-value"]) / GIB * scale[0], abs=0.25)
    totals = [float(line.attrs["y1"]) for line in chart.all("line") if line.attrs.get("class") == "total-mark"]
    strips = {n.attrs["data-src"].split(".")[1]: n for n in chart.all("rect")
              if n.attrs.get("class") == "overlap" and "data-src" in n.attrs}
    order = [e["method"] for e in full]
    assert len(totals) == 3 and set(strips) == {e["method"] for e in full if e["per_gpu_bytes"][OVERLAP]}
    for method, strip in strips.items():  # the strip runs from the top of the stack down to the total
        top = min(float(r.attrs["y"]) for r in rects if r.attrs["data-src"].startswith(f"estimates.{method}."))
        assert float(strip.attrs["y"]) == pytest.approx(top, abs=0.15)
        assert float(strip.attrs["y"]) + float(strip.attrs["height"]) == pytest.approx(totals[order.index(method)],
                                                                                       abs=0.25)


def test_curves_are_drawn_on_log_axes_from_the_json(llama):
    report, page = llama
    root = parse(page)
    for axis, curve in report["curves"].items():
        dots = [n for n in root.by_id(f"chart-{axis}").all("circle")]
        assert len(dots) == len(curve["points"]) * len(curve["required_bytes"])
        ys = [(math.log(float(d.attrs["data-value"])), float(d.attrs["cy"])) for d in dots]
        (a0, y0), (a1, y1) = min(ys), max(ys)
        for a, y in ys:  # cy is linear in log(bytes)
            assert y == pytest.approx(y0 + (a - a0) * (y1 - y0) / (a1 - a0), abs=0.25)
        xs = [float(d.attrs["cx"]) for d in dots[:len(curve["points"])]]
        logs = [math.log(p) for p in curve["points"]]
        for p, x in zip(logs, xs):  # cx is linear in log(point)
            assert x == pytest.approx(xs[0] + (p - logs[0]) * (xs[-1] - xs[0]) / (logs[-1] - logs[0]), abs=0.25)


def test_grid_colours_follow_the_fit_and_name_the_change(llama):
    report, page = llama
    drawn = [g for g in parse(page).by_id("chart-fit").all("g") if g.attrs.get("class") == "cell"]
    methods, rows = fit_grid(report)
    decoded = [by[m] for _, _, by in rows for m in methods if m in by]  # row by row, as the grid draws them
    assert len(drawn) == len(decoded) == len(cells(report))
    kinds = set()
    for cell, fit in zip(drawn, decoded):
        assert cell.all("tspan")[0].attrs["data-src"] == path(fit, "total_bytes")
        kind = cell.attrs["data-verdict"]
        kinds.add(kind)
        assert cell.all("rect")[0].attrs["class"] == f"v-{kind}"
        title = cell.all("title")[0].text()
        assert (kind == "fits") == fit["fits"] and fit["gpu"]["name"] in title
        if kind == "change":  # the change that makes it fit, by its description in the JSON
            assert fit["advice"]["description"] in title
        if kind == "gpus":  # the GPUs (or the layout) its advice names
            assert f"several GPUs: {fit['advice']['num_gpus']}×" in title
    assert kinds == {"fits", "change", "gpus"}


def test_every_chart_is_named_described_and_tabulated(llama):
    _, page = llama
    root = parse(page)
    ids = [n.attrs["id"] for n in root.iter() if "id" in n.attrs]
    assert len(ids) == len(set(ids))
    charts = root.all("svg")
    assert [c.attrs["id"] for c in charts] == ["chart-fit", "chart-terms", "chart-seq_len", "chart-micro_batch_size"]
    for svg in charts:
        first = [c for c in svg.children if isinstance(c, Node)][:2]
        assert [n.tag for n in first] == ["title", "desc"] and all(n.text().strip() for n in first)
        assert svg.attrs["aria-labelledby"].split() == [first[0].attrs["id"], first[1].attrs["id"]]
        assert svg.attrs["role"] == "img"
        marks = [n for n in svg.iter() if n.tag in {"rect", "circle", "polyline", "line", "text"}]
        assert len(marks) > 20
        figure = svg.parent
        section = figure.parent
        tables = [d for d in section.all("details") if d.all("table")]
        assert figure.tag == "figure" and tables, svg.attrs["id"]


def test_no_curves_without_asking(tmp_path):
    from hfmem.hub.modelref import parse_model_ref
    from hfmem.hub.hub_settings import HubSettings
    from hfmem.render.html import render
    from hfmem.reporting.plan import build_report

    report = build_report(parse_model_ref("example:gpt2", None), HubSettings.from_env)
    root = parse(render(report))
    assert [c.attrs["id"] for c in root.all("svg")] == ["chart-fit", "chart-terms"]
    check_figures(root, report)


def external_references(page: str) -> list[str]:
    """Whatever could make the page load something: src/href-like attributes, CSS imports and url(), URLs in
    attributes, and elements that embed."""
    root = parse(page)
    found = [f"<{n.tag} {k}>" for n in root.iter() for k in n.attrs
             if k in {"src", "href", "xlink:href", "action", "formaction", "srcset", "poster", "data"}]
    found += [f"<{n.tag} {k}={v!r}>" for n in root.iter() for k, v in n.attrs.items()
              if "://" in v or v.startswith("//")]
    found += [f"<{n.tag}>" for n in root.iter() if n.tag in {"link", "img", "iframe", "object", "embed", "base"}]
    style = "".join(n.text() for n in root.all("style"))
    found += [s for s in ("@import", "url(") if s in style]
    return found


def test_nothing_points_outside_the_file(llama, tmp_path):
    _, page = llama
    assert external_references(page) == []
    assert external_references('<img src="http://x/y.png"><style>@import "a.css"</style>') != []  # the check bites
    scripts = parse(page).all("script")
    assert scripts == []  # the report needs no script at all


def hostile_report(report: dict[str, Any]) -> dict[str, Any]:
    """The report with untrusted text wherever text from outside can appear (model id, config values, the warnings
    and notes that quote them), and in the GPU name and assumptions too, in case their checks ever loosen."""
    bad = copy.deepcopy(report)
    bad["model"] = HOSTILE
    bad["sha"] = HOSTILE
    bad["warnings"] = [HOSTILE]
    bad["notes"].append(HOSTILE)
    bad["architecture"]["model_type"] = HOSTILE
    bad["architecture"]["attention_kind"] = HOSTILE
    bad["parameters"]["by_component"][HOSTILE] = 1
    bad["gpus"] = {HOSTILE if name == "T4" else name: entry for name, entry in bad["gpus"].items()}
    for cell in bad["fit"]:
        cell["gpu"] = HOSTILE if cell["gpu"] == "T4" else cell["gpu"]
    for est in bad["estimates"].values():
        est["notes"].append(HOSTILE)
        est["assumptions"]["attention"] = HOSTILE
    return bad


def test_hostile_text_stays_text(llama):
    from hfmem.render.html import render

    report, _ = llama
    page = render(hostile_report(report))
    root = parse(page)
    assert root.all("script") == [] and root.all("img") == []
    assert len(root.all("svg")) == 4
    assert not [k for n in root.iter() for k in n.attrs if k.startswith("on")]
    assert root.all("h1")[0].text() == visible(HOSTILE)
    texts = [c for n in root.iter() for c in n.children if isinstance(c, str)]
    assert sum(visible(HOSTILE) in t for t in texts) >= 8
    assert "\u202e" not in page and "<script>alert" not in page and "</svg><img" not in page


def test_a_hostile_directory_name_end_to_end(tmp_path, capsys):
    model = tmp_path / '<img src=x onerror=alert(1)>"&\'<svg onload=alert(2)>'
    model.mkdir()
    shutil.copy(EXAMPLES / "Meta-Llama-3-8B" / "config.json", model / "config.json")
    page = tmp_path / "r.html"
    assert run([str(model), "--html", str(page), "--format", "json", "-m", "qlora", "--gpu", "my-card=24"]) == 0
    report = json.loads(capsys.readouterr().out)
    root = parse(page.read_text(encoding="utf-8"))
    assert root.all("img") == [] and len(root.all("svg")) == 4
    assert root.all("h1")[0].text() == report["model"] and "<svg onload" in report["model"]
    check_figures(root, report)


def test_a_write_error_is_exit_code_output(tmp_path, capsys):
    code = run(["example:gpt2", "--html", str(tmp_path / "no" / "such" / "dir" / "r.html")])
    err = capsys.readouterr().err
    assert code == 14 and err.startswith("hfmem: error: cannot write") and err.count("\n") == 1


@pytest.fixture
def scanned(tmp_path, capsys) -> Path:
    """A real scan of four examples and one model that cannot be found, in two shards concatenated, plus one record
    whose model id is hostile (a foreign or edited JSONL)."""
    models = tmp_path / "models.txt"
    models.write_text("example:gpt2\nexample:Qwen2.5-0.5B\nexample:Meta-Llama-3-8B\nexample:Mixtral-8x7B-v0.1\n"
                      "example:no-such-model\n")
    parts = []
    for k in (1, 2):
        part = tmp_path / f"part-{k}.jsonl"
        run(["scan", str(models), "--shard", f"{k}/2", "-o", str(part)])
        parts.append(part.read_bytes())
    out = tmp_path / "all.jsonl"
    records = [json.loads(line) for line in b"".join(parts).splitlines()]
    hostile = copy.deepcopy(next(r for r in records if r["model"] == "example:gpt2"))
    hostile["model"] = HOSTILE
    out.write_text("".join(json.dumps(r) + "\n" for r in records + [hostile]), encoding="utf-8")
    capsys.readouterr()
    return out


def dashboard_blob(page: str) -> dict[str, Any]:
    (blob,) = [s for s in parse(page).all("script") if s.attrs.get("type") == "application/json"]
    return json.loads(blob.text())


def test_scan_dashboard_from_existing_shards(scanned, tmp_path, capsys):
    import csv

    page, table = tmp_path / "dash.html", tmp_path / "rows.csv"
    assert run(["scan", "-o", str(scanned), "--html", str(page), "--csv", str(table)]) == 0
    text = page.read_text(encoding="utf-8")
    data = dashboard_blob(text)
    rows = list(csv.DictReader(table.open(encoding="utf-8")))
    keys = [c["key"] for c in data["columns"]]
    assert len(data["rows"]) == len(rows) == 6
    for values, row in zip(data["rows"], rows):  # the same figures as the CSV export of the same records
        cells = dict(zip(keys, values))
        assert cells["model"] == visible(row["model"]) and cells["status"] == row["status"]
        assert cells["parameters"] == (int(row["parameters"]) if row["parameters"] else None)
        for method in ("full", "lora", "qlora"):
            gib = row[f"{method}_gib_per_gpu"]
            assert cells[f"{method}_gib_per_gpu"] == (float(gib) if gib else None)
            assert cells[f"{method}_fits_on"] == (row[f"{method}_fits_on"] or None)
    assert "<" not in text[text.index('type="application/json"'):].split(">", 1)[1].split("</script>")[0]
    assert len(parse(text).all("script")) == 2 and external_references(text) == []
    assert [r for r in data["rows"] if r[0] == visible(HOSTILE)]


def test_scan_html_write_error(scanned, tmp_path, capsys):
    assert run(["scan", "-o", str(scanned), "--html", str(tmp_path / "missing" / "d.html")]) == 14
    assert capsys.readouterr().err.startswith("hfmem: error: cannot write")


# Real browser: Debian's chromium, headless, when installed.


@pytest.fixture
def chromium() -> Path:
    if not CHROMIUM.exists():
        message = (f"{CHROMIUM} is not installed (Debian package chromium; .ci/run installs it): the browser "
                   "checks of the HTML report and dashboard did not run")
        warnings.warn(message, stacklevel=1)
        pytest.skip(message)
    return CHROMIUM


def browse(browser: Path, tmp_path: Path, page: Path, fragment: str = "", screenshot: Path | None = None,
           ) -> tuple[str, list[str], list[str]]:
    """Load the page headless: (the DOM after its scripts ran, console messages, URLs the page itself requested)."""
    profile = Path(tempfile.mkdtemp(dir=tmp_path, prefix="profile-"))
    netlog = profile / "net.json"
    args = [str(browser), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
            "--enable-logging=stderr", "--v=0", f"--log-net-log={netlog}", "--window-size=1100,1600", "--dump-dom"]
    if screenshot is not None:
        args.append(f"--screenshot={screenshot}")
    done = subprocess.run(args + [page.as_uri() + fragment], capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    log = json.loads(netlog.read_text())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    requested = [e["params"]["url"] for e in log["events"] if e["type"] == start  # the page's own requests
                 and "file://" in e["params"].get("network_isolation_key", "")
                 and not e["params"]["url"].startswith("file:")]
    return done.stdout, console, requested


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_the_browser_checks_can_fail(chromium, tmp_path):
    """A page that errs and reaches out is caught by the same checks the report passes."""
    page = tmp_path / "bad.html"
    page.write_text('<img src="http://127.0.0.1:9/x.png"><script>console.error("bad"); missing();</script>')
    _, console, requested = browse(chromium, tmp_path, page)
    assert len(console) == 2 and requested == ["http://127.0.0.1:9/x.png"]


def test_the_report_renders_in_chromium(chromium, llama, tmp_path):
    report, text = llama
    page = tmp_path / "report.html"
    page.write_text(text, encoding="utf-8")
    shot = tmp_path / "report.png"
    dom, console, requested = browse(chromium, tmp_path, page, screenshot=shot)
    assert console == [] and requested == []
    root = parse(dom)
    assert len(root.all("svg")) == 4 and all(len(list(svg.iter())) > 50 for svg in root.all("svg"))
    assert len(check_figures(root, report)) > 400
    assert png_size(shot) == (1100, 1600) and shot.stat().st_size > 50_000  # a blank page compresses to a few KB


def test_the_dashboard_sorts_and_filters_in_chromium(chromium, scanned, tmp_path):
    page = tmp_path / "dash.html"
    assert run(["scan", "-o", str(scanned), "--html", str(page)]) == 0
    data = dashboard_blob(page.read_text(encoding="utf-8"))
    keys = [c["key"] for c in data["columns"]]
    at = {k: i for i, k in enumerate(keys)}

    def shown_rows(fragment: str) -> list[list[str]]:
        dom, console, requested = browse(chromium, tmp_path, page, fragment, screenshot=tmp_path / "dash.png")
        assert console == [] and requested == []
        root = parse(dom)
        assert root.all("body")[0].attrs["data-ready"].endswith(" ms")
        shown = [[c.text() for c in tr.children if isinstance(c, Node)] for tr in root.by_id("rows").all("tr")]
        assert root.by_id("shown").text() == f"{len(shown):,} of {len(data['rows']):,} models"
        return shown

    by_params = shown_rows("#sort=parameters&dir=desc")
    ranked = sorted((r for r in data["rows"] if r[at["parameters"]] is not None), key=lambda r: -r[at["parameters"]])
    assert [r[0] for r in by_params][:len(ranked)] == [r[0] for r in ranked]
    assert len(by_params) == len(data["rows"]) and by_params[-1][at["status"]] == "error"  # empty cells sort last
    for shown, row in zip(by_params, ranked):
        n = row[at["parameters"]]
        assert shown[at["parameters"]] == (f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M")
        assert shown[at["full_gib_per_gpu"]] == f"{row[at['full_gib_per_gpu']]:.2f}"
    assert visible(HOSTILE) in [r[0] for r in by_params]  # written as text, not markup

    llamas = shown_rows("#q=LLAMA%20ok&sort=model")
    words = [" ".join(v.lower() for v in r if isinstance(v, str)) for r in data["rows"]]
    expected = sorted(r[0] for r, w in zip(data["rows"], words) if "llama" in w and "ok" in w)
    assert [r[0] for r in llamas] == expected == ["example:Meta-Llama-3-8B"]
    failed = shown_rows("#status=failed")
    assert [r[0] for r in failed] == ["example:no-such-model"]
    assert png_size(tmp_path / "dash.png") == (1100, 1600)


def test_ten_thousand_models_load_in_chromium(chromium, scanned, tmp_path):
    """The dashboard of 10,000 models: every row drawn by the script, sorted, in one file of about a megabyte."""
    from hfmem.render.dashboard import render
    from hfmem.scan.export import dashboard_data, summarise

    rows = [row for row, _ in summarise(iter_records(scanned), [])]
    many = [dict(rows[i % len(rows)], model=f"org-{i % 97}/model-{i:05d}") for i in range(10_000)]
    page = tmp_path / "many.html"
    page.write_text(render("hfmem scan · 10,000 models", dashboard_data(many, [])), encoding="utf-8")
    dom, console, requested = browse(chromium, tmp_path, page, "#sort=model&dir=desc")
    assert console == [] and requested == []
    root = parse(dom)
    shown = root.by_id("rows").all("tr")
    last = max(i for i in range(10_000) if i % 97 == 96)
    assert len(shown) == 10_000 and shown[0].children[0].text() == f"org-96/model-{last:05d}"
    ready_ms = int(root.all("body")[0].attrs["data-ready"].split()[0])
    print(f"10,000-model dashboard: {page.stat().st_size / 1e6:.2f} MB, rows drawn {ready_ms} ms after navigation")
    assert ready_ms < 20_000


def test_several_reports_on_one_page_render_in_chromium(chromium, tmp_path, capsys):
    """The Action's page: a priced report (with its cost/time frontier), a hostile one and an error, in one file that
    loads with no console error and no request, every id once, the first article's figures its own report's."""
    from hfmem.render.html import render_all

    capsys.readouterr()
    assert run(["example:Meta-Llama-3-8B", "--format", "json", "--html", str(tmp_path / "one.html"), "--tokens",
                "2e9", "--price", "h100=2.5", "--price", "rtx4090=0.4", "-g", "h100", "-g", "rtx4090"]) == 0
    priced = json.loads(capsys.readouterr().out)
    assert run(["example:gpt2", "--format", "json", "--html", str(tmp_path / "two.html")]) == 0
    other = json.loads(capsys.readouterr().out)
    page = tmp_path / "all.html"
    entries = [("priced", priced, None), (HOSTILE, hostile_report(other), None), ("broken", None, HOSTILE)]
    page.write_text(render_all("hfmem: will it train?", entries), encoding="utf-8")
    dom, console, requested = browse(chromium, tmp_path, page, screenshot=tmp_path / "all.png")
    assert console == [] and requested == []
    root = parse(dom)
    ids = [n.attrs["id"] for n in root.iter() if "id" in n.attrs]
    assert len(ids) == len(set(ids)) and root.all("img") == [] and root.all("script") == []
    articles = root.all("article")
    assert [a.attrs["id"] for a in articles] == ["r1", "r2"]
    charts = ("fit", "terms", "seq_len", "micro_batch_size", "frontier")
    assert [s.attrs["id"] for s in articles[0].all("svg")] == [f"r1-chart-{n}" for n in charts]
    assert [s.attrs["id"] for s in articles[1].all("svg")] == [f"r2-chart-{n}" for n in charts[:4]]
    assert all(len(list(svg.iter())) > 20 for svg in root.all("svg"))
    assert len(check_figures(articles[0], priced)) > 100 and articles[1].all("h1")[0].text() == visible(HOSTILE)
    items = root.all("nav")[0].all("li")
    assert [li.text() for li in items] == ["priced", visible(HOSTILE), f"broken: {visible(HOSTILE)}"]
