"""Flake-aware bisection: the first commit that shows a failure signature, when the
failure reproduces only with some unknown probability ``p`` per run.

Commits are indexed ``0..n``: 0 is the known-good endpoint G, ``n`` the bad endpoint B.
The model (docs/bisect.md):

- the culprit ``c`` is the first commit that carries the bug; a commit before ``c``
  NEVER shows the signature, a commit at or after ``c`` shows it with probability ``p``
  on each run, runs independent;
- so one sighting at ``i`` proves ``c <= i``; a clean run at ``i`` is only evidence
  that ``c > i``, and how much depends on ``p``.

Hypotheses, as positions of one array of length ``n + 2`` (``posterior()``):

- ``1..n``: commit ``i`` is the culprit;
- ``0`` (``GOOD_SHOWS``): the signature already shows at G (the bug is older than
  the range, G was never good): every commit ``0..n`` shows it with probability ``p``;
- ``n + 1`` (``NOT_REPRODUCED``): nothing in the range shows the signature (B does
  not reproduce it on this machine): the culprit is "after B".

Together 0 and ``n + 1`` are "no culprit in range". ``p`` is not a point estimate: it
carries a Beta prior and every likelihood is integrated over it exactly (closed form),
so ``k`` clean runs are worth ``E[(1 - p)^k | data]``, never less than ``(1 - p_hat)^k``
for the posterior mean ``p_hat`` (Jensen): an over-estimated ``p`` would make clean runs
look more convincing than they are, an under-estimated one only costs runs. The default
prior leans slightly towards small ``p`` (docs/bisect.md has the measured trade-off).

The next commit to run is the one whose outcome carries the most information about the
culprit (mutual information between the outcome and the hypothesis, computed for every
commit at once with prefix sums). Once one answer holds half the posterior, the run that
best separates that leader from the rest is chosen instead (the largest expected
log-likelihood ratio, Chernoff's rule for sequential tests): the information rule is
myopic and under-values the runs at the leader's own commit that firm up ``p`` and so
make every clean run below it count. The search stops when one culprit (or one block of
skipped commits with the tested commit after it, or one "none" hypothesis) holds
``confidence`` of the posterior, when no run is informative any more, or when
``max_runs`` is spent.

While every run at a commit proven bad has shown the signature, the search bisects as for a
deterministic failure and may also stop on a generalised likelihood ratio that rules out every
earlier culprit at its best-case ``p`` (``deterministic_ratio``): a deterministic failure is
not re-run as if it might be flaky, and a flaky one that looked deterministic is not trusted
beyond its luck. Earlier runs at a commit known bad (a stored rate, ``p_evidence``) join the
Beta prior with their own weight.

The state is the per-commit tally (runs, sightings, skipped) plus the settings;
``to_dict``/``from_dict`` round-trip it as JSON-safe data. Pure numpy, no git.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

STATE_VERSION = 1

# Below this many bits a run is "not informative": only the p estimate would move.
MIN_INFORMATION_BITS = 1e-9
# Once the leading answer holds this much of the posterior, runs are chosen to separate it
# from the rest (expected log-likelihood ratio) instead of by information.
LEADER_MASS = 0.5


class Conclusion(str, enum.Enum):
    """What the search concludes (its value is the bisect report's ``verdict``)."""

    SEARCHING = "SEARCHING"
    FOUND = "FOUND"
    SKIPPED_RANGE = "SKIPPED_RANGE"
    GOOD_SHOWS = "GOOD_SHOWS"
    NOT_REPRODUCED = "NOT_REPRODUCED"
    UNDECIDED = "UNDECIDED"

    def describe(self) -> str:
        return _DESCRIPTIONS[self]


_DESCRIPTIONS = {
    Conclusion.SEARCHING: "not done: call next_index()",
    Conclusion.FOUND: "one commit holds at least the confidence",
    Conclusion.SKIPPED_RANGE: "the culprit is one of the skipped commits first..last-1 or last itself",
    Conclusion.GOOD_SHOWS: "no culprit in range: the signature shows at the good commit already",
    Conclusion.NOT_REPRODUCED: "no culprit in range: the bad commit did not show the signature",
    Conclusion.UNDECIDED: "stopped (run budget, nothing informative left) below the confidence",
}


@dataclass(frozen=True)
class Tally:
    """What was seen at one commit."""

    index: int
    runs: int
    sightings: int
    skipped: bool

    @property
    def clean(self) -> int:
        return self.runs - self.sightings


@dataclass(frozen=True)
class PEstimate:
    """The reproduction probability ``p`` of the culprit's signature.

    ``mean`` is the posterior mean (the predictive probability that one more run at a
    commit known to carry the bug shows the signature); ``low``/``high`` the
    equal-tailed credible interval at ``level``. The culprit is integrated out.
    ``sightings`` and ``runs`` count the evidence: all sightings, and the runs at
    commits proven to carry the bug (at or after the first sighted commit).
    """

    mean: float
    low: float
    high: float
    level: float
    sightings: int
    runs: int


@dataclass(frozen=True)
class Answer:
    """Where the search stands.

    ``first..last`` is the culprit range the conclusion names: ``first == last`` for
    FOUND; for SKIPPED_RANGE the skipped commits ``first..last-1`` and the tested
    commit ``last`` (untestable commits cannot be told apart from the first tested one
    after them); for UNDECIDED the most probable such group; ``None`` for the "none"
    conclusions and while SEARCHING without a sighting. ``probability`` is the
    posterior mass of what the conclusion names.
    """

    conclusion: Conclusion
    first: int | None
    last: int | None
    probability: float
    runs: int
    # FOUND by the deterministic check (every run at a bad commit showed the signature, and the
    # culprits below are ruled out at every p), not by the posterior reaching the confidence
    deterministic: bool = False

    @property
    def culprit(self) -> int | None:
        return self.first if self.conclusion is Conclusion.FOUND else None


def _lgamma(x: np.ndarray) -> np.ndarray:
    return np.fromiter((math.lgamma(v) for v in x.ravel()), dtype=float, count=x.size).reshape(x.shape)


def _binary_entropy(x: np.ndarray) -> np.ndarray:
    """h(x) in bits, 0 at 0 and 1."""
    x = np.clip(x, 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -(x * np.log2(x) + (1.0 - x) * np.log2(1.0 - x))
    return np.nan_to_num(h, nan=0.0)


def _bernoulli_kl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """KL(Bernoulli(x) || Bernoulli(y)) in nats; y is kept off 0 and 1 (an impossible outcome costs ~700)."""
    y = np.clip(y, 1e-300, 1.0 - 1e-16)
    with np.errstate(divide="ignore", invalid="ignore"):
        sighted = np.where(x > 0.0, x * np.log(x / y), 0.0)
        clean = np.where(x < 1.0, (1.0 - x) * np.log((1.0 - x) / (1.0 - y)), 0.0)
    return sighted + clean


def _check_probability(name: str, value: float, *, open_low: bool = True) -> float:
    value = float(value)
    if math.isnan(value) or not (value > 0.0 if open_low else value >= 0.0) or not value < 1.0:
        raise ValueError(f"{name} must be in {'(' if open_low else '['}0, 1), got {value!r}")
    return value


def _check_count(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


class FlakyBisect:
    """Bayesian bisection over commits ``0..n`` for a signature that shows with probability ``p``.

    Settings:

    - ``n``: commits after G; candidates are ``1..n`` (``n >= 1``).
    - ``confidence``: posterior mass one answer must hold to stop (default 0.99).
    - ``prior``: weights of candidates ``1..n`` (uniform when None).
    - ``none_prior``: prior probability of "no culprit in range", split evenly between
      GOOD_SHOWS and NOT_REPRODUCED (default 0.02: each endpoint is trusted at 99% before
      any run). The NOT_REPRODUCED half is gone with the first sighting; GOOD_SHOWS loses
      mass with every clean run anywhere (each is a run at or after G).
    - ``p_prior``: ``(a, b)`` of the Beta prior on ``p``. Default ``(1, 1.25)``: nearly
      flat, mean 0.44, a quarter of a clean run of lean towards low ``p``.
    - ``p_evidence``: ``(runs, sightings)`` made before the search at a commit known to carry
      the bug (a stored failure rate at B, or a stated one): they update the Beta prior to
      ``Beta(a + sightings, b + runs - sightings)``, so 3 runs weigh as 3 runs, never as
      certainty, and count in the deterministic check (a clean one among them rules it out).
    - ``learn_deterministic``: also stop when every run at a commit proven bad showed the
      signature and each culprit below the first sighted commit is ruled out whatever ``p``
      is (its best-case likelihood ratio, ``deterministic_ratio``, at most ``1 - confidence``):
      a deterministic failure is then not re-run as if it might be flaky (default True).
    - ``min_good_runs``: runs at G forced right after the first sighting (default 0:
      G is run when the choice rule picks it, which it does when GOOD_SHOWS competes
      with the first commits; set 1 to smoke-test G early).
    - ``max_bad_runs``: runs at B without a single sighting anywhere after which the
      search gives up with NOT_REPRODUCED (default 50: a signature that shows once in
      15 runs is missed 3% of the time; raise it for rarer ones).
    - ``max_runs``: the total run budget, endpoint runs included (None: unlimited).
    """

    def __init__(self, n: int, confidence: float = 0.99, prior: Sequence[float] | None = None,
                 none_prior: float = 0.02, p_prior: tuple[float, float] = (1.0, 1.25),
                 min_good_runs: int = 0, max_bad_runs: int = 50, max_runs: int | None = None,
                 learn_deterministic: bool = True, p_evidence: tuple[float, float] = (0.0, 0.0)) -> None:
        self.n = _check_count("n (commits after the good endpoint)", n, 1)
        self.confidence = _check_probability("confidence", confidence)
        if prior is None:
            weights = np.ones(self.n)
        else:
            weights = np.asarray(prior, dtype=float)
            if weights.shape != (self.n,) or not np.all(np.isfinite(weights)) or np.any(weights < 0) \
                    or weights.sum() <= 0:
                raise ValueError(f"prior must be {self.n} finite non-negative weights (candidates 1..n), "
                                 f"not all zero")
        self.prior = None if prior is None else tuple(float(w) for w in weights)
        self.none_prior = _check_probability("none_prior", none_prior, open_low=False)
        try:
            a, b = (float(v) for v in p_prior)
        except (TypeError, ValueError):
            raise ValueError(f"p_prior must be two positive numbers (Beta a, b), got {p_prior!r}") from None
        if not (0 < a < math.inf and 0 < b < math.inf):
            raise ValueError(f"p_prior must be two positive numbers (Beta a, b), got {p_prior!r}")
        self.p_prior = (a, b)
        self.min_good_runs = _check_count("min_good_runs", min_good_runs, 0)
        self.max_bad_runs = _check_count("max_bad_runs", max_bad_runs, 1)
        self.max_runs = None if max_runs is None else _check_count("max_runs", max_runs, 1)
        self.learn_deterministic = bool(learn_deterministic)
        try:
            ev_runs, ev_sightings = (float(v) for v in p_evidence)
        except (TypeError, ValueError):
            raise ValueError(f"p_evidence must be (runs, sightings), got {p_evidence!r}") from None
        if not (0 <= ev_sightings <= ev_runs < math.inf):
            raise ValueError(f"p_evidence must be (runs, sightings) with 0 <= sightings <= runs, got {p_evidence!r}")
        self.p_evidence = (ev_runs, ev_sightings)

        log_prior = np.empty(self.n + 2)
        with np.errstate(divide="ignore"):
            log_prior[1:self.n + 1] = np.log((1.0 - self.none_prior) * weights / weights.sum())
            log_prior[[0, self.n + 1]] = math.log(self.none_prior / 2.0) if self.none_prior > 0 else -np.inf
        self._log_prior = log_prior
        self._runs = np.zeros(self.n + 1, dtype=np.int64)
        self._sightings = np.zeros(self.n + 1, dtype=np.int64)
        self._skipped = np.zeros(self.n + 1, dtype=bool)
        self._cache: dict[str, Any] = {}

    # ----------------------------------------------------------------- recording
    def _check_index(self, index: int) -> int:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index <= self.n:
            raise ValueError(f"commit index must be an integer in 0..{self.n}, got {index!r}")
        return int(index)

    def record(self, index: int, sighted: bool) -> None:
        """One run at commit ``index``: ``sighted`` if it showed the signature."""
        index = self._check_index(index)
        if self._skipped[index]:
            raise ValueError(f"commit {index} was skipped (untestable); a run there cannot be recorded")
        self._runs[index] += 1
        self._sightings[index] += bool(sighted)
        self._cache.clear()

    def skip(self, index: int) -> None:
        """Commit ``index`` cannot be tested (build failure, broken test): never chosen again.

        Runs already recorded there keep counting. The endpoints cannot be skipped.
        """
        index = self._check_index(index)
        if index in (0, self.n):
            which = "good" if index == 0 else "bad"
            raise ValueError(f"the {which} endpoint (commit {index}) cannot be skipped: pick a testable endpoint")
        self._skipped[index] = True
        self._cache.clear()

    # ------------------------------------------------------------------ inference
    @property
    def runs(self) -> int:
        """Runs recorded so far, endpoint runs included."""
        return int(self._runs.sum())

    def _beta(self) -> tuple[float, float]:
        """The Beta prior on ``p`` with the earlier runs (``p_evidence``) in it."""
        (a, b), (runs, sightings) = self.p_prior, self.p_evidence
        return a + sightings, b + runs - sightings

    def _stats(self) -> dict[str, Any]:
        """Posterior over hypotheses 0..n+1 and each one's sighting probability, cached per state."""
        if "post" in self._cache:
            return self._cache
        n = self.n
        a, b = self._beta()
        sightings = int(self._sightings.sum())
        clean = self._runs - self._sightings
        # clean_after[h]: clean runs at commits >= h, i.e. runs at or after culprit h that showed
        # nothing; 0 for NOT_REPRODUCED (position n + 1), whose likelihood is 1 until a sighting
        clean_after = np.zeros(n + 2, dtype=float)
        clean_after[:n + 1] = np.cumsum(clean[::-1])[::-1]
        sighted = np.flatnonzero(self._sightings)
        first_sighting = int(sighted[0]) if sighted.size else n + 1
        # marginal likelihood over p ~ Beta(a, b): B(a + S, b + F_h) / B(a, b) (the h-independent
        # terms are left out); a sighting at i rules out every culprit after i
        log_like = _lgamma(b + clean_after) - _lgamma(a + b + sightings + clean_after)
        log_post = self._log_prior + log_like
        log_post[first_sighting + 1:] = -np.inf
        log_post -= log_post.max()
        post = np.exp(log_post)
        post /= post.sum()
        # P(a run at a commit >= h shows the signature | culprit h, data): the Beta posterior mean
        q = (a + sightings) / (a + b + sightings + clean_after)
        self._cache.update(post=post, q=q, sightings=sightings, clean_after=clean_after,
                           first_sighting=first_sighting)
        return self._cache

    def posterior(self) -> np.ndarray:
        """P(hypothesis) for positions ``0..n+1``: 0 GOOD_SHOWS, ``i`` culprit ``i``, ``n+1`` NOT_REPRODUCED."""
        return self._stats()["post"].copy()

    def none_in_range(self) -> float:
        """Posterior probability that no commit in ``1..n`` is the culprit."""
        post = self._stats()["post"]
        return float(post[0] + post[self.n + 1])

    def information(self) -> np.ndarray:
        """Expected information (bits) about the culprit from one run at each commit ``0..n``.

        The mutual information between the hypothesis H and the outcome Y of a run at
        ``j``: ``h(P(Y = sighted)) - sum_h P(h) h(P(Y = sighted | h))``, where a run at
        ``j`` shows the signature with probability ``q_h`` if ``h <= j`` and never
        otherwise. Both terms are prefix sums over ``h``. Skipped commits get -inf.
        """
        stats = self._stats()
        if "information" not in stats:
            post, q = stats["post"][:self.n + 1], stats["q"][:self.n + 1]
            gain = _binary_entropy(np.cumsum(post * q)) - np.cumsum(post * _binary_entropy(q))
            gain = np.maximum(gain, 0.0)                  # rounding crumbs below zero
            gain[self._skipped] = -np.inf
            stats["information"] = gain
        return stats["information"].copy()

    def separation(self) -> np.ndarray:
        """Expected evidence (nats) for the leading answer against the rest from a run at each commit.

        With the leader L (the group of highest mass, see ``answer``), the rest R, and
        ``P(Y = sighted | .)`` for a run at ``j``: ``KL(P(Y | L) || P(Y | R))``, the expected
        log-likelihood ratio of L over R if L is right. Prefix sums again. Skipped: -inf.
        """
        stats = self._stats()
        post, q = stats["post"][:self.n + 1], stats["q"][:self.n + 1]
        first, last = self._leader()
        lead_mass = float(post[first:last + 1].sum())
        j = np.arange(self.n + 1)
        covered = j >= last                      # a run at j can show the leader's bug (skips in between)
        lead_sighted = np.where(covered, q[last], 0.0)
        lead_part = float(np.sum(post[first:last + 1] * q[first:last + 1]))
        rest_sighted = (np.cumsum(post * q) - np.where(covered, lead_part, 0.0)) / max(1.0 - lead_mass, 1e-300)
        score = _bernoulli_kl(lead_sighted, np.clip(rest_sighted, 0.0, 1.0))
        score[self._skipped] = -np.inf
        return score

    def estimate_p(self, level: float = 0.9) -> PEstimate:
        """The posterior of ``p`` (culprit integrated out): mean and an equal-tailed interval."""
        _check_probability("level", level)
        stats = self._stats()
        a, b = self._beta()
        post = stats["post"][:self.n + 1]
        weight = post / post.sum() if post.sum() > 0 else np.full(post.shape, 1.0 / post.size)
        s = stats["sightings"]
        f_values, inverse = np.unique(stats["clean_after"][:self.n + 1], return_inverse=True)
        f_weight = np.bincount(inverse, weights=weight, minlength=f_values.size)
        mean = float(np.sum(f_weight * (a + s) / (a + b + s + f_values)))
        grid = (np.arange(4000) + 0.5) / 4000
        log_norm = _lgamma(a + s + b + f_values) - math.lgamma(a + s) - _lgamma(b + f_values)
        log_pdf = (log_norm[:, None] + (a + s - 1) * np.log(grid)[None, :]
                   + (b + f_values - 1)[:, None] * np.log1p(-grid)[None, :])
        cdf = np.cumsum((f_weight[:, None] * np.exp(log_pdf)).sum(axis=0))
        cdf /= cdf[-1]
        tail = (1.0 - level) / 2.0
        low = float(grid[min(np.searchsorted(cdf, tail), grid.size - 1)])
        high = float(grid[min(np.searchsorted(cdf, 1.0 - tail), grid.size - 1)])
        first = stats["first_sighting"]
        proven_runs = int(self._runs[first:].sum()) if first <= self.n else 0
        return PEstimate(mean=mean, low=low, high=high, level=level, sightings=s, runs=proven_runs)

    # ------------------------------------------------------------------- decisions
    def groups(self) -> list[tuple[int, int]]:
        """Candidate groups no run can split: each stretch of skipped commits with the tested commit after it."""
        lasts = np.flatnonzero(~self._skipped[1:]) + 1
        firsts = np.concatenate([[1], lasts[:-1] + 1])
        return [(int(f), int(t)) for f, t in zip(firsts, lasts)]

    def _group_masses(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        stats = self._stats()
        if "group_masses" not in stats:
            lasts = np.flatnonzero(~self._skipped[1:]) + 1
            firsts = np.concatenate([[1], lasts[:-1] + 1])
            cumulative = np.concatenate([[0.0], np.cumsum(stats["post"])])
            stats["group_masses"] = (firsts, lasts, cumulative[lasts + 1] - cumulative[firsts])
        return stats["group_masses"]

    def _leader(self) -> tuple[int, int]:
        """The answer of highest posterior mass as a commit range (0, 0) for GOOD_SHOWS, or a group."""
        firsts, lasts, masses = self._group_masses()
        best = int(np.argmax(masses))
        if self._stats()["post"][0] > masses[best]:
            return 0, 0
        return int(firsts[best]), int(lasts[best])

    def answer(self) -> Answer:
        """The conclusion now (SEARCHING while not done), with the range and probability it names."""
        stats = self._stats()
        if "answer" not in stats:
            stats["answer"] = self._answer()
        return stats["answer"]

    def _answer(self) -> Answer:
        stats = self._stats()
        post, n, runs = stats["post"], self.n, self.runs
        if stats["sightings"] == 0 and self._runs[n] >= self.max_bad_runs:
            return Answer(Conclusion.NOT_REPRODUCED, None, None, float(post[n + 1]), runs)
        none_prob = float(post[0] + post[n + 1])
        if none_prob >= self.confidence:
            conclusion = Conclusion.GOOD_SHOWS if post[0] >= post[n + 1] else Conclusion.NOT_REPRODUCED
            return Answer(conclusion, None, None, none_prob, runs)
        firsts, lasts, masses = self._group_masses()
        best = int(np.argmax(masses))
        first, last, mass = int(firsts[best]), int(lasts[best]), float(masses[best])
        if mass >= self.confidence:
            return Answer(Conclusion.FOUND if first == last else Conclusion.SKIPPED_RANGE, first, last, mass, runs)
        if self.learn_deterministic:
            lead = self._deterministic_lead()
            if lead is not None and self.deterministic_ratio() <= 1.0 - self.confidence:
                first, last = lead
                mass = float(self._stats()["post"][first:last + 1].sum())
                return Answer(Conclusion.FOUND if first == last else Conclusion.SKIPPED_RANGE, first, last, mass,
                              runs, deterministic=True)
        exhausted = self.max_runs is not None and runs >= self.max_runs
        if exhausted or (stats["sightings"] > 0 and self.information().max() <= MIN_INFORMATION_BITS):
            return Answer(Conclusion.UNDECIDED, first, last, mass, runs)
        if stats["sightings"] == 0:
            return Answer(Conclusion.SEARCHING, None, None, mass, runs)
        return Answer(Conclusion.SEARCHING, first, last, mass, runs)

    def _deterministic_lead(self) -> tuple[int, int] | None:
        """The group ending at the first sighted commit, when no run at or after it was clean."""
        stats = self._stats()
        first = stats["first_sighting"]
        ev_runs, ev_sightings = self.p_evidence
        if first > self.n or first == 0 or stats["clean_after"][first] > 0 or ev_runs > ev_sightings:
            return None
        firsts, lasts, _ = self._group_masses()
        k = int(np.searchsorted(lasts, first))
        return int(firsts[k]), int(lasts[k])

    def deterministic_ratio(self) -> float:
        """How well the data rule out every culprit below the first sighted commit, whatever ``p``.

        With ``S`` sightings and no clean run at a commit proven bad, the first sighted commit's
        group (culprit c) explains the data at ``p = 1`` with likelihood 1. A culprit ``h`` below
        it must have missed its ``F_h`` clean runs at or after ``h``: likelihood
        ``p^S (1 - p)^F_h``. This ratio is the largest over ``p`` of the prior-weighted sum of
        those likelihoods (GOOD_SHOWS included) over c's group's prior: a generalised
        likelihood ratio, so a stop at ``1 - confidence`` holds at every ``p`` without trusting
        a prior on ``p`` (docs/bisect.md "Learning determinism"). inf when not applicable.
        """
        lead = self._deterministic_lead()
        if lead is None:
            return math.inf
        stats = self._stats()
        first, last = lead
        s = float(stats["sightings"]) + self.p_evidence[1]
        f = stats["clean_after"][:first]
        if not np.all(f > 0):
            return math.inf                      # a culprit below with no clean run to rule it out
        # the sum is unimodal in p; its peak lies between the single terms' peaks S / (S + F_h)
        peaks = s / (s + f)
        grid = np.linspace(peaks.min(), peaks.max(), 64) if f.size > 1 else peaks
        log_terms = (self._log_prior[:first, None] + s * np.log(grid)[None, :]
                     + f[:, None] * np.log1p(-grid)[None, :])
        lead_prior = float(np.exp(self._log_prior[first:last + 1]).sum())
        return float(np.exp(log_terms).sum(axis=0).max()) / lead_prior

    def _deterministic_choice(self) -> int | None:
        """The run while every run at a commit proven bad showed the signature (None otherwise).

        Between the highest commit with a clean run and the first sighted commit the search
        bisects as for a deterministic failure (the commit that halves the prior mass there, as
        ``git bisect`` would); once only the first sighted commit's group is left, it runs that
        commit or the tested commit just below the group, whichever outcome expected at
        ``p = 1`` (a sighting, a clean run) lowers ``deterministic_ratio`` more. The stopping
        rules are unchanged, so a flaky failure that looked deterministic for a while is still
        judged by the posterior once a clean run shows at a commit proven bad.
        """
        lead = self._deterministic_lead()
        if lead is None:
            return None
        first, last = lead
        clean = np.flatnonzero(self._runs[:first] > 0)
        low = int(clean[-1]) if clean.size else 0
        open_ = np.arange(low + 1, first)
        open_ = open_[~self._skipped[open_]]
        if open_.size:
            weight = np.exp(self._log_prior[low + 1:last + 1])
            below = np.cumsum(weight)[open_ - low - 1]           # mass of culprits low+1..j
            return int(open_[np.argmin(np.abs(2.0 * below - weight.sum()))])
        below = first - 1
        while below > 0 and self._skipped[below]:
            below -= 1
        ratios = {}
        for index, sighted in ((below, False), (last, True)):
            self._runs[index] += 1
            self._sightings[index] += sighted
            self._cache.clear()
            ratios[index] = self.deterministic_ratio()
            self._runs[index] -= 1
            self._sightings[index] -= sighted
        self._cache.clear()
        return min(ratios, key=lambda i: (ratios[i], i))

    def done(self) -> bool:
        return self.answer().conclusion is not Conclusion.SEARCHING

    def culprit(self) -> int | None:
        """The culprit commit when FOUND, else None (see ``answer()`` for ranges and "none")."""
        return self.answer().culprit

    def next_index(self) -> int | None:
        """The commit to run next, or None when done.

        Protocol: B (``n``) until the signature has been sighted once (a sighting
        anywhere counts: the model makes B at least as bad); then G (0) until it has
        ``min_good_runs`` runs; then the commit of most information about the culprit,
        or, once one answer holds ``LEADER_MASS`` of the posterior, the commit that best
        separates it from the rest (``separation``). Ties go to the lowest index.
        """
        if self.done():
            return None
        if self._stats()["sightings"] == 0:
            return self.n
        if self._runs[0] < self.min_good_runs:
            return 0
        if self.learn_deterministic:
            choice = self._deterministic_choice()
            if choice is not None:
                return choice
        firsts, lasts, masses = self._group_masses()
        leading = max(float(masses.max()), float(self._stats()["post"][0]))
        score = self.separation() if leading >= LEADER_MASS else self.information()
        return int(np.argmax(score))

    # --------------------------------------------------------------------- state
    def tally(self) -> list[Tally]:
        """Runs, sightings and the skip mark of every commit ``0..n``."""
        return [Tally(i, int(self._runs[i]), int(self._sightings[i]), bool(self._skipped[i]))
                for i in range(self.n + 1)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state: settings and sparse tallies ``[index, runs, sightings, skipped]``."""
        return {
            "version": STATE_VERSION,
            "n": self.n,
            "confidence": self.confidence,
            "prior": None if self.prior is None else list(self.prior),
            "none_prior": self.none_prior,
            "p_prior": list(self.p_prior),
            "min_good_runs": self.min_good_runs,
            "max_bad_runs": self.max_bad_runs,
            "max_runs": self.max_runs,
            "learn_deterministic": self.learn_deterministic,
            "p_evidence": list(self.p_evidence),
            "tally": [[t.index, t.runs, t.sightings, t.skipped] for t in self.tally() if t.runs or t.skipped],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FlakyBisect":
        """Rebuild from ``to_dict`` output; raises ValueError naming the bad field."""
        if not isinstance(data, dict):
            raise ValueError(f"bisect state must be a mapping, got {type(data).__name__}")
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"bisect state: version {data.get('version')!r} is not {STATE_VERSION}")
        try:
            search = cls(data["n"], confidence=data["confidence"], prior=data["prior"],
                         none_prior=data["none_prior"], p_prior=tuple(data["p_prior"]),
                         min_good_runs=data["min_good_runs"], max_bad_runs=data["max_bad_runs"],
                         max_runs=data["max_runs"],
                         # a state saved before the deterministic check resumes without it
                         learn_deterministic=data.get("learn_deterministic", False),
                         p_evidence=tuple(data.get("p_evidence", (0.0, 0.0))))
        except KeyError as exc:
            raise ValueError(f"bisect state: missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise ValueError(f"bisect state: {exc}") from None
        rows = data.get("tally", [])
        if not isinstance(rows, list):
            raise ValueError("bisect state: tally must be a list of [index, runs, sightings, skipped]")
        for k, row in enumerate(rows):
            try:
                index, runs, sightings, skipped = row
                index = search._check_index(index)
                runs = _check_count("runs", runs, 0)
                sightings = _check_count("sightings", sightings, 0)
                if sightings > runs:
                    raise ValueError(f"sightings {sightings} exceed runs {runs}")
                if skipped and index in (0, search.n):
                    raise ValueError(f"endpoint {index} marked skipped")
            except (TypeError, ValueError) as exc:
                raise ValueError(f"bisect state: tally[{k}]: {exc}") from None
            search._runs[index] = runs
            search._sightings[index] = sightings
            search._skipped[index] = bool(skipped)
        search._cache.clear()
        return search
