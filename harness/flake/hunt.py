"""Flake hunts: the same cases many times.

A hunt is a plan of ``Planned`` iterations fed to the one engine; this module
owns the plan (seeds fixed or fresh, iteration-major order so a deadline
leaves every case with about as many runs) and the stop rules (after K
failures of a case, at a deadline).  What the repeats say is
``harness.flake.summary``; two hunts side by side, ``harness.flake.changes``;
the terminal text, ``harness.reports.flake_text``.
"""
from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import dataclass, replace

from harness.case import Case
from harness.errors import UsageError
from harness.outcomes import Result
from harness.run.engine import Planned
from harness.run.options import ResumeOptions
from harness.run.session import resumed
from harness.store import Store

SEED_MODES = ("fixed", "fresh")


@dataclass(frozen=True)
class HuntOptions:
    repeat: int
    seeds: str = "fixed"
    stop_after: int | None = None        # stop a case after this many failures (--until-fail: 1)
    max_minutes: float | None = None
    conf: float = 0.95
    target_rate: float | None = None     # "N more clean runs would bound the rate at ..."
    hunt_seed: int = 0                   # fresh seeds derive from it, so a whole hunt replays

    def __post_init__(self):
        if isinstance(self.repeat, bool) or not isinstance(self.repeat, int) or self.repeat < 1:
            raise ValueError(f"--repeat must be a whole number >= 1, got {self.repeat!r}")
        if self.seeds not in SEED_MODES:
            raise ValueError(f"--seeds must be one of {', '.join(SEED_MODES)}, got {self.seeds!r}")
        if self.stop_after is not None and self.stop_after < 1:
            raise ValueError(f"--stop-after must be >= 1, got {self.stop_after!r}")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ValueError(f"--max-minutes must be > 0, got {self.max_minutes!r}")
        if not 0 < self.conf < 1:
            raise ValueError(f"--confidence must be in (0, 1), got {self.conf!r}")
        if self.target_rate is not None and not 0 < self.target_rate < 1:
            raise ValueError(f"--target-rate must be in (0, 1), got {self.target_rate!r}")

    def to_dict(self) -> dict:
        """The stored form (a hunt's ``extra["flake"]``), read back by ``--resume``."""
        return {"repeat": self.repeat, "seeds": self.seeds, "hunt_seed": self.hunt_seed,
                "stop_after": self.stop_after, "max_minutes": self.max_minutes, "conf": self.conf,
                "target_rate": self.target_rate}

    @classmethod
    def from_dict(cls, data: dict) -> "HuntOptions":
        return cls(repeat=data["repeat"], seeds=data["seeds"], stop_after=data.get("stop_after"),
                   max_minutes=data.get("max_minutes"), conf=data.get("conf", 0.95),
                   target_rate=data.get("target_rate"), hunt_seed=data.get("hunt_seed", 0))


def fresh_seed(hunt_seed: int, case_id: str, iteration: int) -> int:
    """A seed per (hunt, case, iteration): different every iteration, the same on a replay."""
    digest = hashlib.sha256(f"{hunt_seed}\0{case_id}\0{iteration}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def plan(cases: list[Case], options: HuntOptions) -> list[Planned]:
    """Iteration-major: every case's iteration i before any case's i+1."""
    planned = []
    for i in range(options.repeat):
        for case in cases:
            if options.seeds == "fresh":
                planned.append(Planned(len(planned), case.with_seed(fresh_seed(options.hunt_seed, case.case_id, i)), i))
            else:
                planned.append(Planned(len(planned), case, i, bitwise=True))
    return planned


@dataclass(frozen=True)
class ResumedHunt:
    """What ``flake --resume RUN_ID`` continues: the stored plan, its results so far, what is missing."""

    run_id: str
    options: HuntOptions
    planned: list[Planned]              # the iterations with no result yet, in the hunt's order
    prior: list[Result]                 # the results of the hunt and of every resume of it
    devices: tuple[str, ...]
    run_options: ResumeOptions
    ref: dict | None                    # a hunt on a kernel-library ref: its provenance (name, sha, ...)
    ref_setup: dict | None              # and how it was prepared (``RefSetup.to_dict``)


def resumed_hunt(store: Store, run_id: str, flags: ResumeOptions) -> ResumedHunt:
    """The stored hunt ``run_id`` (the first run of it, when given a resume of it) and the iterations
    it still misses."""
    run = store.run(run_id)
    if run is None or run["kind"] != "flake" or "flake" not in run["extra"]:
        raise UsageError(f"--resume {run_id}: no flake hunt with that id in {store.path}")
    while run["resumed_from"] and store.run(run["resumed_from"]) is not None:   # a resume of it: the whole hunt
        run = store.run(run["resumed_from"])
    run_id = run["run_id"]
    options = HuntOptions.from_dict(run["extra"]["flake"])
    missing = resumed(store, run_id, flags)
    bitwise = options.seeds == "fixed"
    return ResumedHunt(run_id, options, [replace(p, bitwise=bitwise) for p in missing.planned],
                       store.results(run_id, include_resumes=True), missing.devices, missing.options,
                       run["extra"].get("ref"), run["extra"].get("ref_setup"))


class StopRules:
    """``should_run`` for ``Engine.run``: drop a case's iterations after K failures, all at a deadline."""

    def __init__(self, options: HuntOptions, now: float | None = None):
        self.options = options
        start = time.monotonic() if now is None else now
        self.deadline = start + 60.0 * options.max_minutes if options.max_minutes else None
        self.failures: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.started: Counter[str] = Counter()
        self.deadline_hit = False

    def record(self, result: Result) -> None:
        if result.outcome.failed:
            self.failures[result.case_id] += 1

    def should_run(self, p: Planned) -> bool:
        stop_after = self.options.stop_after
        if stop_after is not None and self.failures[p.case.case_id] >= stop_after:
            self.dropped[p.case.case_id] += 1
            return False
        # past the deadline, a case that has run once stops (one run each, even when start-up ate the time)
        if self.deadline is not None and time.monotonic() >= self.deadline and self.started[p.case.case_id]:
            self.deadline_hit = True
            self.dropped[p.case.case_id] += 1
            return False
        self.started[p.case.case_id] += 1
        return True
