"""Latency stored with results: `history`'s figures, and a run against a stored baseline run."""
from __future__ import annotations

import random

from harness.latency.across import against_baseline, latency_rows
from harness.outcomes import Outcome, Result
from harness.store import MemoryStore


def _timed(case_id, scale, noise=0.01, seed=0, n=200, outcome=Outcome.PASS, ref=None, repeat=0):
    rng = random.Random(f"{case_id}{scale}{seed}")
    samples = [scale * rng.lognormvariate(0, noise) for _ in range(n)]
    med = sorted(samples)[n // 2]
    return Result(case_id=case_id, outcome=outcome, ref=ref, repeat=repeat, metrics={"latency": {
        "measured": True, "median_s": med, "ci_low_s": med, "ci_high_s": med, "samples": n,
        "rel_noise": noise / 10, "samples_s": samples}})


def _stored(store, results):
    run = store.start_run(command=["t"], devices=["cpu"])
    for r in results:
        store.add_result(run, r)
    return run


def test_history_carries_each_runs_latency():
    store = MemoryStore()
    _stored(store, [_timed("c", 1e-3)])
    _stored(store, [Result(case_id="c", outcome=Outcome.PASS)])        # not timed
    rows = store.history("c")
    assert [len(r["latency_s"]) for r in rows] == [1, 0] and abs(rows[0]["latency_s"][0] - 1e-3) < 1e-4


def test_a_run_against_a_stored_baseline_flags_slower_and_not_the_same_kernel():
    store = MemoryStore()
    base = _stored(store, [_timed("a", 1e-3), _timed("b", 1e-3)])
    rows = {r["case_id"]: r["latency_verdict"] for r in
            against_baseline(store, base, [_timed("a", 1.3e-3, seed=1), _timed("b", 1e-3, seed=1),
                                           _timed("new", 1e-3)])}
    assert rows["a"]["verdict"] == "SLOWER" and rows["b"]["verdict"] == "SAME"
    assert "has no result for this case" in rows["new"]["error"]


def test_a_noisy_run_against_a_baseline_is_unsure_not_slower():
    store = MemoryStore()
    base = _stored(store, [_timed("a", 1e-3)])
    noisy = _timed("a", 1.3e-3, seed=2)
    noisy.metrics["latency"]["rel_noise"] = 0.2
    (row,) = against_baseline(store, base, [noisy])
    assert row["latency_verdict"]["verdict"] == "UNSURE" and "own noise" in row["latency_verdict"]["why"]


def test_a_failing_or_untimed_side_gets_no_verdict_and_says_why():
    results = [_timed("c", 1e-3, ref="up", repeat=r) for r in range(6)]
    results += [Result(case_id="c", outcome=Outcome.MISMATCH, ref="pr", repeat=r) for r in range(6)]
    (row,) = latency_rows(results, ["up", "pr"])
    assert row["latency_verdict"] == {"error": "no verdict: pr: MISMATCH, not timed"}


def test_a_ref_whose_build_failed_gets_a_row_and_the_others_their_verdict():
    results = [_timed("c", 1e-3, ref="up", repeat=r, seed=r) for r in range(6)]
    results += [_timed("c", 1e-3, ref="twin", repeat=r, seed=r + 10) for r in range(6)]
    results += [Result(case_id="c", outcome=Outcome.BUILD_ERROR, ref="broken", repeat=r) for r in range(6)]
    rows = {row["candidate"]: row["latency_verdict"] for row in latency_rows(results, ["up", "broken", "twin"])}
    assert rows["broken"] == {"error": "no verdict: broken: BUILD_ERROR, not timed"}
    assert rows["twin"]["verdict"] in ("SAME", "UNSURE")
