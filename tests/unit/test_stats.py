"""Binomial intervals and the Fisher test against published values and exact coverage."""
from __future__ import annotations

import math

import pytest

from harness import stats


@pytest.mark.parametrize("k, n, lo, hi", [
    (1, 10, 0.0179, 0.4042),     # Wilson score, z = 1.96
    (5, 10, 0.2366, 0.7634),
    (0, 20, 0.0, 0.1611),
    (20, 20, 0.8389, 1.0),
])
def test_wilson_matches_known_values(k, n, lo, hi):
    got = stats.wilson(k, n)
    assert got == pytest.approx((lo, hi), abs=1e-4)


@pytest.mark.parametrize("k, n, lo, hi", [
    (1, 10, 0.002529, 0.445016),  # Clopper-Pearson, beta quantiles
    (0, 20, 0.0, 0.168433),
    (50, 100, 0.398321, 0.601679),
    (3, 30, 0.021117, 0.265288),
])
def test_clopper_pearson_matches_beta_quantiles(k, n, lo, hi):
    assert stats.clopper_pearson(k, n) == pytest.approx((lo, hi), abs=2e-6)


@pytest.mark.parametrize("k, n", [(1, 10), (3, 30), (17, 40), (199, 1000)])
def test_clopper_pearson_bounds_solve_the_tail_equations(k, n):
    lo, hi = stats.clopper_pearson(k, n)
    assert 1 - stats.binom_cdf(k - 1, n, lo) == pytest.approx(0.025, abs=1e-7)   # P(X >= k | lo)
    assert stats.binom_cdf(k, n, hi) == pytest.approx(0.025, abs=1e-7)          # P(X <= k | hi)


def _coverage(interval, n: int, p: float) -> float:
    """Exact coverage: the probability over X ~ Bin(n, p) that interval(X, n) holds p."""
    total = 0.0
    for k in range(n + 1):
        lo, hi = interval(k, n)
        if lo <= p <= hi:
            total += math.exp(stats._log_pmf(k, n, p))
    return total


@pytest.mark.parametrize("n", [10, 37, 100])
@pytest.mark.parametrize("p", [0.02, 0.1, 0.3, 0.5, 0.9])
def test_clopper_pearson_covers_the_truth_at_least_95_percent(n, p):
    assert _coverage(stats.clopper_pearson, n, p) >= 0.95 - 1e-9


@pytest.mark.parametrize("n", [37, 100])
@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_wilson_coverage_is_near_nominal(n, p):
    assert _coverage(stats.wilson, n, p) >= 0.92


def test_zero_failure_bound_and_runs_needed():
    assert stats.zero_failure_bound(20) == pytest.approx(0.1391, abs=1e-4)   # "<= 14% at 95%"
    assert stats.zero_failure_bound(5) == pytest.approx(0.4507, abs=1e-4)    # "5/5 PASS" allows 45%
    assert stats.runs_needed(0.01) == 299
    assert stats.zero_failure_bound(stats.runs_needed(0.05)) <= 0.05
    assert stats.zero_failure_bound(stats.runs_needed(0.05) - 1) > 0.05


@pytest.mark.parametrize("fa, na, fb, nb, p", [
    (8, 10, 1, 6, 0.034965),      # the classic 2x2 example [[8, 2], [1, 5]]
    (0, 20, 10, 20, 0.000436),
    (3, 10, 3, 10, 1.0),
    (0, 5, 0, 5, 1.0),
    (5, 5, 0, 5, 0.007937),
])
def test_fisher_exact_two_sided(fa, na, fb, nb, p):
    assert stats.fisher_exact(fa, na, fb, nb) == pytest.approx(p, abs=1e-6)
    assert stats.fisher_exact(fb, nb, fa, na) == pytest.approx(p, abs=1e-6)   # symmetric


@pytest.mark.parametrize("bad", [(-1, 5), (6, 5), (1, -1)])
def test_bad_counts_are_refused(bad):
    with pytest.raises(ValueError):
        stats.wilson(*bad)
    with pytest.raises(ValueError):
        stats.clopper_pearson(*bad)


def test_no_runs_say_nothing():
    assert stats.wilson(0, 0) == (0.0, 1.0)
    assert stats.clopper_pearson(0, 0) == (0.0, 1.0)
    assert math.isnan(stats.estimate(0, 0).rate)


# -- the Fisher test's power: what would decide a "flaky" compare ---------------------

def _brute_power(ra: float, rb: float, n: int, alpha: float = 0.05) -> float:
    """Every table of n runs a side, weighted by its binomial probability: fisher_exact itself."""
    pmf = lambda x, r: math.comb(n, x) * r ** x * (1 - r) ** (n - x)  # noqa: E731
    return math.fsum(pmf(xa, ra) * pmf(xb, rb) for xa in range(n + 1) for xb in range(n + 1)
                     if stats.fisher_exact(xa, n, xb, n) < alpha)


@pytest.mark.parametrize("ra, rb", [(0.0, 0.4), (0.4, 0.0), (0.1, 0.6), (0.3, 0.5), (0.5, 0.5), (1.0, 0.7)])
@pytest.mark.parametrize("n", [1, 3, 7, 12])
def test_fisher_power_is_the_enumerated_rejection_probability(ra, rb, n):
    assert stats.fisher_power(ra, rb, n) == pytest.approx(_brute_power(ra, rb, n), abs=1e-12)


def test_fisher_power_agrees_with_simulated_compares():
    import random
    rng = random.Random(7)
    n, trials = 16, 3000
    hits = sum(stats.fisher_exact(0, n, sum(rng.random() < 0.4 for _ in range(n)), n) < 0.05 for _ in range(trials))
    exact = stats.fisher_power(0.0, 0.4, n)
    assert abs(hits / trials - exact) < 4 * math.sqrt(exact * (1 - exact) / trials)


def test_runs_to_decide_reaches_the_power_and_the_size_before_does_not():
    # 0/10 against 4/10: flaky at 10 runs a side (Fisher p = 0.087); 16 would find it 83% of the time
    assert stats.fisher_exact(0, 10, 4, 10) > 0.05
    n = stats.runs_to_decide(0.0, 0.4)
    assert n == 16 and stats.fisher_power(0.0, 0.4, n) >= 0.8 > stats.fisher_power(0.0, 0.4, n - 1)
    assert stats.runs_to_decide(0.0, 1.0) == 4          # 0/3 vs 3/3 has p = 0.1; 0/4 vs 4/4 p = 0.029
    n = stats.runs_to_decide(0.3, 0.5)
    assert stats.fisher_power(0.3, 0.5, n) >= 0.8 > stats.fisher_power(0.3, 0.5, n // 2)


def test_runs_to_decide_says_none_where_no_count_would():
    assert stats.runs_to_decide(0.2, 0.2) is None
    assert stats.runs_to_decide(0.45, 0.5, max_runs=200) is None
