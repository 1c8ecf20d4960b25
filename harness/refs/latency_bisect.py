"""``harness bisect --slower-than PCT`` and ``bisect-run --slower-than``: the first commit whose kernel is
slower than the good commit's by more than PCT (docs/latency.md).

Each step is a latency compare (``harness.refs.compare``) of the good commit against the step's
commit, in rounds until the verdict is decided (``MIN_ROUNDS``, then more while UNSURE, up to
``max_rounds``), every ref's workers new in every round (``RefRunner.new_round``), so a
worker's own speed is round noise, not a bias every round shares.  A step is *slow* when a case is SLOWER, *not slow*
when every case is SAME or FASTER, and *unsure* otherwise (UNSURE after every round, a failing
case, a build error): an unsure commit is skipped as ``git bisect skip`` would, never guessed,
and when skips leave several candidates the answer is the range, not a pick.

The steps time the same cases on the same machine, so the noise one step measured (the spread of
its per-round log-ratios, per case) is carried to the next as a seed (``statistics.NoiseSeed``,
pooled over the steps whose noise agreed): a step whose own noise agrees with it is judged on an
interval that pools both (``statistics.compare_seeded``) and can decide in fewer rounds; one whose
noise disagrees is judged on its own rounds, and is not pooled (docs/latency.md, "Noise carried
between steps").
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Callable

from harness.case import Case
from harness.refs import compare as refcompare
from harness.refs.git import Commit
from harness.refs.runner import RefRunner, RefSetup
from harness.latency.statistics import MIN_ROUNDS, NoiseSeed, ratio_text
from harness.run.options import ResumeOptions
from harness.store import Store


class StepVerdict(Enum):
    SLOW = "slow"
    NOT_SLOW = "not slow"
    UNSURE = "unsure"


@dataclass(frozen=True)
class Step:
    index: int                      # in the commits after good (0-based)
    commit: Commit
    verdict: StepVerdict
    rows: tuple[dict, ...]          # the compare's latency rows (docs/json-schema.md, ``latency``)
    compare_id: str

    def line(self, n: int) -> str:
        """``step 2: 1f9c477 (5/8) slow: lpkg-decode 1.33x (99% CI 1.27-1.42, 9 rounds) SLOWER``."""
        parts = []
        for row in self.rows:
            v = row["latency_verdict"]
            parts.append(f"{row['case_id']} {ratio_text(v)}")
        return f"{self.commit.short} ({self.index + 1}/{n}) {self.verdict.value}: " + "; ".join(parts)


@dataclass
class SlowBisect:
    good: Commit
    commits: list[Commit]           # (good, bad], oldest first
    threshold: float
    steps: list[Step] = field(default_factory=list)
    first_slow: Commit | None = None
    candidates: list[Commit] = field(default_factory=list)   # more than one: skips left a range
    why: str = ""                   # no answer: why (the bad commit is not slower, or unsure)
    noise: dict[str, NoiseSeed] = field(default_factory=dict)       # per case: the noise carried to the next step
    disagreed: dict[str, int] = field(default_factory=dict)         # per case: steps whose noise was not pooled

    def carry(self, rows) -> None:
        """Pool a finished step's own noise (per case) into the seed when it agrees with it (or there is
        none yet), from ``MIN_ROUNDS`` rounds on; a step whose noise disagrees is left out and counted."""
        for row in rows:
            own = (row["latency_verdict"].get("noise") or {}).get("own")
            if not own:
                continue
            own, case = NoiseSeed.from_json(own), row["case_id"]
            if own.df + 1 < MIN_ROUNDS:
                continue
            seed = self.noise.get(case)
            if seed is None or seed.agrees(own):
                self.noise[case] = own if seed is None else seed.pooled(own)
            else:
                self.disagreed[case] = self.disagreed.get(case, 0) + 1

    def noise_lines(self) -> list[str]:
        """``noise carried between steps: lpkg-decode sd 3.1% per round (3 steps, 15 df)``, per case."""
        return [f"noise carried between steps: {case} {seed.text()}"
                + (f"; {n} step{'s' * (n != 1)} whose own noise disagreed, not pooled" if (n := self.disagreed.get(case))
                   else "")
                for case, seed in self.noise.items()]

    def culprit_rows(self) -> tuple[dict, ...]:
        """The latency rows that made the first slow commit slow (its step against good); () when none."""
        return next((s.rows for s in self.steps if self.first_slow is not None and s.commit.sha == self.first_slow.sha),
                    ())

    def to_json(self) -> dict:
        c = self.first_slow
        return {"good": self.good.sha, "threshold": self.threshold,
                "first_slow": c.sha if c else None,
                "culprit": {"sha": c.sha, "subject": c.subject, "author": c.author, "author_date": c.author_date,
                            "latency": list(self.culprit_rows())} if c else None,
                "candidates": [c.sha for c in self.candidates], "why": self.why,
                "noise": {case: {**seed.to_json(), "disagreed": self.disagreed.get(case, 0)}
                          for case, seed in self.noise.items()},
                "steps": [{"sha": s.commit.sha, "verdict": s.verdict.value, "compare": s.compare_id,
                           "latency": list(s.rows)} for s in self.steps]}


def step_verdict(rows: list[dict]) -> StepVerdict:
    verdicts = [row["latency_verdict"].get("verdict") for row in rows]
    if "SLOWER" in verdicts:
        return StepVerdict.SLOW
    if verdicts and all(v in ("SAME", "FASTER") for v in verdicts):
        return StepVerdict.NOT_SLOW
    return StepVerdict.UNSURE


@dataclass(frozen=True)
class Measure:
    """How each step is measured: the compare plan's fixed parts."""

    setup: RefSetup
    cases: tuple[Case, ...]
    devices: tuple[str, ...]
    options: ResumeOptions
    threshold: float
    max_rounds: int


def measure(runner: RefRunner, store: Store, how: Measure, good: Commit, commit: Commit, *,
            command: list[str], parent_id: str | None,
            seeds: dict[str, NoiseSeed] | None = None) -> tuple[StepVerdict, list[dict], str]:
    """One step: good against ``commit`` in rounds until decided; (verdict, latency rows, compare id).
    ``seeds`` (a bisect's step: per case, the noise of earlier steps, possibly none yet) judges it with
    that noise (``statistics.compare_seeded``), stored in the compare's plan so its report agrees."""
    named = [("good", good), (commit.short, commit)]
    latency = {"threshold": how.threshold}
    if seeds is not None:
        latency["seeds"] = {case: seed.to_json() for case, seed in seeds.items()}
    plan = refcompare.ComparePlan(setup=how.setup, refs=tuple((n, c.sha) for n, c in named), cases=how.cases,
                                  repeat=how.max_rounds, devices=how.devices, options=how.options,
                                  latency=latency)
    compare_id = refcompare.start(store, plan, named, command=command, parent_id=parent_id)
    done = refcompare.run_compare(runner, store, plan, named, refcompare.compared(store, compare_id, plan),
                                  command=command)
    rows = done.latency_rows or []
    return step_verdict(rows), rows, compare_id


def bisect(runner: RefRunner, store: Store, how: Measure, good: Commit, commits: list[Commit], *,
           command: list[str], parent_id: str | None = None,
           on_step: Callable[[Step, int], None] | None = None) -> SlowBisect:
    """The first slow commit of ``commits`` (module docstring)."""
    state = SlowBisect(good, commits, how.threshold)
    n = len(commits)

    def run(i: int) -> StepVerdict:
        verdict, rows, cid = measure(runner, store, how, good, commits[i], command=command, parent_id=parent_id,
                                     seeds=dict(state.noise))
        step = Step(i, commits[i], verdict, tuple(rows), cid)
        state.steps.append(step)
        state.carry(rows)
        if on_step:
            on_step(step, n)
        return verdict

    if not commits:
        state.why = "no commits between good and bad"
        return state
    first = run(n - 1)
    if first is not StepVerdict.SLOW:
        state.why = (f"the bad commit {commits[-1].short} is not slower than good by more than "
                     f"{100 * how.threshold:g}%" if first is StepVerdict.NOT_SLOW else
                     f"the bad commit {commits[-1].short} could not be told slower or not (UNSURE)")
        return state
    lo, hi, skipped = -1, n - 1, set()       # lo: the last known not slow (-1: good), hi: the first known slow
    while True:
        open_ = [i for i in range(lo + 1, hi) if i not in skipped]
        if not open_:
            break
        mid = open_[len(open_) // 2]
        verdict = run(mid)
        if verdict is StepVerdict.SLOW:
            hi = mid
        elif verdict is StepVerdict.NOT_SLOW:
            lo = mid
        else:
            skipped.add(mid)
    state.candidates = [commits[i] for i in range(lo + 1, hi + 1)]
    if len(state.candidates) == 1:
        state.first_slow = commits[hi]
    else:
        state.why = "unsure commits were skipped; the first slow commit is one of these"
    return state


def conclusion_lines(state: SlowBisect) -> list[str]:
    """git's wording: ``<sha> is the first bad commit`` and the commit, or the range skips left;
    a first slow commit is followed by its ratios against good, the figures that convicted it."""
    if state.first_slow is not None:
        c = state.first_slow
        return [f"{c.sha} is the first bad commit", f"commit {c.sha}", f"Author: {c.author}",
                f"Date:   {c.author_date}", "", f"    {c.subject}", "",
                *(f"{row['case_id']}: {ratio_text(row['latency_verdict'])} against good {state.good.short}"
                  for row in state.culprit_rows()), *state.noise_lines()]
    if state.candidates:
        return ["There are only 'skip'ped commits left to test.", "The first bad commit could be any of:",
                *(c.sha for c in state.candidates), "We cannot bisect more!", *state.noise_lines()]
    return [f"no first slow commit: {state.why}", *state.noise_lines()]
