"""The latency statistics: the median's interval, the ratio's, the verdict (harness/latency/statistics.py)."""
from __future__ import annotations

import random

import pytest

from harness import stats
from harness.latency.statistics import (Side, Verdict, check_threshold, compare, decide, hodges_lehmann_ratio,
                                        parse_percent)


def test_median_ci_ranks_are_the_sign_test_ones():
    assert stats.median_ci_ranks(5) is None            # 2 / 32 > 5%: no pair covers 95%
    assert stats.median_ci_ranks(6) == (0, 5)          # 2 / 64 = 3.1%
    assert stats.median_ci_ranks(20) == (5, 14)        # the textbook 6th and 15th of 20
    lo, hi = stats.median_ci_ranks(5000)
    assert lo + hi == 4999 and 2427 <= lo <= 2431


def test_median_ci_covers_the_median_about_95_percent_of_the_time():
    rng = random.Random(3)
    covered = 0
    for _ in range(400):
        xs = [rng.expovariate(1.0) for _ in range(41)]
        lo, hi = stats.median_ci(xs)
        covered += lo <= 0.6931471805599453 <= hi
    assert 0.93 <= covered / 400 <= 0.995


def test_hodges_lehmann_ratio_finds_a_scale_change():
    rng = random.Random(1)
    a = [1e-3 * rng.lognormvariate(0, 0.05) for _ in range(200)]
    b = [1.25e-3 * rng.lognormvariate(0, 0.05) for _ in range(200)]
    est, lo, hi = hodges_lehmann_ratio(a, b)
    assert lo < 1.25 < hi and 1.23 < est < 1.27 and hi - lo < 0.05


def _side(name, scale, rounds=6, n=60, seed=0, noise=0.05):
    rng = random.Random(f"{name}{seed}")
    return Side(name, tuple(tuple(scale * rng.lognormvariate(0, noise) for _ in range(n)) for _ in range(rounds)))


def test_identical_kernels_are_never_slower_or_faster():
    seen = {compare(_side("a", 1e-3, seed=s), _side("b", 1e-3, seed=s)).verdict for s in range(30)}
    assert seen <= {Verdict.SAME, Verdict.UNSURE} and Verdict.SAME in seen


def test_a_25_percent_slower_kernel_is_slower_and_a_faster_one_faster():
    assert compare(_side("a", 1e-3), _side("b", 1.25e-3)).verdict is Verdict.SLOWER
    assert compare(_side("a", 1e-3), _side("b", 0.75e-3)).verdict is Verdict.FASTER


def test_a_slow_round_of_one_worker_is_not_a_slowdown():
    """One ref's worker slow for whole rounds (a busy core): the pooled interval alone would call it;
    the per-round interval keeps it UNSURE or SAME."""
    a = _side("a", 1e-3, noise=0.01)
    rounds = list(_side("b", 1e-3, noise=0.01).rounds)
    rounds[0] = tuple(x * 1.3 for x in rounds[0])
    rounds[3] = tuple(x * 1.3 for x in rounds[3])
    pooled = hodges_lehmann_ratio(a.samples, [x for r in rounds for x in r])
    assert pooled[1] > 1.0       # the pooled interval alone excludes 1: a false alarm in waiting
    assert compare(a, Side("b", tuple(rounds))).verdict in (Verdict.SAME, Verdict.UNSURE)


def test_orders_of_magnitude_of_spread_is_unsure_with_the_spread():
    rng = random.Random(2)
    wild = Side("b", tuple(tuple(10 ** rng.uniform(-5, -2) for _ in range(50)) for _ in range(6)))
    got = compare(_side("a", 1e-3), wild)
    assert got.verdict is Verdict.UNSURE and "spread" in got.why


def test_decide_needs_the_whole_interval_past_the_threshold():
    assert decide(1.06, 1.10, 0.05) is Verdict.SLOWER
    assert decide(1.04, 1.10, 0.05) is Verdict.UNSURE
    assert decide(0.97, 1.03, 0.05) is Verdict.SAME
    assert decide(0.80, 0.90, 0.05) is Verdict.FASTER


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.0, 2.5])
def test_threshold_outside_0_100_percent_is_refused(bad):
    with pytest.raises(ValueError, match="above 0% and below 100%"):
        check_threshold(bad)


def test_parse_percent():
    assert parse_percent("10%") == pytest.approx(0.1) and parse_percent("0.05") == 0.05
