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
    text = (f"{v['ratio']:.3f}x ({ci_label(level_of(v))} {v['ci_low']:.3f}-{v['ci_high']:.3f}, {v['rounds']} rounds) "
            f"{v['verdict']}")
    return text + (" (with the noise carried from earlier steps)" if (v.get("noise") or {}).get("used") else "")


# -- Noise carried between a latency bisect's steps (docs/latency.md, "Noise carried between steps") --------
#
# A bisect's steps time the same case on the same machine, each good against another commit, so the
# spread of their per-round log-ratios (each about its own step's mean: the commits differ, the noise
# does not) is one quantity.  Earlier steps' spread, pooled, seeds a step's interval: a t interval on the
# mean log-ratio whose variance pools the step's own rounds with at most ``SEED_MAX_DF`` degrees of
# freedom of the seed (its variance never under the step's own: the seed lends certainty about the
# spread, not a smaller one), used only while the step's own spread agrees with the seed's (within
# ``SEED_AGREE``); otherwise, and under ``MIN_ROUNDS`` rounds, the step is judged on its own rounds
# alone (``compare``).  ``harness/refs/latency_bisect.py`` keeps the seed from step to step.

SEED_MAX_DF = 20            # the most degrees of freedom earlier steps lend a step (t beyond ~20 df barely narrows)
SEED_AGREE = 2.0            # a step's own sd of per-round log-ratios within this factor of the seed's: they agree


@dataclass(frozen=True)
class NoiseSeed:
    """Pooled spread of per-round log-ratios: ``ss`` the sum of squares about each step's own mean,
    ``df`` its degrees of freedom (rounds less one per step), ``steps`` how many steps it pools."""

    ss: float
    df: int
    steps: int = 1

    @property
    def sd(self) -> float:
        return math.sqrt(self.ss / self.df)

    def pooled(self, other: "NoiseSeed") -> "NoiseSeed":
        return NoiseSeed(self.ss + other.ss, self.df + other.df, self.steps + other.steps)

    def capped(self) -> "NoiseSeed":
        """The weight lent to a step: at most ``SEED_MAX_DF`` df, the sd unchanged."""
        if self.df <= SEED_MAX_DF:
            return self
        return NoiseSeed(self.ss * SEED_MAX_DF / self.df, SEED_MAX_DF, self.steps)

    def agrees(self, other: "NoiseSeed") -> bool:
        """Whether ``other``'s sd is within ``SEED_AGREE`` of this one's, either way."""
        return self.sd / SEED_AGREE <= other.sd <= self.sd * SEED_AGREE

    def to_json(self) -> dict:
        return {"sd": self.sd, "ss": self.ss, "df": self.df, "steps": self.steps}

    @classmethod
    def from_json(cls, data: dict) -> "NoiseSeed":
        return cls(float(data["ss"]), int(data["df"]), int(data.get("steps", 1)))

    def text(self) -> str:
        """``sd 3.1% per round (2 steps, 10 df)``: the sd of a per-round log-ratio, read as a percentage."""
        return f"sd {100 * self.sd:.1f}% per round ({self.steps} step{'s' * (self.steps != 1)}, {self.df} df)"


def own_noise(ratios: Sequence[float]) -> NoiseSeed | None:
    """One step's spread of per-round log-ratios about its own mean; None under 2 rounds or with no spread."""
    if len(ratios) < 2:
        return None
    x = np.log(np.asarray(ratios, float))
    ss = float(((x - x.mean()) ** 2).sum())
    return NoiseSeed(ss, len(x) - 1) if ss > 0 else None


def t_quantile(conf: float, df: int) -> float:
    """The two-sided Student t quantile (2.571 at 0.95 and 5 df): the normal one corrected in powers of
    1/df (Cornish-Fisher, to the 1/df^4 term; within 1e-3 from 5 df, the fewest a step has)."""
    z, v = stats.normal_quantile(conf), float(df)
    return (z + (z ** 3 + z) / (4 * v) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * v ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * v ** 3)
            + (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / (92160 * v ** 4))


def seeded_interval(ratios: Sequence[float], seed: NoiseSeed | None,
                    conf: float = LOOK_CONF) -> tuple[tuple[float, float, float] | None, str]:
    """(estimate, low, high) of the ratio from ``ratios`` with the noise ``seed`` carried from earlier
    steps, and why not (None) when the seed does not apply: no seed, under ``MIN_ROUNDS`` rounds, or
    this step's own spread disagreeing with the seed's (a noisier step is judged on its own rounds)."""
    if seed is None:
        return None, "no earlier step's noise"
    if len(ratios) < MIN_ROUNDS:
        return None, too_few_rounds(len(ratios))
    own = own_noise(ratios)
    if own is None or not seed.agrees(own):
        said = f"sd {100 * own.sd:.1f}%" if own else "no spread"
        return None, f"this step's own noise ({said}) disagrees with the carried {seed.text()}"
    lent = seed.capped()
    x = np.log(np.asarray(ratios, float))
    df = own.df + lent.df
    var = max((own.ss + lent.ss) / df, own.ss / own.df)     # never narrower than the step's own spread
    half = t_quantile(conf, df) * math.sqrt(var / len(x))
    mean = float(x.mean())
    return (math.exp(mean), math.exp(mean - half), math.exp(mean + half)), ""


def compare_seeded(baseline: Side, candidate: Side, threshold: float = DEFAULT_THRESHOLD,
                   seed: NoiseSeed | None = None, conf: float = LOOK_CONF) -> tuple[Comparison, dict]:
    """``compare``, with the interval of ``seeded_interval`` where the seed applies (then the ratio is
    the geometric mean of the per-round ratios, the centre of that interval), and what noise was used:
    ``{own, seed, used, why}`` (``why``: why the seed was not used)."""
    plain = compare(baseline, candidate, threshold, conf)
    ratios = round_ratios(baseline, candidate)
    own = own_noise(ratios)
    noise = {"own": own.to_json() if own else None, "seed": seed.to_json() if seed else None, "used": False,
             "why": ""}
    if plain.rounds < MIN_ROUNDS or any(spread(s.samples) > MAX_SPREAD for s in (baseline, candidate)):
        noise["why"] = plain.why        # too few rounds or too wide a spread: UNSURE whatever the interval
        return plain, noise
    found, why = seeded_interval(ratios, seed, conf)
    if found is None:
        noise["why"] = why
        return plain, noise
    est, lo, hi = found
    verdict = decide(lo, hi, threshold)
    why = (f"the {ci_label(conf)} (with the carried noise) straddles {1 + threshold:.2f}x or "
           f"{1 / (1 + threshold):.3f}x" if verdict is Verdict.UNSURE else "")
    noise["used"] = True
    return Comparison(plain.baseline, plain.candidate, plain.baseline_s, plain.candidate_s, est, lo, hi, verdict,
                      threshold, plain.rounds, plain.samples, why, conf), noise
