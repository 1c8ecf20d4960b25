"""The p prior of a bisect: --p-prior parsing, the stored rate at the bad commit, and how it weighs."""
from __future__ import annotations

import math

import pytest

from harness.bisect.driver import Signature
from harness.bisect.prior import MIN_STORED_RUNS, choose, parse_p_prior, stored_rate
from harness.bisect.search import Conclusion, FlakyBisect
from harness.errors import UsageError
from harness.outcomes import Outcome, Result
from harness.store import MemoryStore

BAD, MID = "b" * 40, "m" * 40
COMMITS = [(BAD, "bbbbbbbbbbbb"), (MID, "mmmmmmmmmmmm")]       # bad first, then down the range
HANG = Signature.parse("HANG")


def _store_runs(store, sha, outcomes, *, device="cpu", kind="flake", case="c"):
    run_id = store.start_run(command=["harness"], devices=[device], kind=kind, ref="x", ref_sha=sha)
    for i, outcome in enumerate(outcomes):
        store.add_result(run_id, Result(case_id=case, outcome=outcome, repeat=i, device=device))
    return run_id


def _choose(store, mode=None, signature=HANG, devices=("cpu",)):
    return choose(mode, store=store, commits=COMMITS, case_ids=["c"], devices=devices, signature=signature)


@pytest.mark.parametrize("text, expected", [("from-store", "from-store"), ("none", "none"), ("0.4", 0.4),
                                            ("1", 1.0), (None, None)])
def test_p_prior_flag_reads(text, expected):
    assert parse_p_prior(text) == expected


@pytest.mark.parametrize("text", ["0", "1.5", "-0.2", "nan", "often", ""])
def test_p_prior_outside_0_1_is_refused_naming_the_flag(text):
    with pytest.raises(UsageError, match="--p-prior"):
        parse_p_prior(text)


def test_stored_rate_at_bad_becomes_the_prior():
    store = MemoryStore()
    _store_runs(store, BAD, [Outcome.HANG] * 8 + [Outcome.PASS] * 12)
    prior = _choose(store)
    assert prior.source == "store" and prior.evidence == (20.0, 8.0)
    assert "8 of 20 stored runs showing HANG at bad (flake)" in prior.text and "Beta(9, 13.25)" in prior.text


def test_another_device_or_signature_is_left_out_and_said():
    store = MemoryStore()
    _store_runs(store, BAD, [Outcome.HANG] * 12, device="npu:1")
    _store_runs(store, BAD, [Outcome.MISMATCH] * 12)
    rate = stored_rate(store, BAD, ["c"], ["cpu"], HANG)
    assert rate.runs == 0
    assert rate.left_out == {"ran on another device (npu:1)": 12, "failed with another signature (MISMATCH)": 12}
    prior = _choose(store)
    assert prior.source == "none" and prior.evidence == (0.0, 0.0)
    assert "no stored runs of the case at bad" in prior.text and "another device (npu:1)" in prior.text


def test_few_stored_runs_are_not_the_default_and_never_certainty():
    store = MemoryStore()
    _store_runs(store, BAD, [Outcome.HANG] * 3)
    assert _choose(store).source == "none"
    assert f"3 stored runs at bad, fewer than {MIN_STORED_RUNS}" in _choose(store).text
    asked = _choose(store, "from-store")              # asked for: 3 runs weigh as 3 runs
    assert asked.evidence == (3.0, 3.0)
    search = FlakyBisect(8, p_evidence=asked.evidence)
    search.record(8, True)
    p = search.estimate_p()
    assert 0.7 < p.mean < 0.9 and p.low < 0.6                 # Beta(5, 1.25): far from p = 1
    zero = FlakyBisect(8, p_evidence=(3.0, 0.0))              # a rate of 0 from 3 runs: not "never shows"
    zero.record(8, True)
    assert zero.estimate_p().mean > 0.2


def test_nearest_commit_with_enough_runs_and_a_sighting_stands_in_for_bad():
    store = MemoryStore()
    _store_runs(store, MID, [Outcome.HANG] * 6 + [Outcome.PASS] * 6, kind="compare")
    prior = _choose(store)
    assert prior.evidence == (12.0, 6.0) and "at mmmmmmmmmmmm (nearest commit with enough runs)" in prior.text


def test_no_store_case_or_signature_gives_the_default_prior_said_once():
    assert "no stored runs of the case at bad" in _choose(MemoryStore()).text
    assert _choose(MemoryStore(), signature=None).text.count("needs --signature") == 1
    assert _choose(MemoryStore(), "none").evidence == (0.0, 0.0)
    stated = _choose(MemoryStore(), 1.0)
    assert stated.source == "stated" and stated.evidence == (10.0, 10.0)


def test_a_stored_clean_run_rules_out_the_deterministic_check():
    search = FlakyBisect(4, p_evidence=(20.0, 19.0))
    for index, sighted in ((4, True), (2, False), (3, True), (2, False)):
        search.record(index, sighted)
    assert search.deterministic_ratio() == math.inf
    all_seen = FlakyBisect(4, p_evidence=(20.0, 20.0))
    for index, sighted in ((4, True), (2, False), (3, True), (2, False)):
        all_seen.record(index, sighted)
    # 20 of 20 earlier runs: the posterior (Beta(21, 1.25)) and the deterministic check both hold
    assert all_seen.answer().conclusion is Conclusion.FOUND and all_seen.deterministic_ratio() < 0.01
    again = FlakyBisect.from_dict(all_seen.to_dict())
    assert again.p_evidence == (20.0, 20.0) and again.answer() == all_seen.answer()


@pytest.mark.parametrize("evidence", [(3, 4), (-1, 0), (math.inf, 1), "x"])
def test_bad_p_evidence_is_refused(evidence):
    with pytest.raises(ValueError, match="p_evidence"):
        FlakyBisect(4, p_evidence=evidence)


@pytest.mark.parametrize("value", ["0", "2", "sometimes"])
def test_bisect_refuses_a_p_prior_outside_0_1_with_exit_2(value, capsys, tmp_path):
    from harness.cli import main
    code = main(["bisect", str(tmp_path), "--repo", str(tmp_path), "--good", "a", "--bad", "b",
                 "--p-prior", value, "--no-store"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--p-prior" in err[0]


def test_runs_to_see_a_bad_commit_follow_the_prior():
    from harness.bisect.prior import runs_to_see
    runs, missed = runs_to_see((20.0, 20.0))            # Beta(21, 1.25): deterministic-looking
    assert runs == 2 and missed <= 0.01
    runs, missed = runs_to_see((20.0, 8.0))             # Beta(9, 13.25): about 0.4
    assert 8 <= runs <= 14 and missed <= 0.01
    few, _ = runs_to_see((3.0, 3.0))                    # 3 runs are not certainty: more runs than 20 of 20
    assert few > 2
    assert runs_to_see((0.0, 0.0), cap=5) == (5, runs_to_see((0.0, 0.0), cap=5)[1])   # capped


def test_bisect_run_repeat_from_a_stored_rate(tmp_path, monkeypatch):
    from harness.cli import bisect as cli
    store = MemoryStore()
    _store_runs(store, BAD, [Outcome.HANG] * 8 + [Outcome.PASS] * 12)
    cases = [type("C", (), {"case_id": "c"})()]
    monkeypatch.setattr(cli, "_bisect_bad_sha", lambda: BAD)
    runs, line = cli._repeat_from_prior(None, store, cases, ["cpu"], HANG)
    assert runs > 5 and f"{runs} runs per case" in line and "8 of 20 stored runs" in line
    assert cli._repeat_from_prior("none", store, cases, ["cpu"], HANG)[0] == 1
    monkeypatch.setattr(cli, "_bisect_bad_sha", lambda: None)
    runs, line = cli._repeat_from_prior(None, store, cases, ["cpu"], HANG)
    assert runs == 1 and "no refs/bisect/bad" in line
    assert cli._repeat_from_prior(1.0, store, cases, ["cpu"], HANG)[0] == 3      # a stated rate needs no store
