"""`harness bisect` and `harness bisect-run`: find the first bad commit of the kernel library.

The search itself is ``harness.bisect.search.FlakyBisect`` (pure, flake-aware);
this module is the driver around it: the failure ``Signature`` (outcome and code),
what one run at a commit observed (a sighting, a clean run, an untestable commit,
or a run that says nothing because another failure masked it), and the
``BisectState`` that is saved after every run so ``--resume`` continues an
interrupted bisect exactly.

One "run" at a commit runs every selected case once in fresh workers on that
commit's worktree; it is a sighting when any result carries the signature.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.bisect.search import Conclusion, FlakyBisect
from harness.errors import UsageError
from harness.outcomes import Outcome, Result
from harness.refs.git import Commit

# A commit whose runs only ever end in other failures is skipped after this many.
MAX_INCONCLUSIVE = 2


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


SIGHTED, CLEAN, UNTESTABLE, INCONCLUSIVE = "sighted", "clean", "untestable", "inconclusive"


def observe(results: list[Result], signature: Signature | None) -> tuple[str, Signature | None]:
    """What one run at a commit says, and the signature (the first failure, when none was set).

    - ``sighted``: some result carries the signature;
    - ``untestable``: the commit did not build (every result ``BUILD_ERROR``);
    - ``inconclusive``: no result ran clean and none carried the signature (another
      failure, or nothing ran): it neither proves nor clears the commit;
    - ``clean``: no signature, and at least one case ran clean.
    """
    if results and all(r.outcome is Outcome.BUILD_ERROR for r in results):
        return UNTESTABLE, signature
    if signature is None:
        first = next((r for r in results if r.outcome.failed and r.outcome is not Outcome.BUILD_ERROR), None)
        if first is not None:
            return SIGHTED, Signature.of(first)
    elif any(signature.matches(r) for r in results):
        return SIGHTED, signature
    if any(r.outcome.passed for r in results):
        return CLEAN, signature
    return INCONCLUSIVE, signature


@dataclass
class BisectState:
    """Everything ``--resume`` needs: the commits, the search tallies, the signature, the steps."""

    commits: list[Commit]                       # index 0 = good, last = bad
    search: FlakyBisect
    signature: Signature | None = None
    steps: list[dict] = field(default_factory=list)
    inconclusive: dict[int, int] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.commits) - 1

    def next_index(self) -> int | None:
        return self.search.next_index()

    def record(self, index: int, results: list[Result], run_id: str) -> str:
        what, self.signature = observe(results, self.signature)
        if what == SIGHTED:
            self.search.record(index, True)
        elif what == CLEAN:
            self.search.record(index, False)
        elif what == UNTESTABLE:
            if index in (0, self.n):
                raise BisectError(f"the {'good' if index == 0 else 'bad'} endpoint {self.commits[index].short} "
                                  f"does not build: choose a testable endpoint")
            self.search.skip(index)
        elif index in (0, self.n):
            # an endpoint cannot be skipped: its signature did not show, which is all a clean run says
            self.search.record(index, False)
        else:
            self.inconclusive[index] = self.inconclusive.get(index, 0) + 1
            if self.inconclusive[index] >= MAX_INCONCLUSIVE:
                self.search.skip(index)
                what = "inconclusive, skipped"
        self.steps.append({"index": index, "sha": self.commits[index].sha, "observed": what, "run_id": run_id,
                           "labels": sorted({r.label for r in results})})
        return what

    def to_dict(self) -> dict[str, Any]:
        return {"commits": [c.__dict__ for c in self.commits], "search": self.search.to_dict(),
                "signature": None if self.signature is None else str(self.signature),
                "steps": self.steps, "inconclusive": {str(k): v for k, v in self.inconclusive.items()}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BisectState":
        return cls(commits=[Commit(**c) for c in data["commits"]], search=FlakyBisect.from_dict(data["search"]),
                   signature=None if data.get("signature") is None else Signature.parse(data["signature"]),
                   steps=list(data.get("steps", [])),
                   inconclusive={int(k): v for k, v in data.get("inconclusive", {}).items()})

    # -- the answer ---------------------------------------------------------------
    def endpoint_refs(self) -> list[dict]:
        """The two endpoints as report ``refs`` (a bisect document's columns)."""
        return [{"name": name, "sha": c.sha, "subject": c.subject}
                for name, c in (("good", self.commits[0]), ("bad", self.commits[-1]))]

    def report(self) -> dict[str, Any]:
        answer = self.search.answer()
        post = self.search.posterior()
        p = self.search.estimate_p()
        out: dict[str, Any] = {
            "verdict": answer.conclusion.value, "probability": answer.probability, "runs": answer.runs,
            "signature": None if self.signature is None else str(self.signature),
            "p": {"mean": p.mean, "low": p.low, "high": p.high, "level": p.level, "sightings": p.sightings},
            "none_in_range": self.search.none_in_range(),
            "culprit": None, "range": None,
            "tally": [{"index": t.index, "sha": self.commits[t.index].sha, "subject": self.commits[t.index].subject,
                       "runs": t.runs, "sightings": t.sightings, "skipped": t.skipped,
                       "posterior": float(post[t.index]) if t.index else None}
                      for t in self.search.tally()],
        }
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
