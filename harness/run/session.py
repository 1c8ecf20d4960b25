"""One recorded run: plan → store row → engine → results → store, JSON and reports.

``run``, ``flake``, ``compare`` and ``bisect`` are loops over ``execute``: it
records the run and its planned cases in the store before anything runs,
writes each result the moment it exists (the store first), and whatever
happens (an interrupt, a harness bug) finishes the run row and writes the
requested files with every result computed so far.  SIGTERM interrupts a run as
Ctrl-C does (``terminated_as_interrupt``), and an interrupted run's stored
summary says ``interrupted``.  ``recording`` is that
lifecycle of a run row (``begin`` ... finished with its summary) for any code that
adds results itself (a ref whose build failed); ``resumed`` reads a stored run
back for ``run --resume``.
"""
from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from harness.case import Case
from harness.errors import UsageError
from harness.run.engine import Engine, Planned, RunOptions
from harness.run.options import ResumeOptions
from harness.outcomes import Result
from harness.provenance import run_provenance
from harness.document import build_document
from harness.document.summary import summarize
from harness.store import Store, planned_entries


@dataclass(frozen=True)
class Addendum:
    """What a command adds to a recorded run once its results are in."""

    document: dict[str, Any] = field(default_factory=dict)   # report-document keys (kind, flake, shard...)
    summary: dict[str, Any] = field(default_factory=dict)    # keys added to the stored run's summary


@dataclass
class Recorded:
    run_id: str
    results: list[Result]
    provenance: dict
    started: float
    devices: list[str]
    addendum: Addendum = field(default_factory=Addendum)
    warnings: list[str] = field(default_factory=list)       # what the workers noticed (a leaking kernel)

    @property
    def summary(self) -> dict:
        return summarize(self.results)


def document(recorded: Recorded, command: list[str] | None = None, **extra: Any) -> dict:
    """The report document (the ``--json`` format plus ``kind``, ``refs``, ``flake``...)."""
    warned = {"warnings": list(recorded.warnings)} if recorded.warnings else {}
    return build_document(recorded.results, started=recorded.started, devices=recorded.devices,
                          command=command or sys.argv, provenance=recorded.provenance,
                          run_id=recorded.run_id, **{**warned, **recorded.addendum.document, **extra})


def begin(store: Store, planned: Iterable[tuple[Case, int]], *, devices: list[str],
          kernel_paths: tuple[str, ...] = (), kind: str = "run", command: list[str] | None = None,
          run_id: str | None = None, parent_id: str | None = None, ref: str | None = None,
          ref_sha: str | None = None, resumed_from: str | None = None, extra: dict | None = None) -> Recorded:
    """Record a run and its planned ``(case, repeat)`` pairs before any of them runs (with ``run_id``
    given, idempotent: every pytest-xdist worker begins the run its controller named)."""
    run_info = run_provenance(kernel_paths)
    run_id = store.start_run(
        command=command or sys.argv, devices=devices, provenance={"run": run_info}, env=run_info["env"],
        cases=planned_entries(planned), kind=kind, run_id=run_id, parent_id=parent_id, ref=ref, ref_sha=ref_sha,
        resumed_from=resumed_from, extra=extra)
    return Recorded(run_id, [], {"run": run_info}, time.time(), devices)


@contextmanager
def recording(store: Store, planned: list[Planned], options: RunOptions, *, kind: str = "run",
              command: list[str] | None = None, parent_id: str | None = None, ref: str | None = None,
              ref_sha: str | None = None, resumed_from: str | None = None,
              extra: dict | None = None) -> Iterator[Recorded]:
    """One stored run: ``begin`` before the block, its summary after it, also when the block
    raises.  The block adds each result with ``store.add_result`` and to ``recorded.results``."""
    recorded = begin(store, [(p.case, p.repeat) for p in planned], devices=[str(d) for d in options.devices],
                     kernel_paths=options.worker.kernel_paths, kind=kind, command=command, parent_id=parent_id,
                     ref=ref, ref_sha=ref_sha, resumed_from=resumed_from, extra=extra)
    interrupted = False
    try:
        yield recorded
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        store.finish_run(recorded.run_id, {**recorded.summary, **recorded.addendum.summary,
                                           **({"interrupted": True} if interrupted else {})},
                         provenance=recorded.provenance)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread: what runs stops as after Ctrl-C (a front end may exit 143)."""


@contextmanager
def terminated_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI job cancelled, ``kill``) raises ``Terminated`` in the main thread, so the
    run stops its workers, writes its reports and is stored as interrupted, as after Ctrl-C; a
    second SIGTERM ends the process at once.  Only where the handler is the default one: a
    handler the caller installed (an outer block of this) is left alone."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Terminated(f"signal {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def execute(planned: list[Planned], options: RunOptions, store: Store, *, kind: str = "run",
            command: list[str] | None = None, parent_id: str | None = None, ref: str | None = None,
            ref_sha: str | None = None, resumed_from: str | None = None, extra: dict | None = None,
            on_start: Callable[[Planned, Any], None] | None = None,
            on_result: Callable[[Planned, Result], None] | None = None,
            should_run: Callable[[Planned], bool] | None = None,
            publish: Callable[[dict], Any] | None = None, addendum: Callable[[Recorded], Addendum] | None = None,
            engine: Engine | None = None) -> Recorded:
    """Run ``planned`` as one stored run and return it (also when interrupted: see module doc)."""
    with terminated_as_interrupt(), recording(
            store, planned, options, kind=kind, command=command, parent_id=parent_id, ref=ref, ref_sha=ref_sha,
            resumed_from=resumed_from, extra=extra) as recorded:

        def record(p: Planned, r: Result) -> Result:
            if ref is not None:
                r = replace(r, ref=ref)
            store.add_result(recorded.run_id, r)       # first: committed before anything else can fail
            recorded.results.append(r)
            if on_result:
                on_result(p, r)
            return r

        own = engine is None
        engine = engine or Engine(options)
        try:
            recorded.results = engine.run(planned, on_start=on_start, on_result=record, should_run=should_run)
        finally:
            # Whatever happened, what was computed is written.
            recorded.provenance = {**recorded.provenance,
                                   "devices": {str(w.device): w.info for w in engine.workers}}
            if own:
                engine.close()       # first: what its run-end sweep killed is among the warnings
            recorded.warnings = [*(text for w in engine.workers for text in w.warnings), *engine.warnings]
            if addendum:
                recorded.addendum = addendum(recorded)
            if publish:
                publish(document(recorded, command))
    return recorded


@dataclass(frozen=True)
class Resumed:
    """What ``run --resume RUN_ID`` reruns: the planned cases without a result, and how."""

    run_id: str
    planned: list[Planned]
    devices: tuple[str, ...]
    options: ResumeOptions
    shard: dict | None              # the resumed run's shard (``shard_info``), if it was one


def resumed(store: Store, run_id: str, flags: ResumeOptions) -> Resumed:
    """The missing part of stored run ``run_id``; its recorded options win over ``flags``."""
    old = store.run(run_id)
    if old is None:
        raise UsageError(f"--resume {run_id}: no such run in {store.path}")
    todo = store.missing(run_id)
    if any(e["case"] is None for e in todo):
        raise UsageError(f"--resume {run_id}: the run did not record its case definitions")
    return Resumed(run_id, [Planned(i, Case.from_wire(e["case"]), e["repeat"]) for i, e in enumerate(todo)],
                   tuple(old["devices"]), ResumeOptions.from_dict(old["extra"].get("options", {}), flags),
                   old["extra"].get("shard"))
