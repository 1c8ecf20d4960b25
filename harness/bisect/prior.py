"""The prior on the reproduction probability ``p`` of a bisect (``--p-prior``, docs/bisect.md
"A stored rate as the prior").

A failure rate measured before the bisect (a flake hunt, a compare, earlier bisects, each a
run at a commit stored with its sha) enters the search as ``p_evidence``: that many earlier
runs at a commit known to carry the bug, so the Beta prior becomes
``Beta(a + sightings, b + runs - sightings)`` and 3 runs weigh as 3 runs, never as certainty.

A stored run is a unit like one step of the bisect: every selected case once (one ``repeat``
of one stored run). It counts only when it ran every selected case, on one of the bisect's
devices, and no case failed with another failure than the signature (a rate of another
failure, or from another device, is another rate); it is a sighting when a result carries the
signature, clean when some case ran and none did (``observe``, as for a step).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from harness.bisect.driver import CLEAN, SIGHTED, Signature, observe
from harness.errors import UsageError
from harness.outcomes import Result
from harness.store import Store

# Below this many stored runs the default (no --p-prior) does not use a stored rate.
MIN_STORED_RUNS = 10
# A stated --p-prior RATE weighs as this many runs at that rate.
STATED_RUNS = 10
FROM_STORE, NONE = "from-store", "none"


def parse_p_prior(text: str | None) -> str | float | None:
    """``--p-prior``: ``from-store``, ``none`` or a RATE in (0, 1]; None when not given."""
    if text is None:
        return None
    value = text.strip().lower()
    if value in (FROM_STORE, NONE):
        return value
    try:
        rate = float(value)
    except ValueError:
        raise UsageError(f"--p-prior must be from-store, none or a rate in (0, 1], got {text!r}") from None
    if not 0.0 < rate <= 1.0:
        raise UsageError(f"--p-prior must be from-store, none or a rate in (0, 1], got {text!r}")
    return rate


@dataclass(frozen=True)
class StoredRate:
    """The usable stored runs at one commit: ``sightings`` of ``runs``, and why others were left out."""

    sha: str
    runs: int
    sightings: int
    kinds: tuple[str, ...]                      # the stored runs' kinds (flake, compare, bisect-step, ...)
    left_out: dict[str, int] = field(default_factory=dict)   # reason -> runs


def stored_rate(store: Store, sha: str, case_ids: Sequence[str], devices: Iterable[str],
                signature: Signature) -> StoredRate:
    """The runs of ``case_ids`` stored at commit ``sha`` and how many showed ``signature``."""
    wanted, devices = set(case_ids), set(devices)
    runs = sightings = 0
    kinds: list[str] = []
    left_out: Counter[str] = Counter()
    for run in store.runs_at(sha):
        by_repeat: dict[int, list[Result]] = {}
        for r in store.results(run["run_id"]):
            if r.case_id in wanted:
                by_repeat.setdefault(int(r.repeat), []).append(r)
        for results in by_repeat.values():
            if {r.case_id for r in results} != wanted:
                left_out["did not run every selected case"] += 1
                continue
            if devices and any(r.device and r.device not in devices for r in results):
                left_out[f"ran on another device ({', '.join(sorted({r.device for r in results}))})"] += 1
                continue
            others = sorted({str(Signature.of(r)) for r in results
                             if r.outcome.failed and not signature.matches(r) and r.outcome.value not in
                             ("BUILD_ERROR", "HARNESS_ERROR")})
            if others and not any(signature.matches(r) for r in results):
                left_out[f"failed with another signature ({', '.join(others)})"] += 1
                continue
            what, _ = observe(results, signature)
            if what not in (SIGHTED, CLEAN):
                left_out["did not run (build or harness error)"] += 1
                continue
            runs += 1
            sightings += what == SIGHTED
            kinds.append(str(run["kind"]))
    return StoredRate(sha, runs, sightings, tuple(sorted(set(kinds))), dict(left_out))


@dataclass(frozen=True)
class PPrior:
    """What the search is given (``p_evidence``) and the line that says where it came from."""

    evidence: tuple[float, float]               # (runs, sightings) before the search
    source: str                                 # "store", "stated" or "none"
    text: str


def choose(mode: str | float | None, *, store: Store | None, commits: Sequence[tuple[str, str]],
           case_ids: Sequence[str], devices: Iterable[str], signature: Signature | None,
           base: tuple[float, float] = (1.0, 1.25)) -> PPrior:
    """The prior for ``--p-prior mode`` (None: from the store when it holds ``MIN_STORED_RUNS``).

    ``commits``: ``(sha, short)`` from the bad endpoint down to the first commit after good. The
    stored rate is the bad endpoint's, or else the nearest commit's with ``MIN_STORED_RUNS`` usable
    runs of which one showed the signature (so it carries the bug: its clean runs are misses).
    """
    a, b = base
    plain = f"Beta({a:g}, {b:g}), mean {a / (a + b):.2f}"
    if mode == NONE:
        return PPrior((0.0, 0.0), "none", f"p prior: {plain} (--p-prior none)")
    if isinstance(mode, float):
        runs, seen = float(STATED_RUNS), STATED_RUNS * mode
        return PPrior((runs, seen), "stated",
                      f"p prior: {_beta(a + seen, b + runs - seen)} (--p-prior {mode:g}, weighed as {STATED_RUNS} runs)")
    explicit = mode == FROM_STORE
    if store is None:
        return PPrior((0.0, 0.0), "none", f"p prior: {plain} (no store to read a rate from)")
    if signature is None:
        return PPrior((0.0, 0.0), "none", f"p prior: {plain} (a stored rate needs --signature: it counts "
                                          f"runs that show one failure)")
    found: StoredRate | None = None
    at_bad: StoredRate | None = None
    for k, (sha, _) in enumerate(commits):
        rate = stored_rate(store, sha, case_ids, devices, signature)
        if k == 0:
            at_bad = rate
        if rate.runs >= MIN_STORED_RUNS and (k == 0 or rate.sightings):
            found = rate
            break
    if found is None and explicit and at_bad is not None and at_bad.runs:
        found = at_bad                          # asked for: a few runs, weighed as a few runs
    why = ""
    if at_bad is not None and at_bad.left_out:
        why = "; left out at bad: " + ", ".join(f"{n} run{'s' * (n != 1)} {reason}"
                                              for reason, n in sorted(at_bad.left_out.items()))
    if found is None:
        have = at_bad.runs if at_bad is not None else 0
        reason = (f"no stored runs of the case{'s' * (len(case_ids) != 1)} at bad" if not have
                  else f"{have} stored run{'s' * (have != 1)} at bad, fewer than {MIN_STORED_RUNS}")
        return PPrior((0.0, 0.0), "none", f"p prior: {plain} ({reason}{why})")
    short = dict(commits).get(found.sha, found.sha[:12])
    where = "bad" if commits and found.sha == commits[0][0] else f"{short} (nearest commit with enough runs)"
    ev = (float(found.runs), float(found.sightings))
    return PPrior(ev, "store", f"p prior: {_beta(a + found.sightings, b + found.runs - found.sightings)} from "
                               f"{found.sightings} of {found.runs} stored runs showing {signature} at {where} "
                               f"({', '.join(found.kinds)}){why}")


def runs_to_see(evidence: tuple[float, float], *, miss: float = 0.01, cap: int = 1000,
                base: tuple[float, float] = (1.0, 1.25)) -> tuple[int, float]:
    """The fewest runs ``N`` after which a commit carrying the bug has shown nothing with
    probability at most ``miss``, under the prior: ``E[(1 - p)^N] = B(a, b + N) / B(a, b)``
    with ``p ~ Beta(base + evidence)``; and that probability. At most ``cap``."""
    runs, seen = evidence
    a, b = base[0] + seen, base[1] + runs - seen
    left, n = 1.0, 0
    while n < cap:
        left *= (b + n) / (a + b + n)               # E[(1 - p)^(n + 1)] / E[(1 - p)^n]
        n += 1
        if left <= miss:
            break
    return n, left


def _beta(a: float, b: float) -> str:
    return f"Beta({a:g}, {b:g}), mean {a / (a + b):.2f}"
