"""The lower bound on what a deterministic failure must cost (bench/bench_bisect_sim.py --bound,
docs/bisect.md "What a deterministic failure must cost"): the bisection paths, the errors of
searches that looked deterministic, and the bound that says the issue-39 goal of 1.5x at n = 16
cannot be met at 99% accuracy for p = 0.4 and 0.8. Pure, no simulation."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "bench_bisect_sim", Path(__file__).resolve().parents[2] / "bench" / "bench_bisect_sim.py")
sim = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(sim)


@pytest.mark.parametrize("n", [16, 39])
def test_the_bisection_path_names_every_culprit_in_about_log2_n_runs(n):
    for culprit in range(1, n + 1):
        path = sim.bisection_path(n, culprit)
        assert path[0] == (n, True)                                   # B once
        assert all(sighted == (i >= culprit) for i, sighted in path)  # p = 1: sighted exactly from the culprit
        sighted = min(i for i, s in path if s)
        clean = max((i for i, s in path if not s), default=0)
        assert sighted == culprit and clean == culprit - 1            # the path pins the culprit
        assert len(path) <= math.ceil(math.log2(n)) + 1 + (culprit == 1)


def test_lookalike_is_the_chance_an_earlier_culprit_shows_the_same_runs():
    # n = 16, culprit 9: B+, 8-, 12+, 10+, 9+. A culprit h <= 8 at rate p: 4 sightings and the miss at 8
    path = sim.bisection_path(16, 9)
    assert path == [(16, True), (8, False), (12, True), (10, True), (9, True)]
    p = 0.4
    assert sim.lookalike(path, 9, p) == pytest.approx(8 * p ** 4 * (1 - p))
    assert sim.lookalike(path, 1, p) == 0.0 and sim.lookalike(path, 9, 1.0) == 0.0


def test_one_and_a_half_times_bisection_is_out_of_reach_at_n_16():
    budgets = {0.4: 0.01, 0.8: 0.01}
    lower, runs, err = sim.deterministic_bound(16, budgets)
    known = sum(len(sim.bisection_path(16, c)) for c in range(1, 17)) / 16
    assert lower <= runs and all(err[p] <= budgets[p] for p in budgets)
    assert lower > 1.5 * known                                        # measured: 8.75 against 5.06
    # more error allowed, fewer runs needed
    looser, _, _ = sim.deterministic_bound(16, {0.4: 0.05, 0.8: 0.05})
    assert looser < lower
