"""Repeats of a case reuse its inputs (runs in the device worker; docs/flake.md, "Repeats reuse their inputs").

A fixed-seed flake hunt or a compare sends the same case to a worker again and again.
Instead of drawing its inputs anew each time, the worker keeps what a repeat made (the
generated inputs, their digest, the goldens, and the guarded buffers the kernel wrote
into) under the case's input spec and golden, and the
next request with the same key restores the buffers in place (``launch.Buffers.restore``:
the generated caches are the pristine copy on the device; poison and guard bands are
refilled) instead of generating.  Restored buffers hold the bytes fresh ones would.

A state is kept only when the kernel left it as it was given: no input written (the
input guard), no guard band touched (a write outside its buffers may have landed
anywhere), no failure and nothing the hygiene check wants a fresh worker for.  A state
is taken out while its repeat runs, so one that fails is simply not put back.  States of
several cases are kept (a hunt runs its cases iteration-major) while the device can
still run the biggest of them once more (``memory_plan.keep_fits``); the oldest go first,
and a case without a kept state is generated on the device as a first repeat is.
``HARNESS_REUSE_INPUTS=0`` turns reuse off.

A case sent once (a plain run) is never asked again, yet its state would be kept like a
hunt's: every kept state is a few dozen objects the worker's full collection walks twice a
case (``hygiene.Watch``), so keeping every state of a 10,000-case run made each case slower
than the last.  So a state whose key was never asked before is kept on probation: at most
``PROBATION`` of them, the oldest dropped first; a key asked a second time is kept as memory
allows.  A hunt of up to ``PROBATION`` cases reuses from its second iteration, a larger one
from its third.
"""
from __future__ import annotations

import json
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Mapping

import torch

from harness.case import Case
from harness.devices import Memory
from harness.memory_plan import MemoryPlan, keep_fits
from harness.worker.input_digest import InputsDigest
from harness.worker.inputs import CaseInputs, input_spec
from harness.worker.launch import Buffers, Launched
from harness.worker.protocol import GoldenRef

ENV = "HARNESS_REUSE_INPUTS"
PROBATION = 16             # states kept whose key was asked only once
SEEN_KEYS = 100_000        # keys remembered as asked (strings: nothing the collector walks)


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Reuse is on unless ``HARNESS_REUSE_INPUTS`` is ``0``."""
    return environ.get(ENV, "1").strip() != "0"


@dataclass
class Kept:
    """One case's inputs as its first repeat made them, and the buffers its kernel wrote."""

    ci: CaseInputs                        # on the case's device; its caches are the pristine copy
    generated: InputsDigest
    goldens: dict[str, torch.Tensor]
    hit: bool
    buffers: Buffers
    plan: MemoryPlan


def key(case: Case, golden: GoldenRef | None, golden_dtype: str) -> str:
    """The inputs (the spec holds the seed and the generator's version) and the goldens they meet."""
    ref = [golden.path, golden.key] if golden else None
    return json.dumps([input_spec(case), ref, golden_dtype], sort_keys=True, default=str)


class Repeats:
    """The kept states of one worker, oldest first; ``memory`` measures the device and the host now."""

    def __init__(self, kind: str, memory: Callable[[], tuple[Memory | None, Memory | None]],
                 on: bool = True) -> None:
        self.kind, self.memory, self.on = kind, memory, on
        self._kept: OrderedDict[str, Kept] = OrderedDict()
        self._seen: OrderedDict[str, None] = OrderedDict()       # keys asked at least once, oldest first
        self._probation: OrderedDict[str, None] = OrderedDict()  # kept keys asked only once

    def take(self, wanted: str) -> Kept | None:
        """The state kept under ``wanted``, no longer kept: its repeat puts it back when it ends well."""
        if not self.on:
            return None
        self._probation.pop(wanted, None)
        return self._kept.pop(wanted, None)

    def make_room(self, plan: MemoryPlan) -> None:
        """Drop the oldest states until a case of ``plan`` fits beside the rest (before generating it)."""
        self._fit([plan])

    def keep(self, wanted: str, state: Kept, launched: Launched, replace_worker: str) -> None:
        """Keep ``state`` if the kernel left it as given (see the module docstring) and memory allows."""
        if not self.on:
            return
        asked_before = wanted in self._seen
        self._seen[wanted] = None
        self._seen.move_to_end(wanted)
        while len(self._seen) > SEEN_KEYS:
            self._seen.popitem(last=False)
        if launched.inputs_written or not launched.guards_intact or replace_worker:
            return
        self._kept[wanted] = state
        if not asked_before:
            self._probation[wanted] = None
            while len(self._probation) > PROBATION:
                self._kept.pop(self._probation.popitem(last=False)[0], None)
        self._fit([])

    @property
    def nbytes(self) -> int:
        """Device bytes the kept states hold, by the memory plan."""
        return sum(s.plan.kept_bytes(self.kind)[0] for s in self._kept.values())

    def _fit(self, extra: list[MemoryPlan]) -> None:
        if not self._kept:
            return
        on_device, on_host = self.memory()
        # measured now, the memory excludes what every kept state occupies: keeping fewer frees it
        plans = [s.plan for s in self._kept.values()]
        held_bytes = tuple(sum(p.kept_bytes(self.kind)[side] for p in plans) for side in (0, 1))
        while self._kept and not keep_fits([s.plan for s in self._kept.values()] + extra, self.kind,
                                           on_device, on_host, held_bytes):
            self._probation.pop(self._kept.popitem(last=False)[0], None)
