"""The Action's markdown: fit matrix, base vs head diffs, folding into <details> and the size cap."""

from __future__ import annotations

import re
from hfmem.model.load import SCHEMA_VERSION
from hfmem.render.comment import LEGEND, Item, render
from hfmem.render.diff import regressions, render_diff
from hfmem.units import GIB

GPUS = ("rtx4090", "a100-80gb", "h100-80gb")
LIMIT = 65_536


def report(name: str, params: int, layers: int = 32, peak_gib: dict[str, float] | None = None) -> dict:
    """A report shaped like build_report's (hfmem.memory.record, JSON schema 7): the GPUs by name, the estimates by
    method and a named cell per method and GPU."""
    peak_gib = peak_gib or {"full": params * 16 / GIB, "lora": params * 2.2 / GIB, "qlora": params * 0.7 / GIB}
    capacity = {"rtx4090": 24, "a100-80gb": 80, "h100-80gb": 80}

    def cell(method: str, gpu: str, peak: float) -> dict:
        ok = peak <= capacity[gpu]
        multi = None if ok else {"num_gpus": -int(-peak // capacity[gpu]), "sharding": "zero3",
                                 "offload_optimizer": False, "offload_params": False, "gradient_checkpointing": "off",
                                 "total_bytes": int(capacity[gpu] * GIB), "required_bytes": int(capacity[gpu] * GIB)}
        advice = None if ok else {"kind": "gpus", "mitigation": None, "settings_changes": {}} | multi
        return {"method": method, "gpu": gpu, "verdict": "fits" if ok else "gpus", "fits": ok, "num_gpus": 1,
                "total_bytes": int(peak * GIB), "max_micro_batch_size": int(ok), "max_seq_len": 0, "advice": advice,
                "multi_gpu": multi, "multi_gpu_with_checkpointing": None, "mitigations": [], "time": None}

    return {
        "schema_version": SCHEMA_VERSION, "model": name, "architecture": {"num_layers": layers, "hidden_size": 4096},
        "parameters": {"total": params}, "plan": {"training": {}},
        "gpus": {gpu: {"usable_gib": gib, "usable_bytes": gib * GIB, "arch": "ampere"} for gpu, gib in capacity.items()},
        "estimates": {m: {"method": m, "settings": {}, "assumptions": {}, "notes": [],
                          "per_gpu_bytes": {"total": int(g * GIB), "required": int(g * GIB)},
                          "activations": {"per_layer": [], "notes": []}} for m, g in peak_gib.items()},
        "fit": [cell(m, gpu, g) for m, g in peak_gib.items() for gpu in GPUS],
    }


def models(n: int) -> list[Item]:
    return [Item(f"org/model-{i:04d}", "model", head=report(f"org/model-{i:04d}", 7_000_000_000 + i)) for i in range(n)]


def test_fit_matrix_rows_and_columns():
    body = render(models(1), "settings", LIMIT)
    assert "| model | parameters | method | peak memory / GPU | rtx4090 | a100\\-80gb | h100\\-80gb |" in body
    assert "| org/model\\-0000 | 7,000,000,000 (7.00B) | full | 104.3 GiB | ❌ 5×ZeRO\\-3 | ❌ 2×ZeRO\\-3 | ❌ 2×ZeRO\\-3 |" in body
    assert "|  |  | qlora | 4.6 GiB | ✅ | ✅ | ✅ |" in body
    assert "<details>" not in body


def test_extra_models_fold_into_details():
    body = render(models(14), "settings", LIMIT)
    visible, folded = body.split("<details><summary>4 more models</summary>")
    assert visible.count("| org/model") == 10 and folded.count("| org/model") == 4
    assert "\n\n| model | parameters" in folded and folded.rstrip().endswith("</details>\n\n" + LEGEND)
    assert "left out" not in body


def test_many_models_stay_under_githubs_limit():
    body = render(models(3000), "settings", 60_000, header="<!-- marker -->", footer="<sub>footer</sub>")
    assert len(body) <= 60_000 < LIMIT
    assert body.startswith("<!-- marker -->\n") and body.rstrip().endswith("<sub>footer</sub>")
    shown = len(re.findall(r"\| org/model-\d+|\| org/model\\-\d+", body))
    assert 50 < shown < 3000
    assert f"_{3000 - shown} more entries left out to stay under GitHub's size limit; the JSON report has them all._" in body
    assert body.count("<details>") == body.count("</details>") == 1


def test_huge_error_text_is_cut():
    items = [Item("org/x", "model", head_error="boom " * 10_000)]
    body = render(items, "s", LIMIT)
    assert len(body) < 2_000 and "boom boom" in body and "…" in body


def test_diff_shows_what_the_change_costs():
    base = report("c", 6_000_000_000, layers=28, peak_gib={"full": 90.0, "qlora": 20.0})
    head = report("c", 7_000_000_000, layers=32, peak_gib={"full": 105.0, "qlora": 26.0})
    text = render_diff("configs/c/config.json", "modified", base, head)
    assert text.startswith("#### configs/c/config.json (changed)\n")
    assert "| layers | 28 | 32 | +4 (+14.3%) |" in text
    assert "| **parameters** | 6,000,000,000 (6.00B) | **7,000,000,000 (7.00B)** | +1,000,000,000 (1.00B) (+16.7%) |" in text
    assert "| memory, full | 90.0 GiB | 105.0 GiB | +15.0 GiB (+16.7%) |" in text
    assert "| qlora on rtx4090 | ✅ | ❌ 2×ZeRO\\-3 | **no longer fits** |" in text
    assert regressions(base, head) == [("qlora", "rtx4090")]
    assert regressions(head, base) == []
    assert "now fits" in render_diff("p", "modified", head, base)


def test_diff_of_a_new_file_and_of_errors():
    added = render_diff("configs/n.json", "added", None, report("n", 1_000_000))
    assert "(new file)" in added and "| **parameters** | - | **1,000,000 (1.00M)** |  |" in added
    broken = render_diff("configs/b.json", "modified", None, report("b", 10), base_error="configs/b.json (base) is not valid JSON.")
    assert "| base | configs/b.json \\(base\\) is not valid JSON. |" in broken


def test_unchanged_fit_is_one_row():
    same = report("s", 1_000_000)
    assert "| fit |  |  | unchanged on every GPU |" in render_diff("p", "modified", same, same)


def test_verdicts():
    from hfmem.render.diff import verdict

    assert verdict(None) == "—"
    assert verdict({"fits": True, "verdict": "fits", "advice": None}) == "✅"
    assert verdict({"fits": False, "verdict": "change",
                    "advice": {"kind": "change", "mitigation": "gradient_checkpointing",
                               "settings_changes": {"gradient_checkpointing": "full"}, "total_bytes": 21 * GIB}}
                   ) == "⚠️ \\+ckpt 21.0"
    assert verdict({"fits": False, "verdict": "gpus",
                    "advice": {"kind": "gpus", "num_gpus": 4, "sharding": "zero3", "gradient_checkpointing": "full"}}
                   ) == "❌ 4×ZeRO\\-3\\+ckpt"
    assert verdict({"fits": False, "verdict": "none", "advice": None}) == "❌"


def test_fail_on_problems_are_listed_and_escaped():
    problems = [f"configs/<b>{i}</b>.json: qlora no longer fits RTX 4090" for i in range(25)]
    body = render(models(1), "s", LIMIT, problems=problems)
    assert "**❌ fail-on: 25 problems**" in body and "- and 5 more" in body
    assert "- configs/&lt;b&gt;0&lt;/b&gt;.json\\: qlora no longer fits RTX 4090" in body and "<b>" not in body
    assert "fail-on" not in render(models(1), "s", LIMIT)


def test_extra_diffs_fold_into_details():
    items = [Item(f"configs/{i}/config.json", "config", "modified", head=report("h", 2_000_000), base=report("b", 1_000_000))
             for i in range(5)]
    body = render(items, "s", LIMIT)
    visible, folded = body.split("<details><summary>2 more changed configs</summary>")
    assert visible.count("#### configs/") == 3 and folded.split("</details>")[0].count("#### configs/") == 2


def test_many_timed_models_carry_each_cell_s_time_and_stay_under_githubs_limit(capsys, tmp_path, monkeypatch):
    """With a token budget every model gets the time grid (tokens/s, hours, cost per fitting cell), folded past the
    first few models like the fit matrix, and the whole comment stays under the limit."""
    import json

    from hfmem.cli.main import run

    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path))
    capsys.readouterr()
    assert run(["example:Meta-Llama-3-8B", "-f", "json", "--tokens", "1e9", "--price", "h100=2.5",
                *(a for g in GPUS for a in ("-g", g))]) == 0
    timed = json.loads(capsys.readouterr().out)
    items = [Item(f"org/model-{i:04d}", "model", head=timed) for i in range(400)]
    body = render(items, "settings", LIMIT)
    assert len(body) <= LIMIT and "more entries left out" in body
    section = body.split("### Time and cost", 1)[1]
    assert "<details><summary>" in section and "more timed models" in section
    assert "tok/s" in section and "$" in section and "h ·" in section
    one = render(items[:1], "settings", LIMIT)
    assert "### Time and cost" in one and "<details>" not in one
    untimed = dict(timed, plan=dict(timed["plan"], tokens=None, prices_usd_per_gpu_hour={}))
    assert "tok/s" not in render([Item("a/b", "model", head=untimed)], "settings", LIMIT).split("Time and cost")[-1]
