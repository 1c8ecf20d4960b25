"""One ``harness bisect`` session: plan, first record, the loop over commits, the final record.

What ``--resume`` needs is saved in the parent run's ``extra["bisect"]`` after every
run: the ``BisectPlan`` (the cases, refs and options fixed at the start) and the
``BisectState`` (commits, search tallies, steps).  The front end parses flags into
a plan and prints; everything stored and read back goes through this module.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.bisect import prior
from harness.bisect.driver import BisectError, BisectState, Signature, run_steps, signature_failure
from harness.bisect.search import FlakyBisect
from harness.case import Case
from harness.errors import UsageError
from harness.outcomes import Result
from harness.provenance import run_provenance
from harness import refs
from harness.refs.runner import RefRunner, RefSetup
from harness.document import build_document
from harness.document.summary import summarize
from harness.store import Store


@dataclass(frozen=True)
class BisectPlan:
    """What a bisect runs, fixed when it starts (a resumed bisect reads it back from the store)."""

    setup: RefSetup
    devices: tuple[str, ...]
    tier: str
    kernel_paths: tuple[str, ...]
    golden_dtype: str
    cases: tuple[Case, ...]
    good: str
    bad: str
    first_parent: bool = False
    golden_device: str = "cpu"            # --golden-device

    def to_dict(self) -> dict[str, Any]:
        return {"repo": str(self.setup.repo.resolve()), "env_templates": list(self.setup.env_templates),
                "build": self.setup.build, "build_timeout_s": self.setup.build_timeout_s,
                "worktree_cache": self.setup.cache_dir, "devices": list(self.devices), "tier": self.tier,
                "kernel_paths": list(self.kernel_paths), "golden_dtype": self.golden_dtype,
                "cases": [c.to_wire() for c in self.cases], "good": self.good, "bad": self.bad,
                "first_parent": self.first_parent, "golden_device": self.golden_device}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BisectPlan":
        setup = RefSetup(repo=Path(data["repo"]), env_templates=tuple(data["env_templates"]), build=data["build"],
                         build_timeout_s=data["build_timeout_s"], cache_dir=data["worktree_cache"])
        return cls(setup=setup, devices=tuple(data["devices"]), tier=data["tier"],
                   kernel_paths=tuple(data["kernel_paths"]), golden_dtype=data["golden_dtype"],
                   cases=tuple(Case.from_wire(c) for c in data["cases"]), good=data["good"], bad=data["bad"],
                   first_parent=bool(data.get("first_parent", False)),
                   golden_device=data.get("golden_device", "cpu"))


@dataclass(frozen=True)
class SearchOptions:
    """The ``FlakyBisect`` options of a new bisect."""

    confidence: float = 0.99
    max_runs: int = 300
    good_runs: int = 0
    max_bad_runs: int = 50
    p_prior: str | float | None = None      # --p-prior: "from-store", "none", a rate, None (from the store if enough)


@dataclass(frozen=True)
class Session:
    """A bisect as stored: its parent run, plan and state (the state is updated in place)."""

    run_id: str
    plan: BisectPlan
    state: BisectState
    prior: str | None = None              # the p prior's line, for a new bisect (printed at the start)


def _extra(plan: BisectPlan, state: BisectState) -> dict[str, Any]:
    return {"bisect": {"options": plan.to_dict(), "state": state.to_dict()}}


def load(store: Store, run_id: str) -> Session:
    """The stored bisect ``run_id`` (``--resume``)."""
    run = store.run(run_id)
    if run is None or run["kind"] != "bisect":
        raise UsageError(f"--resume {run_id}: no bisect with that id in {store.path}")
    try:
        saved = run["extra"]["bisect"]
        return Session(run_id, BisectPlan.from_dict(saved["options"]), BisectState.from_dict(saved["state"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise BisectError(f"--resume {run_id}: the stored bisect state does not read ({exc})") from None


def start(runner: RefRunner, store: Store, plan: BisectPlan, search: SearchOptions, signature: Signature | None,
          *, command: list[str]) -> Session:
    """Resolve the endpoints, list the commits between them and record the parent run."""
    good, bad = runner.resolve("good", plan.good), runner.resolve("bad", plan.bad)
    between = refs.commits_between(plan.setup.repo, good, bad, first_parent=plan.first_parent)
    if not between:
        raise UsageError(f"--good {plan.good} and --bad {plan.bad} are the same commit: nothing to bisect")
    commits = [good, *between]
    p_prior = prior.choose(search.p_prior, store=store, commits=[(c.sha, c.short) for c in reversed(between)],
                           case_ids=[c.case_id for c in plan.cases], devices=plan.devices, signature=signature)
    state = BisectState(commits, FlakyBisect(len(between), confidence=search.confidence,
                                             max_runs=search.max_runs, min_good_runs=search.good_runs,
                                             max_bad_runs=search.max_bad_runs, p_evidence=p_prior.evidence),
                        signature)
    run_id = store.start_run(command=command, devices=list(plan.devices), kind="bisect",
                             provenance={"run": run_provenance(plan.kernel_paths)},
                             ref=f"{good.short}..{bad.short}", ref_sha=bad.sha, extra=_extra(plan, state))
    return Session(run_id, plan, state, p_prior.text)


def run(session: Session, runner: RefRunner, store: Store, *, command: list[str],
        on_step: Callable[[int, str, list[Result]], None] | None = None) -> list[Result]:
    """Run the commits the search asks for, saving the state after every run (the ``--resume`` point)."""
    return run_steps(session.state, runner, list(session.plan.cases), parent=session.run_id, command=command,
                     save=lambda: store.update_extra(session.run_id, _extra(session.plan, session.state)),
                     on_step=on_step)


def devices_provenance(store: Store, run_id: str) -> dict[str, Any]:
    """What the workers of the bisect's steps reported about their devices (torch, CUDA, CANN...), per
    device: the steps' own run provenance, merged (a later step's report wins)."""
    merged: dict[str, Any] = {}
    for child in store.children(run_id):
        devices = child["provenance"].get("devices")
        if isinstance(devices, dict):
            merged.update(devices)
    return merged


def finish(session: Session, store: Store, results: list[Result]) -> dict[str, Any]:
    """Close the parent run with the bisect report and the devices' provenance (also the summary of a
    resumed, finished bisect)."""
    report = session.state.report()
    everything = [r for child in store.children(session.run_id) for r in store.results(child["run_id"])]
    report["failure"] = signature_failure(everything or results, session.state.signature)
    stored = store.run(session.run_id) or {}
    provenance = {"run": run_provenance(session.plan.kernel_paths), **(stored.get("provenance") or {}),
                  "devices": devices_provenance(store, session.run_id)}
    store.finish_run(session.run_id, {**summarize(results), "bisect": report}, provenance=provenance)
    return report


def document(session: Session, store: Store, results: list[Result], report: dict[str, Any], *,
             command: list[str]) -> dict:
    """The report document of the bisect (the results of this invocation's steps) with the bisect's own
    start (its first invocation's, when resumed), finish and provenance, as stored."""
    run = store.run(session.run_id)
    doc = build_document(results, started=run["started"], devices=list(session.plan.devices), command=command,
                         provenance=run["provenance"], run_id=session.run_id, kind="bisect", bisect=report,
                         refs=session.state.endpoint_refs())
    doc["finished"] = run["finished"]
    return doc
