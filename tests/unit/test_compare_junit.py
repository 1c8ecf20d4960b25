"""A compare's JUnit fails only the candidate's problems; the baseline failures it fixes are text."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from junitparser import Failure, JUnitXml

from harness.outcomes import Outcome, Result
from harness.refs import compare as refcompare
from harness.document import build_document
from harness.reports.junit import write_junit

P, F, H = Outcome.PASS, Outcome.MISMATCH, Outcome.HANG


def _runs(ref: str, outcomes: list[Outcome], case_id: str) -> list[Result]:
    return [Result(case_id=case_id, matrix="m", outcome=o, repeat=i, ref=ref, summary=f"{o.value} on {ref}")
            for i, o in enumerate(outcomes)]


def _junit(tmp_path, per_case: dict[str, dict[str, list[Outcome]]], names=("up", "fix"), kind="compare"):
    results = [r for case_id, per_ref in per_case.items() for ref, outs in per_ref.items()
               for r in _runs(ref, outs, case_id)]
    rows = refcompare.table(results, list(names))
    doc = build_document(results, started=0.0, devices=["cpu"], command=["harness", "compare"], kind=kind,
                         refs=[{"name": n, "sha": "0" * 40, "subject": n, "build": None} for n in names],
                         compare=[r.to_json() for r in rows] if kind == "compare" else None)
    path = tmp_path / "c.xml"
    write_junit(path, doc)
    props = {c.get("name"): {p.get("name"): p.get("value") for p in c.find("properties")}
             for c in ET.parse(path).getroot().iter("testcase")}
    return {c.name: c for suite in JUnitXml.fromfile(str(path)) for c in suite}, props


def _red(cases) -> set[str]:
    return {name for name, c in cases.items() if not c.is_passed and not c.is_skipped}


def test_a_candidate_that_fixes_everything_has_no_failures(tmp_path):
    cases, props = _junit(tmp_path, {"m[a=1]": {"up": [F] * 5, "fix": [P] * 5}})
    assert len(cases) == 10 and _red(cases) == set()
    baseline = cases["m[a=1] [repeat 0] @up"]
    assert "MISMATCH on the baseline up: not a failure of this compare" in baseline.system_out
    # the cell carries its failures' detail (here the results' summary) after the label
    assert "Verdict for m[a=1]: fixed (up 0/5 PASS, 5/5 MISMATCH (MISMATCH on up) -> fix 5/5 PASS)" \
        in baseline.system_out
    assert props[baseline.name]["ref_role"] == "baseline" and props[baseline.name]["ref_verdict"] == "fixed"


@pytest.mark.parametrize("up, fix, verdict", [
    ([P] * 5, [F] * 5, "regressed"),
    ([P, F, P, F], [F, P, F, P], "flaky"),
    ([F] * 3, [F] * 3, "unchanged (failing)"),
    ([F] * 3, [H] * 3, "changed (failing differently)"),
    ([F] * 10, [F] + [P] * 9, "improved"),
])
def test_the_candidates_failing_runs_fail_and_nothing_else(tmp_path, up, fix, verdict):
    cases, props = _junit(tmp_path, {"m[a=1]": {"up": up, "fix": fix}})
    expected = {f"m[a=1] [repeat {i}] @fix" for i, o in enumerate(fix) if o is not P}
    assert _red(cases) == expected and expected
    for name in expected:
        (failure,) = cases[name].result
        assert isinstance(failure, Failure)
        assert props[name]["ref_verdict"] == verdict and props[name]["ref_role"] == "candidate"


def test_a_ref_between_baseline_and_candidate_never_fails(tmp_path):
    cases, _ = _junit(tmp_path, {"m[a=1]": {"up": [P] * 2, "mid": [F] * 2, "fix": [P] * 2}}, names=("up", "mid", "fix"))
    assert _red(cases) == set()
    assert "on the other ref mid" in cases["m[a=1] [repeat 1] @mid"].system_out


def test_cases_are_judged_one_by_one(tmp_path):
    cases, _ = _junit(tmp_path, {"m[a=1]": {"up": [F] * 2, "fix": [P] * 2},
                              "m[a=2]": {"up": [P] * 2, "fix": [F] * 2}})
    assert _red(cases) == {"m[a=2] [repeat 0] @fix", "m[a=2] [repeat 1] @fix"}


def test_other_documents_still_fail_every_failing_run(tmp_path):
    """Without the compare rows (a run, a flake hunt), every failure is red, baseline or not."""
    cases, _ = _junit(tmp_path, {"m[a=1]": {"up": [F] * 2, "fix": [P] * 2}}, kind="run")
    assert _red(cases) == {"m[a=1] [repeat 0] @up", "m[a=1] [repeat 1] @up"}
