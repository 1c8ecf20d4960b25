"""The noise a latency bisect carries between steps (docs/latency.md, "Noise carried between steps"),
on synthetic rounds: no git, no workers, no timing.

    python bench/bench_latency_seed_sim.py [--trials 400] [--seed 1] [--bisects 200]

First whole bisects (``--bisects`` of 8 commits, a 25% slowdown from commit 5, ``--slower-than``
10%, per-round noise sd 5, 10 and 15%), the real search with each step's rounds drawn, without and
with the carried noise: rounds per step and answers.  Then single steps:

Each trial draws three earlier steps of 8 rounds at the seed's sd (pooled as a bisect pools them),
then one step's per-round log-ratios (normal at the step's sd about log(truth)), and looks after
every round from the 6th to the 40th, as a compare does, once without the seed (``compare``: the
sign test) and once with it (``compare_seeded``), on the same rounds.  Printed per scenario: the
mean rounds to a verdict (40 when none) and the verdicts.  A verdict is wrong when the truth is on
the other side of the threshold: SLOWER or FASTER for identical refs, SAME or FASTER for a slowdown
past it.
"""
from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.latency.statistics import MAX_ROUNDS, MIN_ROUNDS, Side, Verdict, compare, compare_seeded, own_noise  # noqa: E402

SCENARIOS = [  # (truth, step sd, seed sd, threshold)
    (1.0, 0.05, 0.05, 0.10), (1.0, 0.10, 0.10, 0.10), (1.25, 0.05, 0.05, 0.10), (1.25, 0.10, 0.10, 0.10),
    (1.15, 0.05, 0.05, 0.10), (1.0, 0.05, 0.05, 0.05),
    (1.0, 0.10, 0.05, 0.10), (1.25, 0.10, 0.05, 0.10), (1.0, 0.095, 0.05, 0.05),    # the step ~2x its seed
    (1.0, 0.15, 0.05, 0.10), (1.25, 0.15, 0.05, 0.10),                              # 3x
]


def one(rng: random.Random, truth: float, sd: float, seed_sd: float, threshold: float):
    seed = None
    for _ in range(3):
        own = own_noise([math.exp(rng.gauss(0, seed_sd)) for _ in range(8)])
        seed = own if seed is None else (seed.pooled(own) if seed.agrees(own) else seed)
    noise = [rng.gauss(0, sd) for _ in range(MAX_ROUNDS)]
    out = []
    for seeded in (False, True):
        ratios, verdict, n = [], Verdict.UNSURE, MAX_ROUNDS
        for r in range(MAX_ROUNDS):
            ratios.append(truth * math.exp(noise[r]))
            if r + 1 < MIN_ROUNDS:
                continue
            a, b = Side("a", tuple((1.0,) for _ in ratios)), Side("b", tuple((x,) for x in ratios))
            c = compare_seeded(a, b, threshold, seed)[0] if seeded else compare(a, b, threshold)
            if c.verdict is not Verdict.UNSURE:
                verdict, n = c.verdict, r + 1
                break
        out.append((verdict, n))
    return out


def whole_bisects(trials: int, seed: int, sd: float, commits: int = 8, slow_from: int = 5, truth: float = 1.25,
                  threshold: float = 0.10) -> None:
    """The real ``latency_bisect.bisect`` with each step's rounds drawn (the same rounds for a commit
    with and without the carried noise), the seed carried as the bisect carries it: steps that stop
    early are the ones it learns from, so any bias of optional stopping is in the figures."""
    from harness.latency.statistics import NoiseSeed
    from harness.refs import latency_bisect as slow
    from harness.refs.git import Commit

    shas = [Commit(sha=f"{i:040x}", subject=f"c{i}", author_date="", author="") for i in range(commits)]
    how = slow.Measure(setup=None, cases=(), devices=("cpu",), options=None, threshold=threshold,
                       max_rounds=MAX_ROUNDS)
    rng = random.Random(seed)
    for carried in (False, True):
        answers: dict[str, int] = {}
        rounds: list[int] = []
        rng.seed(seed)
        for _ in range(trials):
            noise = {c.sha: [rng.gauss(0, sd) for _ in range(MAX_ROUNDS)] for c in shas}

            def measure(runner, store, how, good, commit, *, command, parent_id, seeds=None, noise=noise):
                t = truth if int(commit.sha, 16) >= slow_from else 1.0
                ratios = []
                for r in range(MAX_ROUNDS):
                    ratios.append(t * math.exp(noise[commit.sha][r]))
                    a, b = Side("good", tuple((1.0,) for _ in ratios)), Side("x", tuple((x,) for x in ratios))
                    seed = (seeds or {}).get("k") if carried else None
                    c, used = compare_seeded(a, b, threshold, seed)
                    if c.verdict is not Verdict.UNSURE and r + 1 >= MIN_ROUNDS:
                        break
                row = {"case_id": "k", "latency_verdict": {**c.to_json(), "noise": used}}
                return slow.step_verdict([row]), [row], ""

            slow.measure, saved = measure, slow.measure
            try:
                state = slow.bisect(None, None, how, shas[0], shas[1:], command=[])
            finally:
                slow.measure = saved
            rounds += [s.rows[0]["latency_verdict"]["rounds"] for s in state.steps]
            if state.first_slow is not None:
                answer = "right commit" if state.first_slow.sha == shas[slow_from].sha else "WRONG commit"
            elif state.candidates:
                answer = "range with it" if shas[slow_from] in state.candidates else "range WITHOUT it"
            else:
                answer = "no answer"
            answers[answer] = answers.get(answer, 0) + 1
        print(f"sd {sd:.2f}, {'with' if carried else 'without'} the carried noise: "
              f"{sum(rounds) / len(rounds):.1f} rounds a step, {sum(rounds) / trials:.1f} a bisect; "
              + ", ".join(f"{n} {a}" for a, n in sorted(answers.items())))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--bisects", type=int, default=200, help="whole bisects per noise level (0: none)")
    args = parser.parse_args()
    for sd in (0.05, 0.10, 0.15) if args.bisects else ():
        whole_bisects(args.bisects, args.seed, sd)
    print("truth  step sd  seed sd  threshold | without seed: rounds, verdicts | with seed: rounds, verdicts")
    for truth, sd, seed_sd, threshold in SCENARIOS:
        rng = random.Random(args.seed)
        tallies = [dict(), dict()]
        rounds = [0, 0]
        for _ in range(args.trials):
            for k, (v, n) in enumerate(one(rng, truth, sd, seed_sd, threshold)):
                tallies[k][v.value] = tallies[k].get(v.value, 0) + 1
                rounds[k] += n
        said = [f"{rounds[k] / args.trials:5.1f} " + " ".join(f"{v} {n}" for v, n in sorted(tallies[k].items()))
                for k in range(2)]
        print(f"{truth:5.2f}  {sd:7.3f}  {seed_sd:7.3f}  {threshold:9.2f} | {said[0]:32s} | {said[1]}")


if __name__ == "__main__":
    main()
