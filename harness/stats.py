"""Binomial statistics: intervals on a failure rate, a two-rate test, the interval on a median.

Pure Python (``math`` only), exact where it matters:

- ``wilson``: the Wilson score interval (good coverage, never outside [0, 1]).
- ``clopper_pearson``: the exact interval, by inverting the binomial tail
  probabilities (bisection on the exact binomial CDF), conservative by
  construction: it covers the true rate at least ``conf`` of the time.
- ``zero_failure_bound``: the one-sided exact upper bound after ``n`` clean runs,
  ``1 - (1 - conf) ** (1 / n)`` ("0 failures in 20 runs: rate <= 14% at 95%").
- ``runs_needed``: clean runs needed for that bound to reach a rate.
- ``fisher_exact``: the two-sided Fisher exact test of two failure rates (the
  sum of the hypergeometric probabilities no larger than the observed one).
- ``fisher_power`` / ``runs_to_decide``: that test's exact power at given true rates, and the
  runs per side it needs to reach 80% (what would decide a "flaky" compare).
- ``median_ci``: the distribution-free interval on a median from its order statistics
  (the sign test's binomial), for timed samples; the device worker uses it to stop sampling.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

Z_95 = 1.959963984540054


def _z(conf: float) -> float:
    """The two-sided normal quantile for ``conf`` (inverse erf by Newton; 1.96 at 0.95)."""
    _check_conf(conf)
    target = conf  # erf(z / sqrt 2) = conf
    z = Z_95
    for _ in range(60):
        f = math.erf(z / math.sqrt(2.0)) - target
        if abs(f) < 1e-15:
            break
        z -= f / (math.sqrt(2.0 / math.pi) * math.exp(-z * z / 2.0))
    return z


def _check_conf(conf: float) -> None:
    if not 0.0 < conf < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {conf!r}")


def _check_counts(k: int, n: int) -> None:
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= failures <= runs, got {k} of {n}")


def wilson(k: int, n: int, conf: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for ``k`` failures in ``n`` runs; (0, 1) when ``n == 0``."""
    _check_counts(k, n)
    if n == 0:
        return 0.0, 1.0
    z = _z(conf)
    phat = k / n
    denom = 1.0 + z * z / n
    centre = (phat + z * z / (2 * n)) / denom
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / denom
    lo, hi = max(0.0, centre - half), min(1.0, centre + half)
    # exact at the edges (floating point leaves 1e-17 crumbs)
    return (0.0 if k == 0 else lo), (1.0 if k == n else hi)


def _log_pmf(k: int, n: int, p: float) -> float:
    if p <= 0.0:
        return 0.0 if k == 0 else -math.inf
    if p >= 1.0:
        return 0.0 if k == n else -math.inf
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
            + k * math.log(p) + (n - k) * math.log1p(-p))


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed exactly in log space."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    terms = [_log_pmf(i, n, p) for i in range(k + 1)]
    top = max(terms)
    if top == -math.inf:
        return 0.0
    return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms))


def _bisect(f, lo: float, hi: float) -> float:
    """The root of a function decreasing in p on [lo, hi] (f(lo) >= 0 >= f(hi))."""
    for _ in range(200):
        mid = (lo + hi) / 2
        if f(mid) > 0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2


def clopper_pearson(k: int, n: int, conf: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper–Pearson) interval for ``k`` failures in ``n`` runs."""
    _check_counts(k, n)
    _check_conf(conf)
    if n == 0:
        return 0.0, 1.0
    alpha = 1.0 - conf
    # lower: P(X >= k | p) = alpha/2, i.e. 1 - cdf(k-1) = alpha/2; cdf(k-1) falls as p rises
    lo = 0.0 if k == 0 else _bisect(lambda p: binom_cdf(k - 1, n, p) - (1 - alpha / 2), 0.0, 1.0)
    # upper: P(X <= k | p) = alpha/2
    hi = 1.0 if k == n else _bisect(lambda p: binom_cdf(k, n, p) - alpha / 2, 0.0, 1.0)
    return lo, hi


def zero_failure_bound(n: int, conf: float = 0.95) -> float:
    """One-sided exact upper bound on the failure rate after ``n`` clean runs."""
    _check_conf(conf)
    if n <= 0:
        return 1.0
    return 1.0 - (1.0 - conf) ** (1.0 / n)


def runs_needed(rate: float, conf: float = 0.95) -> int:
    """Clean runs (in all) for ``zero_failure_bound`` to reach ``rate``."""
    _check_conf(conf)
    if not 0.0 < rate < 1.0:
        raise ValueError(f"rate must be in (0, 1), got {rate!r}")
    return math.ceil(math.log(1.0 - conf) / math.log1p(-rate) - 1e-9)


def _log_hypergeom(a: int, row1: int, row2: int, col1: int) -> float:
    """log P(top-left cell = a) for a 2x2 table with the given margins."""
    def log_comb(n: int, k: int) -> float:
        return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
    return log_comb(row1, a) + log_comb(row2, col1 - a) - log_comb(row1 + row2, col1)


def fisher_exact(fail_a: int, runs_a: int, fail_b: int, runs_b: int) -> float:
    """Two-sided Fisher exact p-value for "A and B fail at the same rate"."""
    _check_counts(fail_a, runs_a)
    _check_counts(fail_b, runs_b)
    col1 = fail_a + fail_b
    lo, hi = max(0, col1 - runs_b), min(runs_a, col1)
    if lo == hi:
        return 1.0
    logs = {a: _log_hypergeom(a, runs_a, runs_b, col1) for a in range(lo, hi + 1)}
    observed = logs[fail_a]
    # relative tolerance: tables as likely as the observed one count (floating-point ties)
    keep = [v for v in logs.values() if v <= observed + 1e-7 * max(1.0, abs(observed))]
    top = max(logs.values())
    total = math.fsum(math.exp(v - top) for v in logs.values())
    return min(1.0, math.fsum(math.exp(v - top) for v in keep) / total)


# -- how many runs would decide between two rates ------------------------------------

POWER = 0.8                  # the usual target: a real difference is found 4 times in 5
MAX_DECIDE_RUNS = 1000       # beyond this per side, "more than" is the honest answer (and ~0.5 s to say)
_LOG_TAIL = 40.0             # terms below e^-40 of the largest are left out (sums change < 1e-15)


def _window(logp, lo: int, hi: int, start: int) -> range:
    """The indices around ``start`` in [lo, hi] whose log-probability is within ``_LOG_TAIL`` of
    ``start``'s (unimodal distributions: walk out from the mode until the terms vanish)."""
    top = logp(start)
    a = start
    while a > lo and logp(a - 1) > top - _LOG_TAIL:
        a -= 1
    b = start
    while b < hi and logp(b + 1) > top - _LOG_TAIL:
        b += 1
    return range(a, b + 1)


def fisher_power(rate_a: float, rate_b: float, n: int, alpha: float = 0.05) -> float:
    """The probability that the two-sided Fisher exact test (``fisher_exact``) gives p < ``alpha``
    with ``n`` runs on each side, when the true failure rates are ``rate_a`` and ``rate_b``.

    Exact enumeration of both binomials (terms below e^-40 of the mode dropped); the Fisher
    p-values of every table with one column total are computed once, from the hypergeometric
    sorted by probability, with ``fisher_exact``'s tie tolerance."""
    if n < 1:
        return 0.0
    for r in (rate_a, rate_b):
        if not 0.0 <= r <= 1.0:
            raise ValueError(f"rate must be in [0, 1], got {r!r}")

    def binomial(rate: float) -> list[tuple[int, float]]:
        mode = min(n, max(0, int((n + 1) * rate)))
        return [(x, math.exp(_log_pmf(x, n, rate)))
                for x in _window(lambda x: _log_pmf(x, n, rate), 0, n, mode)]

    import bisect as _bisect_mod
    side_a, side_b = binomial(rate_a), binomial(rate_b)
    significant: dict[int, set[int]] = {}       # column total -> the a's whose table has p < alpha

    def column(t: int) -> set[int]:
        lo, hi = max(0, t - n), min(n, t)
        logh = lambda a: _log_hypergeom(a, n, n, t)  # noqa: E731
        kept = _window(logh, lo, hi, min(hi, max(lo, t // 2)))
        logs = sorted((logh(a), a) for a in kept)
        cum, total = [], 0.0
        for v, _ in logs:
            total += math.exp(v)
            cum.append(total)
        values = [v for v, _ in logs]
        out = {a for a in range(lo, hi + 1) if a not in kept}       # beyond e^-40: p far below alpha
        for v, a in logs:
            i = _bisect_mod.bisect_right(values, v + 1e-7 * max(1.0, abs(v))) - 1
            if min(1.0, cum[i]) < alpha:
                out.add(a)
        return out

    power = 0.0
    for xa, pa in side_a:
        for xb, pb in side_b:
            t = xa + xb
            if t not in significant:
                significant[t] = column(t)
            if xa in significant[t]:
                power += pa * pb
    return min(1.0, power)


@functools.lru_cache(maxsize=1024)       # a compare's table is rebuilt for every report it writes
def runs_to_decide(rate_a: float, rate_b: float, alpha: float = 0.05, power: float = POWER,
                   max_runs: int = MAX_DECIDE_RUNS) -> int | None:
    """Runs per side for the Fisher exact test to tell ``rate_a`` from ``rate_b`` with probability
    ``power`` (``fisher_power``); None when ``max_runs`` per side are not enough (equal rates never are).

    Found by doubling, then bisection between the last two sizes.  An exact test's power is not
    strictly monotone in ``n`` (it saw-tooths by a few points), so this is the size the bisection
    lands on, where the power is at least ``power``; a neighbouring size may fall just short."""
    if rate_a == rate_b:
        return None
    n = 1
    while fisher_power(rate_a, rate_b, n, alpha) < power:
        if n >= max_runs:
            return None
        n = min(2 * n, max_runs)
    lo, hi = n // 2, n          # power(lo) < power (or lo == 0), power(hi) >= power
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fisher_power(rate_a, rate_b, mid, alpha) >= power:
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True)
class RateEstimate:
    """``failures`` of ``runs`` with both intervals, at ``conf``."""

    failures: int
    runs: int
    conf: float
    wilson: tuple[float, float]
    clopper_pearson: tuple[float, float]

    @property
    def rate(self) -> float:
        return self.failures / self.runs if self.runs else math.nan

    @property
    def upper_one_sided(self) -> float:
        """The zero-failure bound when clean, else the exact interval's upper end."""
        return zero_failure_bound(self.runs, self.conf) if self.failures == 0 else self.clopper_pearson[1]


def estimate(failures: int, runs: int, conf: float = 0.95) -> RateEstimate:
    return RateEstimate(failures, runs, conf, wilson(failures, runs, conf), clopper_pearson(failures, runs, conf))


# -- the median of timed samples ----------------------------------------------------

def median(values) -> float:
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return math.nan
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def median_ci_ranks(n: int, conf: float = 0.95) -> tuple[int, int] | None:
    """0-based ranks (lo, hi) of the order statistics that bound the median with at least ``conf``
    coverage, whatever the distribution: P(x_(j) <= median <= x_(n-1-j)) = 1 - 2 P(X <= j),
    X ~ Binomial(n, 1/2).  None when ``n`` is too small for any pair (n < 6 at 95%).
    Exact up to 1000 samples; above it the normal approximation (the binomial is within 1e-3 there)."""
    _check_conf(conf)
    alpha = 1.0 - conf
    if n < 1:
        return None
    if n > 1000:
        j = math.floor(n / 2 - _z(conf) * math.sqrt(n) / 2) - 1
        return (j, n - 1 - j) if j >= 0 else None
    # largest j with 2 * P(X <= j) <= alpha, summed term by term (one pass)
    log_half_n = n * math.log(0.5)
    cdf, best = 0.0, None
    for j in range(n // 2):
        cdf += math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + log_half_n)
        if 2 * cdf > alpha:
            break
        best = j
    return None if best is None else (best, n - 1 - best)


def median_ci(values, conf: float = 0.95) -> tuple[float, float] | None:
    """The distribution-free interval on the median of ``values`` (order statistics); None when too few."""
    xs = sorted(values)
    ranks = median_ci_ranks(len(xs), conf)
    return None if ranks is None else (xs[ranks[0]], xs[ranks[1]])


def normal_quantile(conf: float) -> float:
    """The two-sided normal quantile for ``conf`` (1.96 at 0.95)."""
    return _z(conf)
