"""Two refs' timed samples of one case → a ratio, its interval, and a verdict (docs/latency.md).

The ratio is candidate / baseline, taken round by round.  Samples taken in one round by one
worker are not independent of each other (a worker that landed beside another tenant's burst
is slow for the whole round), and rounds alternate A, B / B, A so drift falls on both sides.
So each round gives one figure per side, its **lower decile** (the minimum when a round has
under ``DECILE_MIN_SAMPLES`` samples): load spikes only ever add time, so the low end of a
round is what the kernel costs and the least moved by other tenants.  The round's ratio is
candidate figure / baseline figure of the same round; the estimate is the **median of the
per-round ratios**, and its interval the distribution-free sign-test one (binomial order
statistics, ``stats.median_ci``) at ``LOOK_CONF`` (99%), which needs ``MIN_ROUNDS`` (8) rounds.
99%, not 95%: a compare looks at the interval after every round from the 8th to the 40th and
stops at the first verdict, and a 95% interval looked at that often decides identical refs far
more often than 5% of the time (docs/latency.md, "Many looks").  Below 8 rounds the estimate
and interval are the Hodges–Lehmann shift of the pooled log-latencies and its Mann–Whitney
interval, widened to the range of the per-round ratios when there are 2 to 7.
Rounds stop at ``MAX_ROUNDS``, the one bound compare, bisect and the benchmark use.

The verdict needs the whole interval on one side of the threshold:
SLOWER when its lower end is above 1 + t, FASTER when its upper end is below 1 / (1 + t),
SAME when it lies inside (1 / (1 + t), 1 + t), UNSURE otherwise (more rounds may decide),
and UNSURE whatever the interval when a side's samples spread over more than
``MAX_SPREAD`` (p90 / p10): a runtime that varies by orders of magnitude is not a latency,
or when there are under ``MIN_ROUNDS`` rounds.

A run against a stored run (one run a side, not interleaved) is ``against_stored``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Sequence

import numpy as np

from harness import stats

CONF = 0.95                 # one run's median; a run against a stored run (one look)
LOOK_CONF = 0.99            # a compare's ratio: the interval it decides on at every look (docs/latency.md, "Many looks")
DEFAULT_THRESHOLD = 0.05
MAX_SPREAD = 10.0           # p90 / p10 of one side beyond this: UNSURE, with the spread said
MIN_ROUNDS = 8              # the fewest per-round ratios whose median has a 99% sign-test interval (2 / 2^8 = 0.8%)
MAX_ROUNDS = 40             # a latency compare or bisect step: at most this many rounds (the default)
DECILE_MIN_SAMPLES = 21     # fewer samples in a round: its figure is the minimum, not the lower decile
QUIET_SPREAD = 2.0          # run against a stored run: a side spread wider (p90 / p10) ran on a loaded machine
_MAX_PAIRS_SIDE = 2000      # more samples than this per side: thinned to evenly spaced order statistics


class Verdict(Enum):
    FASTER = "FASTER"
    SLOWER = "SLOWER"
    SAME = "SAME"
    UNSURE = "UNSURE"


def check_threshold(value: float, flag: str = "--latency-threshold") -> float:
    """A relative threshold in (0, 1); else a usage error's text (``ValueError``)."""
    if not (0.0 < value < 1.0) or math.isnan(value):
        raise ValueError(f"{flag}: must be above 0% and below 100%, got {value * 100:g}%")
    return value


def parse_percent(text: str) -> float:
    """``5%`` or ``0.05`` → 0.05."""
    text = text.strip()
    return float(text[:-1]) / 100.0 if text.endswith("%") else float(text)


def _thin(xs: np.ndarray) -> np.ndarray:
    xs = np.sort(xs)
    if len(xs) <= _MAX_PAIRS_SIDE:
        return xs
    return xs[np.linspace(0, len(xs) - 1, _MAX_PAIRS_SIDE).round().astype(int)]


def hodges_lehmann_ratio(a: Sequence[float], b: Sequence[float], conf: float = CONF) -> tuple[float, float, float]:
    """(estimate, low, high) of b / a: the Hodges–Lehmann shift of the logs and its Mann–Whitney interval."""
    la, lb = np.log(_thin(np.asarray(a, float))), np.log(_thin(np.asarray(b, float)))
    m, n = len(la), len(lb)
    if m == 0 or n == 0:
        raise ValueError("both sides need samples")
    diffs = np.sort((lb[None, :] - la[:, None]).ravel())
    mn = m * n
    est = float(np.median(diffs))
    k = int(math.floor(mn / 2 - stats.normal_quantile(conf) * math.sqrt(mn * (m + n + 1) / 12.0)))
    k = min(max(k, 0), mn - 1)
    return math.exp(est), math.exp(diffs[k]), math.exp(diffs[mn - 1 - k])


def spread(samples: Sequence[float]) -> float:
    """p90 / p10 of one side's samples."""
    lo, hi = np.quantile(np.asarray(samples, float), [0.1, 0.9])
    return float(hi / lo) if lo > 0 else math.inf


def round_figure(samples: Sequence[float]) -> float:
    """One side's figure for one round: the lower decile of its samples, the minimum below
    ``DECILE_MIN_SAMPLES`` (noise on a shared machine only adds time)."""
    xs = np.asarray(samples, float)
    if len(xs) == 0:
        raise ValueError("a round needs samples")
    return float(xs.min()) if len(xs) < DECILE_MIN_SAMPLES else float(np.quantile(xs, 0.1))


def round_ratios(baseline: "Side", candidate: "Side") -> list[float]:
    """candidate figure / baseline figure, round by round (rounds where both have samples)."""
    return [round_figure(rb) / round_figure(ra) for ra, rb in zip(baseline.rounds, candidate.rounds) if ra and rb]


def ratio_interval(baseline: "Side", candidate: "Side", conf: float = LOOK_CONF) -> tuple[float, float, float, int]:
    """(estimate, low, high, rounds) of candidate / baseline (module docstring)."""
    ratios = round_ratios(baseline, candidate)
    ci = stats.median_ci(ratios, conf)
    if ci is not None:
        return stats.median(ratios), ci[0], ci[1], len(ratios)
    est, lo, hi = hodges_lehmann_ratio(baseline.samples, candidate.samples, conf)
    if len(ratios) >= 2:
        lo, hi = min(lo, *ratios), max(hi, *ratios)
    return est, lo, hi, len(ratios)


@dataclass(frozen=True)
class Side:
    """One ref's samples of one case, round by round."""

    name: str
    rounds: tuple[tuple[float, ...], ...]

    @property
    def samples(self) -> list[float]:
        return [s for r in self.rounds for s in r]

    @property
    def median_s(self) -> float:
        return stats.median(self.samples)


@dataclass(frozen=True)
class Comparison:
    """The candidate against the baseline on one case."""

    baseline: str
    candidate: str
    baseline_s: float          # medians of the pooled samples (what a user reads; the ratio is per round)
    candidate_s: float
    ratio: float
    ci_low: float
    ci_high: float
    verdict: Verdict
    threshold: float
    rounds: int
    samples: tuple[int, int]
    why: str = ""              # what made it UNSURE, when something other than the interval did
    conf: float = CONF         # the level of [ci_low, ci_high]: LOOK_CONF for a compare, CONF against a stored run

    def to_json(self) -> dict:
        """The ``latency_verdict`` of a case and ref pair (docs/json-schema.md)."""
        return {"baseline": self.baseline, "candidate": self.candidate, "baseline_median_s": self.baseline_s,
                "candidate_median_s": self.candidate_s, "ratio": self.ratio, "ci_low": self.ci_low,
                "ci_high": self.ci_high, "verdict": self.verdict.value, "threshold": self.threshold,
                "rounds": self.rounds, "samples": list(self.samples), "why": self.why, "conf": self.conf}

    @classmethod
    def from_json(cls, data: dict) -> "Comparison":
        return cls(data["baseline"], data["candidate"], data["baseline_median_s"], data["candidate_median_s"],
                   data["ratio"], data["ci_low"], data["ci_high"], Verdict(data["verdict"]), data["threshold"],
                   data["rounds"], tuple(data["samples"]), data.get("why", ""), data.get("conf", CONF))

    def describe(self) -> str:
        """``upstream 412 µs -> fix 361 µs (0.88x, 99% CI 0.86-0.90): FASTER``."""
        text = (f"{self.baseline} {us(self.baseline_s)} -> {self.candidate} {us(self.candidate_s)} "
                f"({self.ratio:.3f}x, {ci_label(self.conf)} {self.ci_low:.3f}-{self.ci_high:.3f}): {self.verdict.value}")
        return text + (f" ({self.why})" if self.why else "")


def ci_label(conf: float) -> str:
    """``99% CI``: what an interval of level ``conf`` is called in every text."""
    return f"{100 * conf:g}% CI"


def level_of(verdict: dict) -> float:
    """The level of a stored ``latency_verdict``'s interval (one stored before it was recorded: 95%)."""
    return verdict.get("conf", CONF)


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs" if seconds < 1e-1 else f"{seconds * 1e3:,.1f} ms"


def decide(lo: float, hi: float, threshold: float) -> Verdict:
    up, down = 1.0 + threshold, 1.0 / (1.0 + threshold)
    if lo > up:
        return Verdict.SLOWER
    if hi < down:
        return Verdict.FASTER
    if down < lo and hi < up:
        return Verdict.SAME
    return Verdict.UNSURE


def rounds_floor(asked: int, flag: str) -> tuple[int, str | None]:
    """The most rounds a latency compare may run when ``flag`` asked for ``asked``: never under
    ``MIN_ROUNDS`` (fewer rounds give no 99% interval on the ratio), and the line that says so."""
    if asked >= MIN_ROUNDS:
        return asked, None
    return MIN_ROUNDS, (f"latency: {flag} {asked} is under the {MIN_ROUNDS} rounds a latency verdict needs "
                        f"(docs/latency.md): running up to {MIN_ROUNDS} rounds")


def too_few_rounds(rounds: int) -> str:
    """Why a compare of ``rounds`` < ``MIN_ROUNDS`` rounds is UNSURE whatever its interval."""
    return (f"{rounds} round{'s' * (rounds != 1)}: a verdict needs at least {MIN_ROUNDS} "
            f"(one worker's slow phase can fill fewer)")


def compare(baseline: Side, candidate: Side, threshold: float = DEFAULT_THRESHOLD,
            conf: float = LOOK_CONF) -> Comparison:
    """The verdict on ``candidate`` against ``baseline`` (module docstring); UNSURE under
    ``MIN_ROUNDS`` rounds, whatever the interval (the interval is still given).  ``conf``: the
    level of the interval, the one a compare may look at after every round (``LOOK_CONF``)."""
    a, b = baseline.samples, candidate.samples
    ratio, lo, hi, rounds = ratio_interval(baseline, candidate, conf)
    verdict, why = decide(lo, hi, threshold), ""
    wide = [(s.name, spread(s.samples)) for s in (baseline, candidate)]
    wide = [(name, x) for name, x in wide if x > MAX_SPREAD]
    if wide:
        verdict = Verdict.UNSURE
        why = "; ".join(f"{name}'s samples spread {x:.0f}x (p90/p10)" for name, x in wide)
    elif rounds < MIN_ROUNDS:
        verdict, why = Verdict.UNSURE, too_few_rounds(rounds)
    elif verdict is Verdict.UNSURE:
        why = f"the {ci_label(conf)} straddles {1 + threshold:.2f}x or {1 / (1 + threshold):.3f}x"
    return Comparison(baseline.name, candidate.name, stats.median(a), stats.median(b), ratio, lo, hi, verdict,
                      threshold, rounds, (len(a), len(b)), why, conf)


def against_stored(baseline: Side, candidate: Side, threshold: float = DEFAULT_THRESHOLD,
                   conf: float = CONF) -> Comparison:
    """This run's samples of a case against a stored run's (``run --latency-baseline``): one run a
    side, not interleaved, so no rounds to pair.  The ratio is the quotient of the two runs' medians
    (what each run printed), its interval the quotient of the two medians' own distribution-free
    intervals, each at ``sqrt(conf)`` so that both hold together with ``conf``: low = this run's
    low / the baseline's high, high = this run's high / the baseline's low.  Each run's own noise
    is in the interval, so a clear change is decided however noisy the runs were, and a change
    within their noise is UNSURE with the two noises said.  A shift of the machine between the two
    runs is not in it (docs/latency.md: ``compare --latency`` is the fair test)."""
    a, b = baseline.samples, candidate.samples
    each = math.sqrt(conf)
    cis = {s.name: stats.median_ci(s.samples, each) for s in (baseline, candidate)}
    ma, mb = stats.median(a), stats.median(b)
    few = [f"{s.name} has {len(s.samples)} sample{'s' * (len(s.samples) != 1)}, too few for an interval on its median"
           for s in (baseline, candidate) if cis[s.name] is None]
    if few:
        return Comparison(baseline.name, candidate.name, ma, mb, mb / ma, 0.0, math.inf, Verdict.UNSURE, threshold,
                          1, (len(a), len(b)), "; ".join(few), conf)
    (alo, ahi), (blo, bhi) = cis[baseline.name], cis[candidate.name]
    lo, hi = blo / ahi, bhi / alo
    verdict, why = decide(lo, hi, threshold), ""
    loaded = [(s.name, spread(s.samples)) for s in (baseline, candidate)]
    loaded = [(name, x) for name, x in loaded if x > QUIET_SPREAD]
    if loaded:
        verdict = Verdict.UNSURE
        why = ("; ".join(f"{name}'s samples spread {x:.2f}x (p90/p10)" for name, x in loaded)
               + f": over {QUIET_SPREAD}x, a run's median measures the machine's load as much as the kernel, and "
               "the two runs were not interleaved; compare --latency can decide")
    elif verdict is Verdict.UNSURE:
        noise = ", ".join(f"{name}'s median ±{100 * (h - l) / 2 / m:.1f}%"
                          for name, (l, h), m in ((baseline.name, (alo, ahi), ma), (candidate.name, (blo, bhi), mb)))
        why = (f"the two runs' own noise ({noise}) leaves the CI across {1 + threshold:.2f}x or "
               f"{1 / (1 + threshold):.3f}x; compare --latency interleaves the two and can decide")
    return Comparison(baseline.name, candidate.name, ma, mb, mb / ma, lo, hi, verdict, threshold, 1,
                      (len(a), len(b)), why, conf)


def ratio_text(v: dict) -> str:
    """``1.670x (99% CI 1.366-1.777, 8 rounds) SLOWER`` of one latency verdict (or its error)."""
    if "error" in v:
        return v["error"]
    return (f"{v['ratio']:.3f}x ({ci_label(level_of(v))} {v['ci_low']:.3f}-{v['ci_high']:.3f}, {v['rounds']} rounds) "
            f"{v['verdict']}")
