"""Flake hunts without processes: plans, stop rules, per-case summaries, text, hunt comparison."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from harness.flake import hunt as flake
from harness.flake.changes import HuntChange, hunt_change, hunt_changes
from harness.flake.summary import HuntSummary, hunt_failed, summarize_case
from harness.reports.flake_text import change_line, iteration_line, outcome_phrase, rate_phrase, summary_lines
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.run.engine import Planned
from harness.outcomes import Outcome, Result


def _case(case_id: str = "m[batch=4]", seed: int = 7) -> Case:
    return Case(case_id=case_id, matrix="m", source="m.yaml:1", op="rope_kv_write", kernel="reference",
                geometry=PRESETS["tiny"],
                seq_lens=SeqLens("const", (1,)), slot_mode=SlotMode("arange"), seed=seed)


def _result(outcome: Outcome, repeat: int, case_id: str = "m[batch=4]", seed: int = 7, code=None, det=None,
            summary: str = "") -> Result:
    metrics = {"determinism": det} if det is not None else {}
    return Result(case_id=case_id, outcome=outcome, repeat=repeat, seed=seed, code=code, device="cpu",
                  log=f"/logs/{repeat}.log", summary=summary or outcome.value, metrics=metrics, duration_s=0.41)


# -- options and plans ----------------------------------------------------------------

@pytest.mark.parametrize("kwargs, needle", [
    ({"repeat": 0}, "--repeat"), ({"repeat": -3}, "--repeat"), ({"repeat": 2.5}, "--repeat"),
    ({"repeat": 5, "seeds": "random"}, "--seeds"), ({"repeat": 5, "stop_after": 0}, "--stop-after"),
    ({"repeat": 5, "max_minutes": 0}, "--max-minutes"), ({"repeat": 5, "conf": 1.0}, "--confidence"),
    ({"repeat": 5, "target_rate": 0}, "--target-rate"),
])
def test_bad_options_name_the_flag(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        flake.HuntOptions(**kwargs)


def test_fixed_seed_plan_is_iteration_major_and_bitwise():
    a, b = _case("a"), _case("b")
    planned = flake.plan([a, b], flake.HuntOptions(repeat=3))
    assert [(p.case.case_id, p.repeat) for p in planned] == [
        ("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    assert all(p.bitwise and p.case.seed == 7 for p in planned)
    assert [p.index for p in planned] == list(range(6))


def test_fresh_seeds_differ_per_iteration_and_replay_from_the_hunt_seed():
    opts = flake.HuntOptions(repeat=50, seeds="fresh", hunt_seed=123)
    seeds = [p.case.seed for p in flake.plan([_case()], opts)]
    assert len(set(seeds)) == 50
    assert seeds == [p.case.seed for p in flake.plan([_case()], opts)]
    assert seeds != [p.case.seed for p in flake.plan([_case()], flake.HuntOptions(50, "fresh", hunt_seed=124))]
    assert not any(p.bitwise for p in flake.plan([_case()], opts))   # different inputs: bits are not comparable
    assert seeds[3] == flake.fresh_seed(123, "m[batch=4]", 3)


def test_stop_after_k_failures_drops_only_that_case():
    rules = flake.StopRules(flake.HuntOptions(repeat=10, stop_after=2))
    a, b = _case("a"), _case("b")
    for i in range(2):
        assert rules.should_run(Planned(0, a, i))
        rules.record(_result(Outcome.MISMATCH, i, case_id="a"))
    assert not rules.should_run(Planned(0, a, 2))
    assert rules.should_run(Planned(0, b, 2))
    assert rules.dropped == {"a": 1}


def test_deadline_drops_everything_after_each_cases_first_run():
    rules = flake.StopRules(flake.HuntOptions(repeat=10, max_minutes=1), now=-10_000.0)
    a, b = _case("a"), _case("b")
    assert rules.should_run(Planned(0, a, 0)) and rules.should_run(Planned(1, b, 0))   # one run each, at least
    assert not rules.should_run(Planned(2, a, 1)) and not rules.should_run(Planned(3, b, 1))
    assert rules.deadline_hit and rules.dropped == {"a": 1, "b": 1}


# -- summaries ----------------------------------------------------------------------

def test_counts_rate_intervals_and_first_failure():
    results = ([_result(Outcome.PASS, i) for i in range(7)] + [_result(Outcome.NEAR_TIE, 7)]
               + [_result(Outcome.DEVICE_FAULT, 8, code=507018, summary="aicore exception"),
                  _result(Outcome.MISMATCH, 9), _result(Outcome.SKIPPED, 10)])
    s = summarize_case(results)
    assert (s.total, s.skipped, s.clean, s.near_tie, s.failures) == (10, 1, 7, 1, 2)
    assert s.counts == {"PASS": 7, "FAIL_507018": 1, "MISMATCH": 1, "NEAR_TIE": 1}
    assert s.rate == 0.2
    assert s.wilson == pytest.approx([0.0567, 0.5098], abs=1e-4)
    assert s.clopper_pearson == pytest.approx([0.0252, 0.5561], abs=1e-4)
    assert s.first_failure.to_json() == {"repeat": 8, "seed": 7, "label": "FAIL_507018", "summary": "aicore exception",
                                  "log": "/logs/8.log", "device": "cpu"}
    assert outcome_phrase(s) == "7 clean, 1 near-tie, 2 hard failures (1 FAIL_507018, 1 MISMATCH)"
    assert rate_phrase(s).startswith("failure rate 20.0% (2/10); 95% Wilson [5.7%, 51.0%], "
                                           "exact (Clopper-Pearson) [2.5%, 55.6%]")


def test_zero_failures_state_the_bound_and_the_runs_still_needed():
    s = summarize_case([_result(Outcome.PASS, i) for i in range(20)], target_rate=0.01)
    assert rate_phrase(s) == ("0 failures in 20 runs: failure rate <= 13.9% at 95%; "
                                    "279 more clean runs would bound it at 1.0%")
    assert outcome_phrase(s) == "20 clean, 0 near-tie, 0 hard failures"


def test_summary_json_has_the_documented_keys_and_reads_back():
    results = ([_result(Outcome.PASS, 0, det=_det(0, True, baseline=True)),
                _result(Outcome.MISMATCH, 1, det=_det(1, False, digest="b"))])
    s = summarize_case(results)
    doc = s.to_json()
    assert list(doc) == ["total", "skipped", "counts", "clean", "near_tie", "failures", "rate", "conf", "wilson",
                         "clopper_pearson", "upper_one_sided", "seeds", "devices", "by_device", "first_failure",
                         "determinism"]
    assert list(doc["determinism"]) == ["checked", "compared", "variants", "most_common", "identical", "differing",
                                        "baseline_repeat", "summary", "first"]
    assert HuntSummary.from_json(json.loads(json.dumps(doc))) == s
    clean = summarize_case([_result(Outcome.PASS, i) for i in range(3)], target_rate=0.1)
    assert clean.to_json()["more_runs_for_target"] == 26 and clean.to_json()["target_rate"] == 0.1
    assert HuntSummary.from_json(clean.to_json()) == clean


def _det(repeat: int, identical: bool | None, baseline: bool = False, digest: str = "a") -> dict:
    differs = [] if identical is not False else [{"name": "query"}]
    return {"baseline": baseline, "baseline_repeat": 0, "identical": identical, "digests": {"query": digest},
            "differs": differs, "report": "" if identical else "query: 3 / 256 elements differ"}


def test_determinism_finding_counts_differing_iterations_and_variants():
    results = [_result(Outcome.PASS, 0, det=_det(0, True, baseline=True)),
               _result(Outcome.PASS, 1, det=_det(1, True)),
               _result(Outcome.PASS, 2, det=_det(2, False, digest="b")),
               _result(Outcome.MISMATCH, 3, det=_det(3, False, digest="c"))]
    d = summarize_case(results).determinism
    assert d.identical is False and d.compared == 3 and d.differing == (2, 3) and d.variants == 3
    assert d.summary == ("NONDETERMINISTIC: 4 iterations gave 3 distinct bit patterns (the most common: 2 of 4); "
                            "2 of 3 differ bitwise from iteration 0, the first that passed (query); "
                            "1 of them still within tolerance")
    assert d.first.repeat == 2
    clean = summarize_case(results[:2]).determinism
    assert clean.summary == "bitwise identical: all 2 iterations gave the same bits in every output and cache"
    assert clean.identical is True
    assert summarize_case([_result(Outcome.PASS, 0)]).determinism is None   # fresh seeds


def test_hunt_fails_on_failures_or_varying_bits_unless_allowed():
    flaky_bits = {"c": summarize_case([_result(Outcome.PASS, 0, det=_det(0, True, True)),
                                             _result(Outcome.PASS, 1, det=_det(1, False, digest="b"))])}
    assert hunt_failed(flaky_bits)
    assert not hunt_failed(flaky_bits, allow_nondeterministic=True)
    assert hunt_failed({"c": summarize_case([_result(Outcome.HANG, 0)])}, True)
    assert not hunt_failed({"c": summarize_case([_result(Outcome.NEAR_TIE, 0)])})


def test_iteration_lines_read_like_the_engineers_own():
    assert iteration_line(_result(Outcome.PASS, 3), False) == "iter 3: PASS 0.41 s"
    line = iteration_line(_result(Outcome.DEVICE_FAULT, 4, code=507018, summary="aicore error"), True)
    assert line == "m[batch=4] iter 4: FAIL_507018 0.41 s  aicore error"
    assert "bits differ from iter 0: query" in iteration_line(_result(Outcome.PASS, 5, det=_det(5, False)), False)


# -- before/after ---------------------------------------------------------------------

def _hunt(failures: int, runs: int) -> HuntSummary:
    return summarize_case([_result(Outcome.MISMATCH if i < failures else Outcome.PASS, i) for i in range(runs)])


@pytest.mark.parametrize("before, after, word", [
    ((10, 20), (0, 20), "fixed"),
    ((0, 20), (10, 20), "regressed"),
    ((2, 20), (1, 20), "no evidence either way"),
    ((0, 20), (0, 20), "clean in both"),
    ((1, 5), (0, 5), "no evidence either way"),
])
def test_verdicts(before, after, word):
    got, p = hunt_change(_hunt(*before), _hunt(*after))
    assert isinstance(got, HuntChange) and got.describe() == word
    assert 0 <= p <= 1


def test_hunt_changes_keep_shared_cases_only():
    rows = hunt_changes({"a": _hunt(10, 20), "b": _hunt(0, 5)}, {"a": _hunt(0, 20), "c": _hunt(1, 5)})
    assert [r.case_id for r in rows] == ["a"]
    assert rows[0].p_value == pytest.approx(0.000436, abs=1e-6)
    assert change_line(rows[0]) == ("a: 10/20 failed (50.0%) -> 0/20 failed (0%); "
                                              "Fisher exact p = 0.000436: fixed")


def test_failures_are_broken_down_per_device_when_a_hunt_spans_several():
    results = [replace(_result(Outcome.MISMATCH if i % 4 == 3 else Outcome.PASS, i), device=f"npu:{i % 2}")
               for i in range(8)]
    s = summarize_case(results)
    assert s.to_json()["by_device"] == {"npu:0": {"runs": 4, "failures": 0}, "npu:1": {"runs": 4, "failures": 2}}
    assert "  per device: npu:0 0/4 failed, npu:1 2/4 failed" in summary_lines("c", s)
    single = summarize_case([_result(Outcome.PASS, 0)])
    assert not any("per device" in line for line in summary_lines("c", single))


def test_bits_that_vary_are_seen_even_when_no_iteration_passed():
    """Every iteration failed: no baseline, nothing compared element-wise, but the digests still tell."""
    nothing = {"baseline": False, "baseline_repeat": None, "identical": None, "differs": [], "report": ""}
    varied = [_result(Outcome.MISMATCH, i, det={**nothing, "digests": {"query": "abc"[i]}}) for i in range(3)]
    d = summarize_case(varied).determinism
    assert d.identical is False and d.compared == 0 and d.variants == 3
    assert d.summary == ("NONDETERMINISTIC: 3 iterations gave 3 distinct bit patterns (the most common: 1 of 3); "
                            "no iteration passed its checks, so none was compared element by element")
    same = [_result(Outcome.MISMATCH, i, det={**nothing, "digests": {"query": "a"}}) for i in range(3)]
    assert summarize_case(same).determinism.identical is True     # deterministically wrong
