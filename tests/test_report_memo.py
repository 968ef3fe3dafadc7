"""Reports sharing a shape share one plan part (reporting.plan.BY_SHAPE): every fixture's report, served from a memo
that holds every other fixture's, equals the one computed without it; the memo is bounded and computes a key once."""

import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from hfmem.hardware.gpus import find_gpu
from hfmem.hub.modelref import parse_model_ref
from hfmem.memory.settings import TrainingSettings
from hfmem.model.load import analyse
from hfmem.reporting import plan as plans
from hfmem.reporting.memo import Memo

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted([*(ROOT / "fixtures" / "configs").rglob("config.json"), *(ROOT / "hfmem" / "examples").rglob("config.json")])


PLAN = plans.Plan(methods=("full", "lora", "qlora"), gpus=(find_gpu("h100"), find_gpu("t4")))
"""Three methods on two GPUs: the memo's keys and sharing are the same for any plan, and the whole catalogue's
matrix for 49 configs would only make the test slow."""


def _fresh(result, plan):
    """The report computed with an empty memo, as JSON text."""
    plans.BY_SHAPE.clear()
    return json.dumps(plans.with_estimates(result, plan), sort_keys=True)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("HFMEM_CACHE_DIR", str(tmp_path_factory.mktemp("hfmem")))
    yield [analyse(parse_model_ref(str(p.parent))) for p in CONFIGS]
    mp.undo()


def test_every_fixture_report_served_from_a_full_memo_equals_a_fresh_one(results, monkeypatch):
    """Each report is computed once, with a memo of its own (empty, so nothing is served), and the part it computed
    joins one full memo; served from that, every report equals its fresh one."""
    plan = PLAN
    full: Memo[plans.PlanPart] = Memo(64)
    fresh = []
    for r in results:
        alone: Memo[plans.PlanPart] = Memo(64)
        monkeypatch.setattr(plans, "BY_SHAPE", alone)
        fresh.append(json.dumps(plans.with_estimates(r, plan), sort_keys=True))
        assert alone.computed == 1
        key = plans.shape_key(r.architecture, r.inventory, plan)
        full.get(key, lambda alone=alone, key=key: alone.get(key, lambda: pytest.fail("not memoised")))
    assert len(results) <= full.size  # none dropped
    monkeypatch.setattr(plans, "BY_SHAPE", full)
    computed = full.computed
    served = [json.dumps(plans.with_estimates(r, plan), sort_keys=True) for r in results]
    assert full.computed == computed  # every one a hit
    assert served == fresh


def test_a_sibling_config_is_a_hit_with_its_own_analysis(results, tmp_path, monkeypatch):
    base = next(r for r in results if r.config.get("model_type") == "llama")
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path))
    (tmp_path / "sib").mkdir()
    config = base.config | {"rope_theta": 77_777.0, "eos_token_id": 7, "_name_or_path": "sibling"}
    (tmp_path / "sib" / "config.json").write_text(json.dumps(config))
    sibling = analyse(parse_model_ref(str(tmp_path / "sib")))
    plan = PLAN
    plans.BY_SHAPE.clear()
    before = plans.BY_SHAPE.computed
    plans.with_estimates(base, plan)
    served = plans.with_estimates(sibling, plan)
    assert plans.BY_SHAPE.computed == before + 1
    assert served["model"] == sibling.model
    assert json.dumps(served, sort_keys=True) == _fresh(sibling, plan)


def test_another_plan_or_shape_is_a_miss(results):
    plans.BY_SHAPE.clear()
    before = plans.BY_SHAPE.computed
    plans.with_estimates(results[0], PLAN)
    plans.with_estimates(results[0], plans.Plan(training=TrainingSettings(seq_len=512)))
    plans.with_estimates(replace(results[0], architecture=replace(results[0].architecture, vocab_size=7)), PLAN)
    assert plans.BY_SHAPE.computed == before + 3


def test_memo_is_bounded_and_least_recently_used_goes_first():
    memo: Memo[int] = Memo(2)
    for key in ("a", "b", "a", "c"):
        memo.get(key, lambda key=key: ord(key))
    assert memo.computed == 3
    assert memo.get("a", lambda: -1) == ord("a")
    assert memo.get("b", lambda: -1) == -1  # dropped when c came


def test_memo_computes_a_key_in_flight_once_and_keeps_no_failure():
    memo: Memo[int] = Memo(4)
    started, release, calls = threading.Event(), threading.Event(), []

    def slow() -> int:
        calls.append(1)
        started.set()
        release.wait(5)
        return 42

    threads = [threading.Thread(target=memo.get, args=("k", slow)) for _ in range(4)]
    threads[0].start()
    started.wait(5)
    for t in threads[1:]:
        t.start()
    release.set()
    for t in threads:
        t.join(5)
    assert calls == [1] and memo.get("k", lambda: 0) == 42

    def boom() -> int:
        raise ValueError("no")

    with pytest.raises(ValueError):
        memo.get("x", boom)
    assert memo.get("x", lambda: 5) == 5
