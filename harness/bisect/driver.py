"""`harness bisect` and `harness bisect-run`: find the first bad commit of the kernel library.

The search itself is ``harness.bisect.search.FlakyBisect`` (pure, flake-aware);
this module is the driver around it: the failure ``Signature`` (outcome and code),
what one run at a commit observed (a sighting, a clean run, an untestable commit),
the other failures met on the way (``AlsoSeen``), and the ``BisectState`` that is
saved after every run so ``--resume`` continues an interrupted bisect exactly.

One "run" at a commit runs every selected case once in fresh workers on that
commit's worktree; it is a sighting when any result carries the signature, and a
clean run when any case ran without it, whatever else failed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.bisect.search import Conclusion, FlakyBisect
from harness.commands.selection import deciding, failing_ids, is_test_result, unmatched
from harness.errors import UsageError
from harness.outcomes import Outcome, Result
from harness.refs.git import Commit

class SignatureError(UsageError):
    """A ``--signature`` that does not read."""


class BisectError(UsageError):
    """The bisect cannot go on (an endpoint does not build, a stored state does not read)."""


@dataclass(frozen=True)
class Signature:
    """``OUTCOME[:CODE]``: ``MISMATCH``, ``DEVICE_FAULT:507018``, ``CRASH:SIGSEGV``; a label
    such as ``FAIL_507018`` is read as its outcome with that code (any of DEVICE_FAULT,
    ORCH_ERROR, OOM)."""

    outcome: Outcome | None          # None with a code: any coded outcome (from a FAIL_<code> label)
    code: str | None = None

    @classmethod
    def parse(cls, text: str) -> "Signature":
        text = text.strip()
        m = re.fullmatch(r"FAIL_(\w+)", text)
        if m:
            return cls(None, m.group(1))
        name, _, code = text.partition(":")
        try:
            outcome = Outcome(name.upper())
        except ValueError:
            known = ", ".join(o.value for o in Outcome if o.failed)
            raise SignatureError(f"--signature {text!r}: {name!r} is not an outcome (one of {known}, "
                                 f"optionally :CODE, or a FAIL_<code> label)") from None
        if not outcome.failed:
            raise SignatureError(f"--signature {text!r}: {outcome.value} is not a failure")
        return cls(outcome, code or None)

    @classmethod
    def of(cls, result: Result) -> "Signature":
        return cls(result.outcome, None if result.code is None else str(result.code))

    def matches(self, result: Result) -> bool:
        if self.outcome is None:
            return result.outcome.failed and result.code is not None and str(result.code) == self.code
        if result.outcome is not self.outcome:
            return False
        return self.code is None or str(result.code) == self.code

    def __str__(self) -> str:
        if self.outcome is None:
            return f"FAIL_{self.code}"
        return self.outcome.value + (f":{self.code}" if self.code is not None else "")


SIGHTED, CLEAN, UNTESTABLE = "sighted", "clean", "untestable"

# The conclusions that name the first bad commit (or the range it is in).
_NAMED = (Conclusion.FOUND, Conclusion.SKIPPED_RANGE)
# Results that say nothing about the kernel: it was not built or imported, the harness or the
# environment (runtime start, collective set-up, a peer) broke, no device.
_NOT_RUN = (Outcome.BUILD_ERROR, Outcome.HARNESS_ERROR, Outcome.ENV_ERROR, Outcome.SKIPPED)


def observe(results: list[Result], signature: Signature | None) -> tuple[str, Signature | None]:
    """What one run at a commit says, and the signature (the first failure, when none was set).

    Per case: a result either carries the signature, or ran without it (passed, or failed
    some other way), or did not run (``BUILD_ERROR``: build or import error,
    ``HARNESS_ERROR``, ``ENV_ERROR``, ``SKIPPED``).

    - ``sighted``: some result carries the signature;
    - ``untestable``: no case ran;
    - ``clean``: some case ran and none carried the signature, whatever else failed: a
      MISMATCH is no reason to doubt that the HANG looked for did not happen.
    """
    if signature is None:
        first = next((r for r in results if r.outcome.failed and r.outcome not in _NOT_RUN), None)
        if first is not None:
            return SIGHTED, Signature.of(first)
    elif any(signature.matches(r) for r in results):
        return SIGHTED, signature
    if all(r.outcome in _NOT_RUN for r in results):
        return UNTESTABLE, signature
    return CLEAN, signature


def signature_failure(results: list[Result], signature: Signature | None) -> dict[str, Any] | None:
    """What a command case printed when it showed the signature (``failure_text``: the head of its
    output, a JUnit test's message), for the conclusion: ``FAILED`` alone does not say why a command
    fails everywhere.  The first such result; None for kernel cases (their summary says it) or none."""
    from harness.commands.runner import failure_text      # lazy: the driver stays free of the runner's imports
    for r in results:
        if signature is not None and signature.matches(r) and (text := failure_text(r)) is not None:
            return {"case_id": r.case_id, "label": r.label, "ref": r.ref, "text": text}
    return None


def other_failures(results: list[Result], signature: Signature | None) -> list[str]:
    """The labels of the failures of a run that are not the signature (a build error is a skip, not one)."""
    return sorted({r.label for r in results if r.outcome.failed and r.outcome is not Outcome.BUILD_ERROR
                   and not (signature is not None and signature.matches(r))})


@dataclass(frozen=True)
class AlsoSeen:
    """A failure other than the signature, seen during the bisect: ``at`` the commit indices it
    was seen at (ascending, each once), ``runs`` in how many runs."""

    label: str
    at: tuple[int, ...]
    runs: int

    @property
    def first(self) -> int:
        return self.at[0]

    @property
    def last(self) -> int:
        return self.at[-1]


@dataclass
class BisectState:
    """Everything ``--resume`` needs: the commits, the search tallies, the signature, the steps."""

    commits: list[Commit]                       # index 0 = good, last = bad
    search: FlakyBisect
    signature: Signature | None = None
    steps: list[dict] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.commits) - 1

    def next_index(self) -> int | None:
        return self.search.next_index()

    def record(self, index: int, results: list[Result], run_id: str) -> str:
        # a command case with --test (or -k reaching its tests) is judged by those tests, not its exit status
        what, self.signature = observe(deciding(results), self.signature)
        if what == UNTESTABLE:
            missed = unmatched(results)
            if index in (0, self.n) and missed:
                raise BisectError(f"{missed[0].line()} at the {'good' if index == 0 else 'bad'} endpoint "
                                  f"{self.commits[index].short}")
            if index in (0, self.n):
                raise BisectError(f"the {'good' if index == 0 else 'bad'} endpoint {self.commits[index].short} "
                                  f"cannot be tested (every case {'/'.join(sorted({r.label for r in results}))}): "
                                  f"choose a testable endpoint")
            self.search.skip(index)
        else:
            self.search.record(index, what == SIGHTED)
        self.steps.append({"index": index, "sha": self.commits[index].sha, "observed": what, "run_id": run_id,
                           "labels": sorted({r.label for r in results}),
                           "others": other_failures(deciding(results), self.signature),
                           "failing": failing_ids(results), "tests": any(map(is_test_result, results))})
        return what

    def failing_at(self, index: int) -> list[str] | None:
        """The tests (or cases) that failed in any run at commit ``index``; None when it was not run
        (or only by a harness that did not record them)."""
        steps = [s for s in self.steps if s["index"] == index and "failing" in s]
        return sorted({t for s in steps for t in s["failing"]}) if steps else None

    def also_seen(self) -> list[AlsoSeen]:
        """The other failures the steps met, most runs first (steps saved without ``others`` add nothing)."""
        where: dict[str, list[int]] = {}
        for step in self.steps:
            for label in step.get("others", ()):
                where.setdefault(label, []).append(step["index"])
        found = [AlsoSeen(label, tuple(sorted(set(at))), len(at)) for label, at in where.items()]
        return sorted(found, key=lambda a: (-a.runs, a.label))

    def to_dict(self) -> dict[str, Any]:
        return {"commits": [c.__dict__ for c in self.commits], "search": self.search.to_dict(),
                "signature": None if self.signature is None else str(self.signature), "steps": self.steps}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BisectState":
        # older harnesses also saved an "inconclusive" count per commit: nothing reads it now
        return cls(commits=[Commit(**c) for c in data["commits"]], search=FlakyBisect.from_dict(data["search"]),
                   signature=None if data.get("signature") is None else Signature.parse(data["signature"]),
                   steps=list(data.get("steps", [])))

    # -- the answer ---------------------------------------------------------------
    def endpoint_refs(self) -> list[dict]:
        """The two endpoints as report ``refs`` (a bisect document's columns)."""
        return [{"name": name, "sha": c.sha, "subject": c.subject}
                for name, c in (("good", self.commits[0]), ("bad", self.commits[-1]))]

    def _also_seen(self, seen: AlsoSeen, culprit: int | None) -> dict[str, Any]:
        """``before``: the commits before the first bad one (or range; ``culprit`` None when the
        bisect names none) where it showed, as ``[first sha, last sha]``: a bug older than the
        culprit; null when there is none."""
        before = [i for i in seen.at if culprit is not None and i < culprit]
        return {"label": seen.label, "first": self.commits[seen.first].sha, "last": self.commits[seen.last].sha,
                "first_index": seen.first, "last_index": seen.last, "commits": len(seen.at), "runs": seen.runs,
                "before": [self.commits[before[0]].sha, self.commits[before[-1]].sha] if before else None}

    def report(self) -> dict[str, Any]:
        answer = self.search.answer()
        post = self.search.posterior()
        p = self.search.estimate_p()
        out: dict[str, Any] = {
            "verdict": answer.conclusion.value, "probability": answer.probability, "runs": answer.runs,
            "signature": None if self.signature is None else str(self.signature),
            "p": {"mean": p.mean, "low": p.low, "high": p.high, "level": p.level, "sightings": p.sightings,
                  # the runs before the search in the prior (--p-prior: a stored or stated rate)
                  "prior_runs": self.search.p_evidence[0], "prior_sightings": self.search.p_evidence[1]},
            # FOUND by the deterministic check: its ratio (docs/bisect.md "Learning determinism"); else null
            "deterministic": self.search.deterministic_ratio() if answer.deterministic else None,
            "none_in_range": self.search.none_in_range(),
            "culprit": None, "range": None,
            "tally": [{"index": t.index, "sha": self.commits[t.index].sha, "subject": self.commits[t.index].subject,
                       "runs": t.runs, "sightings": t.sightings, "skipped": t.skipped,
                       "posterior": float(post[t.index]) if t.index else None}
                      for t in self.search.tally()],
            "also_seen": [self._also_seen(a, answer.first if answer.conclusion in _NAMED else None)
                          for a in self.also_seen()],
        }
        if answer.conclusion is Conclusion.FOUND:
            at_culprit, at_bad = self.failing_at(answer.first), self.failing_at(self.n)
            out["failing"] = {"culprit": at_culprit, "bad": at_bad}
            # only for tests of a suite: which kernel cases a flaky bug hits at two commits differs by chance
            suite = any(s.get("tests") for s in self.steps)
            if suite and at_culprit is not None and at_bad is not None and set(at_culprit) != set(at_bad):
                out["failing"]["culprit_only"] = sorted(set(at_culprit) - set(at_bad))
                out["failing"]["bad_only"] = sorted(set(at_bad) - set(at_culprit))
        if answer.first is not None:
            first, last = self.commits[answer.first], self.commits[answer.last]
            out["range"] = [first.sha, last.sha]
            if answer.conclusion is Conclusion.FOUND:
                out["culprit"] = {"sha": first.sha, "subject": first.subject, "author_date": first.author_date,
                                  "author": first.author, "index": answer.first}
        return out


def run_steps(state: BisectState, runner, cases: list, *, parent: str, command: list[str],
              save: Callable[[], None], on_step: Callable[[int, str, list[Result]], None] | None = None) -> list[Result]:
    """Run the commits the search asks for until it is done; ``save`` after every run.

    One run at a commit: every case once (``repeat`` = the runs already made there, so logs
    and stored results of reruns stay apart) through ``runner`` (a ``RefRunner``), stored as
    a child run of ``parent``.
    """
    from harness.run.engine import Planned
    results: list[Result] = []
    while (index := state.next_index()) is not None:
        commit = state.commits[index]
        prepared = runner.prepare(commit.short, commit)
        attempt = sum(1 for step in state.steps if step["index"] == index)
        planned = [Planned(i, case, attempt) for i, case in enumerate(cases)]
        recorded = runner.run(prepared, planned, kind="bisect-step", parent_id=parent, command=command,
                              extra={"bisect_index": index})
        results.extend(recorded.results)
        observed = state.record(index, recorded.results, recorded.run_id)
        save()
        if on_step:
            on_step(index, observed, recorded.results)
    return results
