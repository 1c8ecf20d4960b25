"""Two refs' timed samples of one case → a ratio, its 95% interval, and a verdict (docs/latency.md).

The ratio is candidate / baseline.  Its estimate is the Hodges–Lehmann shift of the
log-latencies (the median of every pairwise difference log b_j - log a_i, exponentiated):
robust to the long right tail timing has (preemption, interrupts), and a ratio because
noise on a computer scales with the time measured.  Its interval is the Mann–Whitney one
on those differences (the ranks ``mn/2 ± z·sqrt(mn(m+n+1)/12)``).

Samples taken in one round by one worker are not independent of each other: a worker that
landed on a busy core is slow for the whole round.  The pooled interval alone would take
that for a difference, so rounds (A, B, A, B...) are kept apart, and the interval reported
is the hull of the pooled one and the interval of the per-round ratios (their median's
order-statistic interval from 6 rounds on, their range below that).  Two identical
kernels therefore come out SLOWER only when every round (6+: most rounds) says so.

The verdict needs the whole interval on one side of the threshold:
SLOWER when its lower end is above 1 + t, FASTER when its upper end is below 1 / (1 + t),
SAME when it lies inside (1 / (1 + t), 1 + t), UNSURE otherwise (more rounds may decide),
and UNSURE whatever the interval when a side's samples spread over more than
``MAX_SPREAD`` (p90 / p10): a runtime that varies by orders of magnitude is not a latency.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Sequence

import numpy as np

from harness import stats

CONF = 0.95
DEFAULT_THRESHOLD = 0.05
MAX_SPREAD = 10.0           # p90 / p10 of one side beyond this: UNSURE, with the spread said
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


def round_interval(ratios: Sequence[float], conf: float = CONF) -> tuple[float, float] | None:
    """Where the per-round ratios put the ratio: their median's interval (6+ rounds), their range (2-5)."""
    if len(ratios) < 2:
        return None
    return stats.median_ci(ratios, conf) or (min(ratios), max(ratios))


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
    baseline_s: float          # medians of the pooled samples
    candidate_s: float
    ratio: float
    ci_low: float
    ci_high: float
    verdict: Verdict
    threshold: float
    rounds: int
    samples: tuple[int, int]
    why: str = ""              # what made it UNSURE, when something other than the interval did

    def to_json(self) -> dict:
        """The ``latency_verdict`` of a case and ref pair (docs/json-schema.md)."""
        return {"baseline": self.baseline, "candidate": self.candidate, "baseline_median_s": self.baseline_s,
                "candidate_median_s": self.candidate_s, "ratio": self.ratio, "ci_low": self.ci_low,
                "ci_high": self.ci_high, "verdict": self.verdict.value, "threshold": self.threshold,
                "rounds": self.rounds, "samples": list(self.samples), "why": self.why}

    @classmethod
    def from_json(cls, data: dict) -> "Comparison":
        return cls(data["baseline"], data["candidate"], data["baseline_median_s"], data["candidate_median_s"],
                   data["ratio"], data["ci_low"], data["ci_high"], Verdict(data["verdict"]), data["threshold"],
                   data["rounds"], tuple(data["samples"]), data.get("why", ""))

    def describe(self) -> str:
        """``upstream 412 µs -> fix 361 µs (0.88x, 95% CI 0.86-0.90): FASTER``."""
        text = (f"{self.baseline} {us(self.baseline_s)} -> {self.candidate} {us(self.candidate_s)} "
                f"({self.ratio:.3f}x, 95% CI {self.ci_low:.3f}-{self.ci_high:.3f}): {self.verdict.value}")
        return text + (f" ({self.why})" if self.why else "")


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


def compare(baseline: Side, candidate: Side, threshold: float = DEFAULT_THRESHOLD, conf: float = CONF) -> Comparison:
    """The verdict on ``candidate`` against ``baseline`` (module docstring)."""
    a, b = baseline.samples, candidate.samples
    ratio, lo, hi = hodges_lehmann_ratio(a, b, conf)
    paired = [stats.median(rb) / stats.median(ra) for ra, rb in zip(baseline.rounds, candidate.rounds) if ra and rb]
    by_round = round_interval(paired, conf)
    if by_round is not None:
        lo, hi = min(lo, by_round[0]), max(hi, by_round[1])
    verdict, why = decide(lo, hi, threshold), ""
    wide = [(s.name, spread(s.samples)) for s in (baseline, candidate)]
    wide = [(name, x) for name, x in wide if x > MAX_SPREAD]
    if wide:
        verdict = Verdict.UNSURE
        why = "; ".join(f"{name}'s samples spread {x:.0f}x (p90/p10)" for name, x in wide)
    elif verdict is Verdict.UNSURE:
        why = f"the 95% CI straddles {1 + threshold:.2f}x or {1 / (1 + threshold):.3f}x"
    return Comparison(baseline.name, candidate.name, stats.median(a), stats.median(b), ratio, lo, hi, verdict,
                      threshold, len(paired), (len(a), len(b)), why)
