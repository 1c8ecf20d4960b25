"""The noise a latency bisect carries from step to step (docs/latency.md, "Noise carried between steps"):
deterministic, on synthetic per-round ratios (one sample per side and round, so a round's ratio is the
candidate's sample)."""
from __future__ import annotations

import math
import random

import pytest

from harness.latency.across import latency_rows
from harness.latency.statistics import (LOOK_CONF, MIN_ROUNDS, SEED_MAX_DF, NoiseSeed, Side, Verdict, compare,
                                        compare_seeded, own_noise, ratio_text, seeded_interval, t_quantile)
from harness.refs import latency_bisect as slow
from harness.refs.git import Commit


def _sides(ratios):
    return Side("good", tuple((1.0,) for _ in ratios)), Side("step", tuple((r,) for r in ratios))


def _rounds_to_decide(ratios, threshold, seed):
    """(verdict, rounds) of a step looked at after each round from MIN_ROUNDS, as a compare does."""
    for n in range(MIN_ROUNDS, len(ratios) + 1):
        c = compare_seeded(*_sides(ratios[:n]), threshold, seed)[0] if seed else compare(*_sides(ratios[:n]), threshold)
        if c.verdict is not Verdict.UNSURE:
            return c.verdict, n
    return Verdict.UNSURE, len(ratios)


def _seed(sd, steps=3, rounds=8, rng_seed=7):
    rng = random.Random(rng_seed)
    seed = None
    for _ in range(steps):
        own = own_noise([math.exp(rng.gauss(0, sd)) for _ in range(rounds)])
        seed = own if seed is None else seed.pooled(own)
    return seed


# a 25% slowdown whose per-round log-ratios spread by about 10%: the 6th round's lowest ratio is under
# 1.1 (the sign test's interval at 6 rounds is [min, max]), so the step alone needs more rounds
NOISE = [0.12, -0.14, 0.05, -0.02, 0.09, -0.10, 0.03, -0.12, 0.08, -0.13, 0.06, -0.04, 0.1, -0.11, 0.02, -0.09,
         0.07, -0.06, 0.11, -0.12, 0.04, -0.03, 0.09, -0.1]
SLOWED = [1.25 * math.exp(e) for e in NOISE]


def test_t_quantile_is_students():
    for df, t in ((5, 2.5706), (10, 2.2281), (25, 2.0595), (45, 2.0141)):
        assert t_quantile(0.95, df) == pytest.approx(t, abs=1e-3)


def test_a_seeded_step_decides_in_fewer_rounds_than_an_unseeded_one_on_the_same_rounds():
    plain = _rounds_to_decide(SLOWED, 0.10, None)
    seeded = _rounds_to_decide(SLOWED, 0.10, _seed(0.10))
    assert plain[0] is Verdict.SLOWER and seeded[0] is Verdict.SLOWER
    assert seeded[1] == MIN_ROUNDS < plain[1]
    judged, noise = compare_seeded(*_sides(SLOWED[:MIN_ROUNDS]), 0.10, _seed(0.10))
    assert noise["used"] and noise["seed"]["steps"] == 3 and "carried" in ratio_text({**judged.to_json(),
                                                                                       "noise": noise})


def test_never_under_the_minimum_rounds_whatever_the_seed():
    tight = NoiseSeed(ss=1e-4 * 200, df=200, steps=20)         # sd 1%, many steps
    for n in range(2, MIN_ROUNDS):
        c, noise = compare_seeded(*_sides([1.5] * (n - 1) + [1.51]), 0.10, tight)
        assert c.verdict is Verdict.UNSURE and not noise["used"], n


def test_a_step_noisier_than_its_seed_is_judged_on_its_own_rounds():
    narrow = NoiseSeed(ss=0.02 ** 2 * 20, df=20, steps=3)      # earlier steps: sd 2% per round
    rng = random.Random(3)
    ratios = [1.12 * math.exp(rng.gauss(0, 0.12)) for _ in range(MIN_ROUNDS)]    # this one: sd ~12%
    found, why = seeded_interval(ratios, narrow)
    assert found is None and "disagrees" in why
    judged, noise = compare_seeded(*_sides(ratios), 0.05, narrow)
    assert not noise["used"] and "disagrees" in noise["why"]
    assert judged == compare(*_sides(ratios), 0.05)             # exactly the unseeded verdict
    assert judged.verdict is Verdict.UNSURE
    # what the seed's narrowness alone would have said: decided (the interval the rule refuses)
    mean = sum(math.log(r) for r in ratios) / len(ratios)
    assert math.exp(mean - t_quantile(0.95, 25) * 0.02 / math.sqrt(MIN_ROUNDS)) > 1.05


def test_a_seeded_interval_is_never_narrower_than_the_steps_own_spread():
    seed = NoiseSeed(ss=0.06 ** 2 * 20, df=20)                  # sd 6%; the step's own about 10%: they agree
    ratios = SLOWED[:MIN_ROUNDS]
    own = own_noise(ratios)
    assert seed.agrees(own) and own.sd > seed.sd
    (est, lo, hi), _ = seeded_interval(ratios, seed)
    half = t_quantile(LOOK_CONF, own.df + seed.df) * own.sd / math.sqrt(len(ratios))
    assert math.log(hi / est) == pytest.approx(half)
    assert math.log(est) == pytest.approx(sum(math.log(r) for r in ratios) / len(ratios))


def test_the_seed_lends_at_most_its_capped_degrees_of_freedom():
    big = NoiseSeed(ss=0.05 ** 2 * 400, df=400, steps=50)
    assert big.capped().df == SEED_MAX_DF and big.capped().sd == pytest.approx(big.sd)


def _commits(n):
    return [Commit(sha=f"{i:02d}" + "b" * 38, subject=f"c{i}", author_date="2026-12-05T00:00:00+00:00",
                   author="Dev <d@x>") for i in range(n)]


def _row(ratios, seed_json=None, case="lpkg-decode"):
    seed = NoiseSeed.from_json(seed_json) if seed_json else None
    judged, noise = compare_seeded(*_sides(ratios), 0.10, seed)
    return {"case_id": case, "baseline": "good", "candidate": "x", "latency_verdict": {**judged.to_json(),
                                                                                      "noise": noise}}


def test_a_bisect_carries_each_steps_noise_to_the_next_and_says_what_it_carried(monkeypatch):
    commits = _commits(9)
    rng = random.Random(11)
    seen = []

    def measure(runner, store, how, good, commit, *, command, parent_id, seeds=None):
        seen.append({case: seed.steps for case, seed in (seeds or {}).items()})
        truth = 1.25 if int(commit.sha[:2]) >= 5 else 1.0
        rows = [_row([truth * math.exp(rng.gauss(0, 0.05)) for _ in range(8)],
                     seeds["lpkg-decode"].to_json() if seeds.get("lpkg-decode") else None)]
        return slow.step_verdict(rows), rows, f"c{len(seen)}"

    monkeypatch.setattr(slow, "measure", measure)
    how = slow.Measure(setup=None, cases=(), devices=("cpu",), options=None, threshold=0.10, max_rounds=40)
    state = slow.bisect(None, None, how, commits[0], commits[1:], command=["harness"])
    assert state.first_slow == commits[5]
    assert seen[0] == {} and seen[1] == {"lpkg-decode": 1} and seen[2] == {"lpkg-decode": 2}
    assert state.noise["lpkg-decode"].steps == len(state.steps)
    lines = slow.conclusion_lines(state)
    assert any(line.startswith(f"noise carried between steps: lpkg-decode sd ") and f"({len(state.steps)} steps, "
               in line for line in lines), lines
    assert state.to_json()["noise"]["lpkg-decode"]["steps"] == len(state.steps)
    assert "carried" in ratio_text(state.steps[-1].rows[0]["latency_verdict"])


def test_a_step_whose_noise_disagrees_is_not_pooled():
    state = slow.SlowBisect(_commits(1)[0], _commits(3)[1:], 0.10)
    quiet = [1.0, 1.02, 0.98, 1.01, 0.99, 1.0, 1.01, 0.99]          # MIN_ROUNDS rounds each
    state.carry([_row(quiet)])
    first = state.noise["lpkg-decode"]
    state.carry([_row([1.0, 1.3, 0.75, 1.2, 0.8, 1.1, 0.9, 1.25])])        # a burst: much noisier
    assert state.noise["lpkg-decode"] == first and state.disagreed == {"lpkg-decode": 1}
    assert "1 step whose own noise disagreed, not pooled" in state.noise_lines()[0]
    state.carry([_row([1.01, 0.99, 1.02, 0.98, 1.0, 1.0, 0.99, 1.01])])
    assert state.noise["lpkg-decode"].steps == 2


def test_latency_rows_judge_with_seeds_only_when_given():
    from harness.outcomes import Outcome, Result
    results = []
    for rnd, r in enumerate(SLOWED[:MIN_ROUNDS]):
        for ref, x in (("good", 1e-3), ("step", r * 1e-3)):
            results.append(Result(case_id="k", outcome=Outcome.PASS, repeat=rnd, ref=ref,
                                  metrics={"latency": {"measured": True, "samples_s": [x]}}))
    plain = latency_rows(results, ["good", "step"], 0.10)[0]["latency_verdict"]
    assert "noise" not in plain and plain["verdict"] == "UNSURE"
    first = latency_rows(results, ["good", "step"], 0.10, {})[0]["latency_verdict"]
    assert first["verdict"] == "UNSURE" and first["noise"]["own"]["df"] == MIN_ROUNDS - 1 and not first["noise"]["used"]
    seeded = latency_rows(results, ["good", "step"], 0.10, {"k": _seed(0.10).to_json()})[0]["latency_verdict"]
    assert seeded["verdict"] == "SLOWER" and seeded["noise"]["used"]


def test_a_stored_step_compare_reports_the_verdict_the_bisect_used():
    """The seed is stored in the step compare's plan: ``harness report`` of the step rebuilds the
    seeded verdict, not the sign test's."""
    from harness.outcomes import Outcome, Result
    from harness.reports.history import stored_document
    from harness.store import MemoryStore
    store = MemoryStore()
    seeds = {"k": _seed(0.10).to_json()}
    parent = store.start_run(command=["t"], devices=["cpu"], kind="compare",
                             extra={"refs": [{"name": "good"}, {"name": "step"}],
                                    "plan": {"latency": {"threshold": 0.10, "seeds": seeds}}})
    for ref, scale in (("good", None), ("step", 1)):
        child = store.start_run(command=["t"], devices=["cpu"], kind="compare-ref", parent_id=parent, ref=ref,
                                extra={"ref": {"name": ref}})
        for rnd, r in enumerate(SLOWED[:MIN_ROUNDS]):
            x = 1e-3 if scale is None else r * 1e-3
            store.add_result(child, Result(case_id="k", outcome=Outcome.PASS, repeat=rnd, ref=ref,
                                           metrics={"latency": {"measured": True, "samples_s": [x]}}))
    (row,) = stored_document(store, parent)["latency"]
    assert row["latency_verdict"]["verdict"] == "SLOWER" and row["latency_verdict"]["noise"]["used"]
