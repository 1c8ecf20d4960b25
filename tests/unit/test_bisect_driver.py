"""The bisect driver (harness.bisect.driver) on simulated runs: what a run observes, and a
history with two bugs of different classes, each found by its own signature with the other
reported as a finding.  In-process, no git, no workers; every random stream is seeded.
"""
from __future__ import annotations

import numpy as np
import pytest

from harness.bisect.driver import CLEAN, SIGHTED, UNTESTABLE, BisectError, BisectState, Signature, observe
from harness.bisect.search import Conclusion, FlakyBisect
from harness.outcomes import Outcome, Result
from harness.refs.git import Commit
from harness.reports.bisect_text import render_bisect


def _result(outcome: Outcome, case: str = "c", code=None) -> Result:
    return Result(case_id=case, outcome=outcome, code=code)


def _commits(n: int) -> list[Commit]:
    return [Commit(sha=f"{i:02d}" + "a" * 38, subject=f"commit {i}", author_date="2024-01-01T00:00:00+00:00",
                   author="Dev <d@x>") for i in range(n + 1)]


@pytest.mark.parametrize("outcomes, signature, expected", [
    ([Outcome.MISMATCH], "HANG", CLEAN),                           # another failure: the HANG did not happen
    ([Outcome.HANG], "HANG", SIGHTED),
    ([Outcome.PASS, Outcome.HANG], "HANG", SIGHTED),
    ([Outcome.MISMATCH, Outcome.CRASH], "HANG", CLEAN),
    ([Outcome.HARNESS_ERROR, Outcome.MISMATCH], "HANG", CLEAN),    # one case ran: that is enough
    ([Outcome.BUILD_ERROR], "HANG", UNTESTABLE),                   # build or import error
    ([Outcome.HARNESS_ERROR, Outcome.HARNESS_ERROR], "HANG", UNTESTABLE),
    ([Outcome.BUILD_ERROR, Outcome.HARNESS_ERROR], "MISMATCH", UNTESTABLE),
    ([Outcome.PASS], "MISMATCH", CLEAN),
])
def test_a_run_without_the_signature_is_clean_whatever_else_failed(outcomes, signature, expected):
    results = [_result(o, f"case{i}") for i, o in enumerate(outcomes)]
    assert observe(results, Signature.parse(signature))[0] == expected


def test_the_default_signature_is_the_first_failure_that_ran():
    what, sig = observe([_result(Outcome.HARNESS_ERROR, "a"), _result(Outcome.MISMATCH, "b")], None)
    assert what == SIGHTED and str(sig) == "MISMATCH"
    assert observe([_result(Outcome.HARNESS_ERROR)], None) == (UNTESTABLE, None)


def test_an_untestable_endpoint_stops_the_bisect():
    state = BisectState(_commits(4), FlakyBisect(4), Signature.parse("HANG"))
    with pytest.raises(BisectError, match="bad endpoint .* cannot be tested"):
        state.record(4, [_result(Outcome.HARNESS_ERROR)], "r1")
    state.record(2, [_result(Outcome.BUILD_ERROR)], "r2")
    assert state.search.tally()[2].skipped


def _two_bug_run(index: int, race_at: int, hang_at: int, p_race: float, p_hang: float,
                 rng: np.random.Generator) -> list[Result]:
    """One run of one case: a deadlock (from ``hang_at``) stops the kernel before it can race."""
    if index >= hang_at and rng.random() < p_hang:
        return [_result(Outcome.HANG)]
    if index >= race_at and rng.random() < p_race:
        return [_result(Outcome.MISMATCH)]
    return [_result(Outcome.PASS)]


def _bisect(signature: str, n: int, race_at: int, hang_at: int, seed: int) -> BisectState:
    rng = np.random.default_rng(seed)
    state = BisectState(_commits(n), FlakyBisect(n, max_runs=400), Signature.parse(signature))
    step = 0
    while (index := state.next_index()) is not None:
        state.record(index, _two_bug_run(index, race_at, hang_at, 0.3, 0.3, rng), f"run{step}")
        step += 1
    return state


@pytest.mark.parametrize("n, race_at, hang_at, seed", [(24, 7, 15, 1), (32, 13, 20, 2), (16, 3, 4, 3)])
def test_two_bugs_each_signature_finds_its_own_culprit(n, race_at, hang_at, seed):
    hang = _bisect("HANG", n, race_at, hang_at, seed)
    answer = hang.search.answer()
    # before this model the MISMATCH runs made commits race_at..hang_at-1 untestable: a skipped range
    assert answer.conclusion is Conclusion.FOUND and answer.culprit == hang_at
    assert not any(t.skipped for t in hang.search.tally())
    (mismatch,) = hang.also_seen()
    assert mismatch.label == "MISMATCH" and mismatch.first >= race_at      # a sighting never lies
    report = hang.report()
    assert report["also_seen"][0]["first"] == hang.commits[mismatch.first].sha
    before = [i for i in mismatch.at if i < hang_at]
    assert report["also_seen"][0]["before"] == ([hang.commits[before[0]].sha, hang.commits[before[-1]].sha]
                                                if before else None)
    text = "\n".join(render_bisect(hang, report, started=0.0, finished=75.0))
    assert f"first bad commit: {hang.commits[hang_at].sha}" in text
    assert f"also seen: MISMATCH at {hang.commits[mismatch.first].short}" in text
    assert ("another bug; bisect it with --signature MISMATCH" in text) == bool(before)
    assert "started 1970-01-01 00:00:00 UTC, finished 1970-01-01 00:01:15 UTC (1m 15s)" in text

    race = _bisect("MISMATCH", n, race_at, hang_at, seed + 100)
    assert race.search.answer().conclusion is Conclusion.FOUND and race.search.culprit() == race_at
    assert [a.label for a in race.also_seen()] in ([], ["HANG"])
    assert all(a.first >= hang_at for a in race.also_seen())


def test_steps_saved_by_an_older_harness_still_read():
    old = {"commits": [c.__dict__ for c in _commits(3)], "search": FlakyBisect(3).to_dict(), "signature": "HANG",
           "steps": [{"index": 3, "sha": "03" + "a" * 38, "observed": "inconclusive", "run_id": "r",
                      "labels": ["MISMATCH"]}], "inconclusive": {"2": 1}}
    state = BisectState.from_dict(old)
    assert state.also_seen() == [] and state.report()["also_seen"] == []
    assert BisectState.from_dict(state.to_dict()).steps == state.steps


def test_a_stored_bisect_document_has_its_own_times_and_the_devices_provenance():
    from harness.store import MemoryStore
    from harness.reports.history import stored_document

    store = MemoryStore()
    state = BisectState(_commits(2), FlakyBisect(2), Signature.parse("HANG"))
    parent = store.start_run(command=["harness", "bisect"], devices=["cpu"], kind="bisect",
                             extra={"bisect": {"state": state.to_dict()}})
    step = store.start_run(command=["harness", "bisect"], devices=["cpu"], kind="bisect-step", parent_id=parent)
    store.add_result(step, _result(Outcome.MISMATCH))
    store.finish_run(step, {}, provenance={"devices": {"cpu": {"torch": "2.13.0+cpu"}}})
    state.record(2, [_result(Outcome.MISMATCH)], step)
    store.update_extra(parent, {"bisect": {"state": state.to_dict()}})
    # unfinished (or stored by an older harness, without devices): the steps' reports are read
    doc = stored_document(store, parent)
    assert doc["provenance"]["devices"] == {"cpu": {"torch": "2.13.0+cpu"}}
    run = store.run(parent)
    assert doc["started"] == run["started"] and doc["finished"] is None
    assert doc["bisect"]["also_seen"][0]["label"] == "MISMATCH"


def test_before_the_culprit_is_said_only_when_the_bisect_names_one():
    state = BisectState(_commits(8), FlakyBisect(8, max_runs=2), Signature.parse("HANG"))
    state.record(8, [_result(Outcome.HANG)], "r1")
    state.record(3, [_result(Outcome.MISMATCH)], "r2")
    report = state.report()
    assert report["verdict"] == "UNDECIDED"
    assert report["also_seen"][0]["label"] == "MISMATCH" and report["also_seen"][0]["before"] is None


def _command_failed(ref: str) -> Result:
    output = "Traceback (most recent call last):\n  File \"repro.py\", line 1, in <module>\n" \
             "ImportError: cannot import name 'CUDAProperties' from 'kernels'\n"
    return Result(case_id="repro", matrix="repro", outcome=Outcome.FAILED, summary="exited with status 1",
                  report=f"$ python repro.py\n(cwd /src/serving; exit status 1; {len(output)} bytes of output)\n{output}",
                  metrics={"command": {"command": "python repro.py"}}, ref=ref)


def test_a_command_failing_everywhere_shows_what_it_printed_in_the_conclusion():
    from harness.reports.markdown import render_markdown
    from harness.store import MemoryStore
    from harness.reports.history import stored_document

    store = MemoryStore()
    commits = _commits(4)
    state = BisectState(commits, FlakyBisect(4), None)
    parent = store.start_run(command=["harness", "bisect"], devices=["cpu"], kind="bisect",
                             extra={"bisect": {"state": state.to_dict()}})
    while (index := state.next_index()) is not None:       # the command fails at every commit, good included
        step = store.start_run(command=["harness", "bisect"], devices=["cpu"], kind="bisect-step", parent_id=parent)
        result = _command_failed(commits[index].short)
        store.add_result(step, result)
        store.finish_run(step, {})
        state.record(index, [result], step)
    store.update_extra(parent, {"bisect": {"state": state.to_dict()}})
    doc = stored_document(store, parent)
    report = doc["bisect"]
    assert report["verdict"] == Conclusion.GOOD_SHOWS.value
    text = "\n".join(render_bisect(state, report))
    assert "no culprit in range: the good endpoint" in text
    assert "FAILED of repro at " in text and "ImportError: cannot import name 'CUDAProperties'" in text
    assert "cannot import name 'CUDAProperties'" in render_markdown(doc)
    # a kernel case's failure needs no such text: its summary says what failed
    assert BisectState(_commits(1), FlakyBisect(1), None).report().get("failure") is None


@pytest.mark.parametrize("p, culprit, seed", [(1.0, 11, 4), (0.4, 6, 5)])
def test_the_conclusion_says_what_p_the_search_ended_believing_with_its_interval(p, culprit, seed):
    rng = np.random.default_rng(seed)
    state = BisectState(_commits(16), FlakyBisect(16), Signature.parse("MISMATCH"))
    step = 0
    while (index := state.next_index()) is not None:
        shows = index >= culprit and rng.random() < p
        state.record(index, [_result(Outcome.MISMATCH if shows else Outcome.PASS)], f"run{step}")
        step += 1
    assert state.search.culprit() == culprit
    report = state.report()
    est = report["p"]
    assert est["low"] <= est["mean"] <= est["high"] and est["level"] == 0.9
    assert est["low"] <= p <= est["high"] or (p == 1.0 and est["high"] > 0.95)   # an interval never reaches 1
    text = "\n".join(render_bisect(state, report))
    assert (f"reproduction probability p ~ {est['mean']:.2f} (90% interval {est['low']:.2f}-{est['high']:.2f}, "
            f"{est['sightings']} sightings)") in text
    # a deterministic failure says why it stopped short of the posterior's confidence; a flaky one does not
    assert ("deterministic: every run at a bad commit showed MISMATCH" in text) == (p == 1.0)
