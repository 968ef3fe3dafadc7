"""The serving column (--method serve) where people look: one verdict per GPU, the one `hfmem serve` prints, on the
fit matrix's JSON, table and markdown, the Python API, the scan's filter and CSV, the Action's comment and the HTML
report; the cheapest pick follows from the cells and the prices."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

import hfmem
from hfmem.cli.main import run
from hfmem.memory.fit import MARKS
from hfmem.memory.record import compact_report
from hfmem.memory.settings import ENGINES, KV_CACHE_DTYPES, SERVING_QUANTIZATIONS
from hfmem.render.comment import Item, render as render_comment
from hfmem.render.common import EMOJI
from hfmem.scan.export import dashboard_data, matches_fits, parse_fit_filter, summarise
from hfmem.serving import engines, kv, weights
from hfmem.serving.matrix import cheapest
from hfmem.serving.report import label, words
from hfmem.text import markdown as escape

GPUS = ("h100", "l4", "t4")
SCHEMA = json.loads((Path(hfmem.__file__).parent / "report.schema.json").read_text(encoding="utf-8"))


def hfmem_out(capsys, *args: str) -> str:
    capsys.readouterr()
    code = run(list(args))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_the_serving_flags_accept_what_the_engine_arithmetic_knows():
    assert ENGINES == tuple(engines.ENGINES)
    assert KV_CACHE_DTYPES == tuple(kv.KV_DTYPE_BYTES)
    assert SERVING_QUANTIZATIONS == weights.QUANTIZATIONS


@pytest.mark.parametrize(("model", "context", "engine"), [
    ("meta-llama/Meta-Llama-3-8B", "16000", "vllm"),        # fits the H100 and L4, TP2 on a T4
    ("meta-llama/Meta-Llama-3-8B", "60000", "vllm"),        # fp8 KV on the L4
    ("mistralai/Mixtral-8x7B-v0.1", "16000", "vllm"),       # TP2 on the H100
    ("google/gemma-2-9b", "16000", "sglang"),               # sliding windows
    ("deepseek-ai/DeepSeek-V2-Lite", "16000", "vllm"),      # multi-head latent attention
    ("hfmem-test/Meta-Llama-3-8B-AWQ", "16000", "llama.cpp"),  # int4 weights from the headers
])
def test_each_surface_shows_hfmem_serve_s_verdict(granted, capsys, model, context, engine):
    gpus = [a for g in GPUS for a in ("-g", g)]
    served = json.loads(hfmem_out(capsys, "serve", model, *gpus, "--context", context, "--engine", engine,
                                  "-f", "json"))
    asked = ["-m", "qlora,serve", *gpus, "--context", context, "--engine", engine]
    report = json.loads(hfmem_out(capsys, model, *asked, "-f", "json"))
    column = report["serving"]
    assert column["settings"] == served["settings"]
    assert [c["gpu"] for c in column["cells"]] == [r["gpu"] for r in served["gpus"]]
    kinds = set()
    for cell, row in zip(column["cells"], served["gpus"], strict=True):
        assert (cell["verdict"], cell["advice"]) == (row["verdict"], row["advice"])
        for figure in ("kv_bytes", "kv_tokens", "concurrency_at_context", "context_at_concurrency"):
            assert cell[figure] == row[figure], figure
        assert label(cell, int(context)) == row["cell"] == f"{MARKS[cell['verdict']]} {cell['words']}".rstrip()
        assert cell["fits"] == (cell["verdict"] == "fits") == row["fits"]
        kinds.add(cell["verdict"])
    api = hfmem.serve(model, gpus=list(GPUS), context=int(context), engine=engine)
    assert [(f.gpu.name, f.verdict, f.advice) for f in api] == [(c["gpu"], c["verdict"], c["advice"])
                                                                  for c in column["cells"]]
    markdown = hfmem_out(capsys, model, *asked, "-f", "markdown")
    rows = [line for line in markdown.splitlines() if line.startswith("| ") and " GiB) |" in line]
    assert [r.rsplit(" | ", 1)[1].removesuffix(" |") for r in rows] == [
        escape(label(c, int(context))) for c in column["cells"]]
    table = hfmem_out(capsys, model, *asked)
    for cell in column["cells"]:
        assert label(cell, int(context)) in table
    assert kinds <= {"fits", "change", "gpus", "none"}


def test_the_verdicts_name_their_change(granted, capsys):
    """Llama-3-8B at 60,000 tokens: the L4 holds it only with an fp8 cache, the T4 needs TP2 (its weights alone
    outgrow it), the H100 fits; the advice's figures are the changed deployment's, as `hfmem serve` prints them."""
    report = json.loads(hfmem_out(capsys, "meta-llama/Meta-Llama-3-8B", "-m", "serve", "-g", "h100,l4,t4",
                                  "--context", "60000", "-f", "json"))
    h100, l4, t4 = report["serving"]["cells"]
    assert (h100["verdict"], l4["verdict"], t4["verdict"]) == ("fits", "change", "gpus")
    assert l4["advice"]["settings_changes"] == {"kv_cache_dtype": "fp8"} and words(l4, 60000) == "→ fp8 KV"
    assert t4["advice"]["settings_changes"] == {"tp": 2} and t4["advice"]["num_gpus"] == 2
    fp8 = json.loads(hfmem_out(capsys, "serve", "meta-llama/Meta-Llama-3-8B", "-g", "l4", "--context", "60000",
                               "--kv-cache-dtype", "fp8", "-f", "json"))["gpus"][0]
    assert l4["advice"]["kv_tokens"] == fp8["kv_tokens"] and l4["advice"]["concurrency_at_context"] == pytest.approx(
        fp8["concurrency_at_context"])
    assert report["plan"]["serve"] is True and report["plan"]["methods"] == ["full", "lora", "qlora"]
    assert any("beyond the model's max_position_embeddings (8,192)" in w for w in report["warnings"])
    for kind, record in (("report", report), ("compact_report", compact_report(report))):
        validator = Draft202012Validator({"$defs": SCHEMA["$defs"], "$ref": f"#/$defs/{kind}"})
        assert not [e.message for e in validator.iter_errors(record)], kind
    assert compact_report(report)["serving"] == report["serving"]


def test_the_cheapest_pick_is_the_fewest_dollars_for_the_concurrency():
    cells = [
        {"gpu": "A", "verdict": "fits", "concurrency_at_context": 2.5, "num_gpus": 1, "advice": None},
        {"gpu": "B", "verdict": "gpus", "concurrency_at_context": 0.0, "num_gpus": 1,
         "advice": {"num_gpus": 2, "concurrency_at_context": 9.9}},
        {"gpu": "C", "verdict": "none", "concurrency_at_context": 0.0, "num_gpus": 1, "advice": None},
    ]
    # 8 requests: A holds 2 a replica, so 4 replicas at $1 = $4/h; B holds 9 in one TP2 replica, 2 GPUs at $1.5
    pick = cheapest(cells, 8, {"A": 1.0, "B": 1.5, "C": 0.1})
    assert pick == {"gpu": "B", "verdict": "gpus", "replicas": 1, "num_gpus": 2, "usd_per_hour": 3.0}
    assert cheapest(cells, 2, {"A": 1.0, "B": 1.5})["gpu"] == "A"  # one replica of A: $1/h
    assert cheapest(cells, 8, {"C": 0.1}) is None  # nothing priced fits
    assert cheapest(cells, 20, {"A": 1.0, "B": 1.5})["num_gpus"] == min(
        math.ceil(20 / 2) * 1, math.ceil(20 / 9) * 2)


def test_the_pick_line_and_the_assumptions_name_the_engine_and_context(granted, capsys):
    out = hfmem_out(capsys, "meta-llama/Meta-Llama-3-8B", "-m", "serve", "-g", "h100,l4", "--context", "16000",
                    "--serve-concurrency", "8", "--engine", "sglang", "--price", "l4=0.8", "--price", "h100=2.5")
    text = " ".join(out.split())
    assert "serve: sglang" in text and "context 16,000, concurrency 8" in text
    report = json.loads(hfmem_out(capsys, "meta-llama/Meta-Llama-3-8B", "-m", "serve", "-g", "h100,l4",
                                  "--context", "16000", "--serve-concurrency", "8", "--engine", "sglang",
                                  "--price", "l4=0.8", "--price", "h100=2.5", "-f", "json"))
    pick = report["serving"]["cheapest"]
    by_gpu = {c["gpu"]: c for c in report["serving"]["cells"]}
    replicas = math.ceil(8 / math.floor(by_gpu[pick["gpu"]]["concurrency_at_context"]))
    assert pick["replicas"] == replicas and pick["usd_per_hour"] == pytest.approx(
        replicas * {"L4": 0.8, "H100 80GB": 2.5}[pick["gpu"]])
    assert f"cheapest serving: {pick['num_gpus']}× {pick['gpu']}" in text and f"${pick['usd_per_hour']:,.2f}/h" in text


def test_scan_fits_serve_filters_and_exports(granted, capsys, tmp_path):
    models = tmp_path / "models.txt"
    models.write_text("meta-llama/Meta-Llama-3-8B\nmistralai/Mixtral-8x7B-v0.1\n")
    out, csv_path = tmp_path / "out.jsonl", tmp_path / "out.csv"
    hfmem_out(capsys, "scan", str(models), "-o", str(out), "-m", "qlora,serve", "-g", "l4,h100",
              "--fits", "serve:l4", "--csv", str(csv_path), "--context", "8000", "--compact")  # GPUs as [name, GiB]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    fits_l4 = {r["model"]: matches_fits(r, [parse_fit_filter("serve:l4")]) for r in records}
    assert fits_l4 == {"meta-llama/Meta-Llama-3-8B": True, "mistralai/Mixtral-8x7B-v0.1": False}
    rows = {row["model"]: row for row, _ in summarise(records, [])}
    llama = rows["meta-llama/Meta-Llama-3-8B"]
    assert llama["serve_fits_on"] == "L4" and llama["serve_weights_gib"] == pytest.approx(16_060_522_496 / 2**30,
                                                                                         abs=0.01)
    assert rows["mistralai/Mixtral-8x7B-v0.1"]["serve_fits_on"].startswith("TP2× ")
    exported = csv_path.read_text()
    assert "serve_fits_on" in exported.splitlines()[0] and "Mixtral" not in exported  # the filter held
    shown = dashboard_data(list(rows.values()), [])
    keys = [c["key"] for c in shown["columns"]]
    assert keys[-4:] == ["serve_weights_gib", "serve_fits_on", "serve_cheapest", "error"]
    (llama_row,) = [r for r in shown["rows"] if r[keys.index("model")] == "meta-llama/Meta-Llama-3-8B"]  # any order
    assert llama_row[keys.index("serve_fits_on")] == "L4"
    assert "serve_fits_on" not in [c["key"] for c in dashboard_data([{**llama, "serve_fits_on": None}], [])["columns"]]


def test_scan_refuses_serve_when_not_scanned(capsys, tmp_path):
    (tmp_path / "m.txt").write_text("example:gpt2\n")
    capsys.readouterr()
    assert run(["scan", str(tmp_path / "m.txt"), "-o", str(tmp_path / "o.jsonl"), "--fits", "serve:l4"]) == 2
    assert "serve is not among the scanned methods" in capsys.readouterr().err


def test_the_comment_and_the_html_carry_the_column(granted, capsys, tmp_path):
    from hfmem.render.html import render as render_html

    report = json.loads(hfmem_out(capsys, "meta-llama/Meta-Llama-3-8B", "-m", "serve", "-g", "t4,l4,h100",
                                  "--context", "16000", "-f", "json", "--html", str(tmp_path / "r.html")))
    body = render_comment([Item("meta-llama/Meta-Llama-3-8B", "model", head=report)], "settings", 60_000)
    row = next(line for line in body.splitlines() if "| serve |" in line)
    cells = [c.strip() for c in row.strip("|").split("|")][4:]
    assert cells == [escape(f"{EMOJI[c['verdict']]} {c['words']}".rstrip()) for c in report["serving"]["cells"]]
    assert escape("cheapest serving:") in body
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert page == render_html(report)
    assert 'id="serving"' in page and 'id="chart-serving"' in page
    curves = report["serving"]["curves"]
    assert curves["gpus"] == ["T4", "L4", "H100 80GB"] and 16000 in curves["contexts"]
    figures = [v for series in curves["concurrency"] for v in series]
    # a dot where a request fits, and a table cell for every figure
    assert page.count('data-src="serving.curves.concurrency.') == sum(v >= 1 for v in figures) + len(figures)


@pytest.mark.parametrize(("args", "message"), [
    (["-m", "serve", "--engine", "tgi"], "engine must be one of vllm, sglang, llama.cpp, transformers; got 'tgi'."),
    (["-m", "serve,rlhf"], "or serve; got 'rlhf'."),
    (["-m", "serve", "--kv-cache-dtype", "int3"], "kv_cache_dtype must be one of auto,"),
    (["-m", "serve", "--context", "0"], "context must be an integer >= 1; got 0."),
])
def test_bad_serving_input_is_one_line_exit_2(capsys, args, message):
    capsys.readouterr()
    assert run(["example:gpt2", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hfmem: error: ") and message in err
