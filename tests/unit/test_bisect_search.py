"""The flake-aware bisection search (harness.bisect.search): seeded simulations of whole
searches, the posterior's hard constraints, skips, the "none in range" answers, the
choice rule where the posterior median stalls, the p estimate, and saved state.

All pure and in-process; every random stream is seeded.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from harness.bisect.search import Conclusion, FlakyBisect


def simulate(search: FlakyBisect, culprit: int, p: float, rng: np.random.Generator,
             max_steps: int = 2000) -> FlakyBisect:
    """Drive ``search`` to the end. ``culprit`` 0: G already shows it; ``n + 1``: nothing shows it."""
    for _ in range(max_steps):
        index = search.next_index()
        if index is None:
            return search
        search.record(index, bool(index >= culprit and rng.random() < p))
    raise AssertionError(f"no answer after {max_steps} runs: {search.answer()}")


def known_p(p: float) -> tuple[float, float]:
    """A Beta prior of weight 1e5 at ``p``: the search as if p were known."""
    return max(1e5 * p, 1e-6), max(1e5 * (1 - p), 1e-6)


# --------------------------------------------------------------------------- finding it
@pytest.mark.parametrize("n", [16, 64, 256])
def test_deterministic_failure_is_found_in_about_log2_n_runs(n):
    rng = np.random.default_rng(n)
    culprits = rng.integers(1, n + 1, size=8)
    for culprit in culprits:
        # p known to be 1: one run per bisection step, plus the one run at B
        search = simulate(FlakyBisect(n, p_prior=known_p(1.0)), int(culprit), 1.0, rng)
        assert search.answer().conclusion is Conclusion.FOUND and search.culprit() == culprit
        assert search.runs <= math.ceil(math.log2(n)) + 2
    runs, unlearned = [], []
    for culprit in culprits:
        # p unknown: the runs just below the culprit and at it must rule out a flaky p as well
        search = simulate(FlakyBisect(n), int(culprit), 1.0, rng)
        assert search.culprit() == culprit and search.answer().deterministic
        runs.append(search.runs)
        plain = simulate(FlakyBisect(n, learn_deterministic=False), int(culprit), 1.0, rng)
        assert plain.culprit() == culprit and not plain.answer().deterministic
        unlearned.append(plain.runs)
    # measured (bench, 1000 trials): 10.2, 12.4, 14.5 learning determinism; 12.8, 15.3, 18.0 without
    assert np.mean(runs) < np.mean(unlearned)
    assert np.mean(runs) <= math.log2(n) + 8


def test_deterministic_ratio_bounds_every_earlier_culprit_at_its_best_p():
    search = FlakyBisect(8, none_prior=0.0)
    for index, sighted in ((8, True), (4, True), (3, False), (3, False), (2, False)):
        search.record(index, sighted)
    # S = 2 sightings; culprit 3 missed 2 clean runs, culprits 1 and 2 missed 3: the largest
    # over p of their likelihoods' sum (over the culprit 4's equal prior), at most the sum of maxima
    p = np.linspace(1e-4, 1 - 1e-4, 200001)
    best = float(np.max(p ** 2 * (1 - p) ** 2 + 2 * p ** 2 * (1 - p) ** 3))
    bound = lambda s, f: (s / (s + f)) ** s * (f / (s + f)) ** f
    assert search.deterministic_ratio() == pytest.approx(best, rel=1e-3)
    assert best < bound(2, 2) + 2 * bound(2, 3)
    assert search.next_index() in (3, 4)              # firm up below the culprit or at it
    search.record(8, False)                           # a clean run at a commit proven bad: not deterministic
    assert search.deterministic_ratio() == math.inf
    assert not search.answer().deterministic


def test_deterministic_stop_names_the_culprit_with_its_ratio():
    search = FlakyBisect(8)
    for index, sighted in ((8, True), (4, True), (3, False), (4, True), (3, False), (3, False), (4, True),
                           (3, False), (4, True)):
        search.record(index, sighted)
    answer = search.answer()
    assert answer.conclusion is Conclusion.FOUND and answer.culprit == 4 and answer.deterministic
    assert search.deterministic_ratio() <= 0.01 < 1.0 - answer.probability
    p = search.estimate_p()
    assert p.sightings == 5 and p.mean > 0.75 and p.high > 0.95
    # without the check the same evidence is not enough for the posterior
    off = FlakyBisect.from_dict({**search.to_dict(), "learn_deterministic": False})
    assert off.answer().conclusion is Conclusion.SEARCHING


def test_a_lucky_streak_of_a_flaky_failure_does_not_fool_the_check():
    # p = 0.7, the worst case of the bound: 200 searches, culprit uniform; the check's error is bounded
    rng = np.random.default_rng(7)
    wrong = sum(simulate(FlakyBisect(16), int(c), 0.7, rng).culprit() != c for c in rng.integers(1, 17, size=200))
    assert wrong <= 4


@pytest.mark.parametrize("p, n, trials, misses", [(0.5, 32, 6, 0), (0.4, 16, 8, 0), (0.2, 16, 8, 1)])
def test_flaky_culprit_is_found(p, n, trials, misses):
    # the benchmark measures 99% right at p = 0.5 and 98% at p = 0.2: a miss in 8 is allowed there
    rng = np.random.default_rng(2)
    wrong = 0
    for culprit in rng.integers(1, n + 1, size=trials):
        search = simulate(FlakyBisect(n), int(culprit), p, rng)
        answer = search.answer()
        assert answer.conclusion is Conclusion.FOUND and answer.probability >= 0.99
        assert answer.runs == search.runs == sum(t.runs for t in search.tally())
        assert answer.culprit >= culprit               # a sighting never lies: a miss is always too late
        wrong += answer.culprit != culprit
    assert wrong <= misses


def test_a_sighting_rules_out_every_later_commit():
    search = FlakyBisect(20)
    search.record(20, True)
    search.record(7, True)
    post = search.posterior()
    assert np.all(post[8:] == 0.0)                    # commits 8..20 and NOT_REPRODUCED
    assert post[:8].sum() == pytest.approx(1.0) and np.all(post[1:8] > 0)
    for _ in range(10):                               # nothing after 7 is ever worth running again
        index = search.next_index()
        assert index is not None and index <= 7
        search.record(index, False)
    assert np.all(search.posterior()[8:] == 0.0)


def test_clean_runs_only_shift_mass_they_never_rule_out():
    search = FlakyBisect(8)
    search.record(8, True)
    for _ in range(30):
        search.record(4, False)
    post = search.posterior()
    assert post[4] > 0 and post[5:9].sum() > 0.99   # 1..4 unlikely, not impossible


def test_protocol_runs_the_bad_endpoint_until_a_first_sighting():
    search = FlakyBisect(10, min_good_runs=2)
    assert search.next_index() == 10
    search.record(10, False)
    assert search.next_index() == 10                  # still no sighting: B again
    search.record(10, True)
    assert search.next_index() == 0                   # then G up to min_good_runs
    search.record(0, False)
    assert search.next_index() == 0
    search.record(0, False)
    assert search.next_index() not in (0, None)


def test_a_sighting_anywhere_stands_for_the_bad_endpoint():
    search = FlakyBisect(10)
    search.record(6, True)                            # B is at least as bad as commit 6
    assert search.next_index() != 10
    assert search.posterior()[11] == 0.0


# ----------------------------------------------------------------------------- skips
@pytest.mark.parametrize("culprit", [6, 7, 8, 9])
@pytest.mark.parametrize("p", [1.0, 0.5])
def test_culprit_among_skipped_commits_is_reported_as_a_range(culprit, p):
    rng = np.random.default_rng(culprit)
    search = FlakyBisect(16)
    for index in (6, 7, 8):
        search.skip(index)
    simulate(search, culprit, p, rng)
    answer = search.answer()
    assert answer.conclusion is Conclusion.SKIPPED_RANGE
    assert (answer.first, answer.last) == (6, 9)      # skipped 6..8 and the tested commit after them
    # a deterministic failure may stop on the deterministic check, below the posterior's confidence
    assert (answer.probability >= 0.99 or search.deterministic_ratio() <= 0.01) and answer.culprit is None
    assert search.culprit() is None
    assert all(search.tally()[i].runs == 0 and search.tally()[i].skipped for i in (6, 7, 8))


def test_culprit_next_to_skipped_commits_is_still_found():
    rng = np.random.default_rng(5)
    search = FlakyBisect(16)
    for index in (6, 7, 8):
        search.skip(index)
    simulate(search, 10, 0.5, rng)
    assert search.answer().conclusion is Conclusion.FOUND and search.culprit() == 10


def test_skip_rules():
    search = FlakyBisect(5)
    with pytest.raises(ValueError, match="good endpoint"):
        search.skip(0)
    with pytest.raises(ValueError, match="bad endpoint"):
        search.skip(5)
    search.skip(2)
    with pytest.raises(ValueError, match="skipped"):
        search.record(2, False)
    assert search.groups() == [(1, 1), (2, 3), (4, 4), (5, 5)]
    assert search.information()[2] == -np.inf


# ----------------------------------------------------------------------- none in range
def test_good_endpoint_showing_the_signature_means_none_in_range():
    rng = np.random.default_rng(3)
    search = simulate(FlakyBisect(32), 0, 0.5, rng)  # every commit, G included, shows it
    answer = search.answer()
    assert answer.conclusion is Conclusion.GOOD_SHOWS and answer.culprit is None
    assert search.none_in_range() >= 0.99 and search.tally()[0].sightings >= 1


def test_one_sighting_at_the_good_endpoint_settles_it():
    search = FlakyBisect(8)
    search.record(8, True)
    search.record(0, True)
    assert search.answer().conclusion is Conclusion.GOOD_SHOWS
    assert search.posterior()[0] == pytest.approx(1.0)
    assert search.next_index() is None


def test_bad_endpoint_that_never_reproduces_gives_up_within_its_budget():
    search = FlakyBisect(32, max_bad_runs=20)
    chosen = []
    while (index := search.next_index()) is not None:
        chosen.append(index)
        search.record(index, False)
    assert chosen == [32] * 20
    answer = search.answer()
    assert answer.conclusion is Conclusion.NOT_REPRODUCED and answer.culprit is None and answer.first is None
    assert search.none_in_range() > search.posterior()[1:33].max()


def test_run_budget_ends_undecided_with_the_best_guess():
    rng = np.random.default_rng(11)
    search = simulate(FlakyBisect(64, max_runs=12), 40, 0.3, rng)
    answer = search.answer()
    assert answer.conclusion is Conclusion.UNDECIDED and answer.runs == 12
    assert answer.culprit is None and answer.first is not None and answer.probability < 0.99


# ------------------------------------------------------------------- the choice rule
def _stalled(p_prior):
    """B and commit 4 sighted, 3 clean runs at 3: most mass on 4, the posterior median."""
    search = FlakyBisect(16, p_prior=p_prior, learn_deterministic=False)   # the information rule alone
    search.record(16, True)
    search.record(4, True)
    for _ in range(3):
        search.record(3, False)
    return search


@pytest.mark.parametrize("p_prior", [None, known_p(0.5)], ids=["p unknown", "p known"])
def test_choice_does_not_stall_on_the_posterior_median(p_prior):
    search = _stalled(p_prior) if p_prior else _stalled((1.0, 1.25))
    post = search.posterior()
    median = int(np.searchsorted(np.cumsum(post), 0.5))
    assert median == 4 and post[4] < 0.99             # the median rule would run 4 ...
    info = search.information()
    assert info[4] < 0.25 * info[3]                   # ... which says next to nothing about the culprit
    if p_prior:
        assert info[4] == pytest.approx(0.0, abs=1e-9)  # (nothing at all once p is known)
    choice = search.next_index()
    assert choice == 3


def test_information_is_zero_where_the_answer_is_already_known():
    search = FlakyBisect(8, p_prior=known_p(0.5))
    search.record(8, True)
    search.record(5, True)
    info = search.information()
    assert np.allclose(info[5:], 0.0, atol=1e-9) and info[:5].max() > 0.1


def test_choice_is_fast_enough_to_vectorise_over_a_thousand_commits():
    search = FlakyBisect(1000)
    search.record(1000, True)
    index = search.next_index()
    assert 0 < index < 1000
    assert search.information().shape == (1001,)


# ------------------------------------------------------------------------ p estimate
def test_p_estimate_is_conservative_where_it_matters():
    rng = np.random.default_rng(21)
    p, lows, covered = 0.3, [], 0
    for culprit in rng.integers(1, 33, size=30):
        search = simulate(FlakyBisect(32), int(culprit), p, rng)
        est = search.estimate_p(level=0.9)
        assert 0.0 < est.low <= est.mean <= est.high < 1.0 and est.sightings >= 1
        lows.append(est.low)
        covered += est.low <= p <= est.high
    assert np.mean(lows) <= p                          # the interval's low end stays below p
    assert covered >= 0.8 * 30


def test_clean_runs_count_for_less_than_a_plugged_in_estimate_says():
    search = FlakyBisect(16)
    for index, sighted in [(16, True), (8, True), (4, False), (6, False), (7, True), (16, True)]:
        search.record(index, sighted)
    before = search.posterior()
    p_hat = search.estimate_p().mean
    for _ in range(4):
        search.record(6, False)
    after = search.posterior()
    # odds of culprit 6 against 7: a plug-in p_hat would divide them by (1 - p_hat)^-4
    ratio = (after[6] / after[7]) / (before[6] / before[7])
    assert ratio > (1 - p_hat) ** 4


def test_p_estimate_before_any_sighting_is_the_prior():
    est = FlakyBisect(4).estimate_p()
    assert est.mean == pytest.approx(1.0 / 2.25, abs=1e-3) and est.sightings == 0 and est.runs == 0


# ----------------------------------------------------------------------- saved state
def test_state_round_trip_gives_identical_choices():
    rng = np.random.default_rng(8)
    original = FlakyBisect(50, confidence=0.995, max_runs=400)
    original.skip(20)
    for _ in range(9):
        index = original.next_index()
        original.record(index, bool(index >= 23 and rng.random() < 0.4))
    text = json.dumps(original.to_dict())
    resumed = FlakyBisect.from_dict(json.loads(text))
    assert resumed.to_dict() == original.to_dict()
    assert np.array_equal(resumed.posterior(), original.posterior())
    assert resumed.tally() == original.tally()
    while True:                                         # same outcomes in lockstep: same choices to the end
        a, b = original.next_index(), resumed.next_index()
        assert a == b
        if a is None:
            break
        sighted = bool(a >= 23 and rng.random() < 0.4)
        original.record(a, sighted)
        resumed.record(b, sighted)
    assert resumed.answer() == original.answer()


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d.pop("n"), "missing field 'n'"),
    (lambda d: d.update(version=99), "version 99"),
    (lambda d: d.update(tally=[[3, 1, 2, False]]), "tally[0]: sightings 2 exceed runs 1"),
    (lambda d: d.update(tally=[[99, 1, 0, False]]), "tally[0]: commit index"),
    (lambda d: d.update(tally=[[0, 0, 0, True]]), "tally[0]: endpoint 0 marked skipped"),
    (lambda d: d.update(confidence=1.5), "confidence must be in"),
])
def test_bad_saved_state_is_refused_with_its_place(mutate, needle):
    data = FlakyBisect(6).to_dict()
    mutate(data)
    with pytest.raises(ValueError, match="bisect state") as err:
        FlakyBisect.from_dict(data)
    assert needle in str(err.value)


@pytest.mark.parametrize("kwargs, needle", [
    ({"n": 0}, "n (commits after the good endpoint)"),
    ({"n": 4, "confidence": 1.0}, "confidence"),
    ({"n": 4, "prior": [1, 1]}, "prior must be 4"),
    ({"n": 4, "p_prior": (0, 1)}, "p_prior"),
    ({"n": 4, "max_runs": 0}, "max_runs"),
])
def test_bad_settings_are_refused(kwargs, needle):
    with pytest.raises(ValueError) as err:
        FlakyBisect(**kwargs)
    assert needle in str(err.value)


def test_bad_indices_are_refused():
    search = FlakyBisect(4)
    for bad in (-1, 5, 2.5, True):
        with pytest.raises(ValueError, match="commit index"):
            search.record(bad, True)


def test_prior_tilts_the_search():
    weights = np.ones(16)
    weights[11 - 1] = 50.0                            # "the big refactor at 11" (weights for 1..n)
    search = FlakyBisect(16, prior=weights)
    search.record(16, True)
    assert search.posterior()[11] > 0.5
    assert search.next_index() in (10, 11)            # test the favourite's edge first
