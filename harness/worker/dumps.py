"""The kernel's side of the dump ABI, in the device worker (docs/intermediates.md).

A kernel that declares a ``dump`` parameter is called with a ``Collector``: ``dump(name,
tensor)`` checks the name and shape against the op's intermediates and compares the tensor with
its golden right away, keeping only the measurement (a 40-layer case never holds more than one
layer's tensor).  Any kernel may instead write files into ``$HARNESS_DUMP_DIR``
(``harness.intermediates.files``); they are read one at a time after the launch, through the
same checks.  Nothing a kernel dumps can raise into the kernel: a bad dump is a problem line.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from harness import packs
from harness.case import Case
from harness.goldens.cache import IntermediateGoldens
from harness.intermediates import files
from harness.worker.dumps_compare import Measurement, Row, first_bad, headline, measure, verdicts
from harness.intermediates.spec import (Intermediate, declared, intermediates, shape_of,
                                        tolerance_output)
from harness.worker.case_inputs import CaseInputs

MODES = ("off", "on-failure", "always")


def case_intermediates(case: Case, ci: CaseInputs) -> tuple[Intermediate, ...]:
    """The case's intermediates in dataflow order: a builtin op's (harness/intermediates/spec.py),
    or those a spec op's module lists in ``INTERMEDIATES``, compared with its first output's tolerance."""
    if case.spec is not None:
        return declared(case.spec.get("intermediates") or (), ci.op.outputs[0].name)
    return intermediates(ci.op.name, int(ci.args.get("num_layers", 0) or 0))


def rows_of(ci: CaseInputs) -> int:
    """The size of a pack op's ``rows`` symbol (``OpEntry.rows``); a spec op has none (B, if it has one)."""
    entry = packs.find(ci.op.name)
    return ci.sizes.get(entry.rows if entry else "B", 0)


class Collector:
    """The ``dump`` callable of one launch, and what its dumps came to."""

    def __init__(self, case: Case, ci: CaseInputs, golden: IntermediateGoldens, outputs: bool = True):
        """``outputs``: False offline (``harness dumps``), where no output was judged."""
        self.case, self.ci, self.golden, self.outputs = case, ci, golden, outputs
        self.items = case_intermediates(case, ci)
        self.by_name = {i.name: i for i in self.items}
        self.rows = rows_of(ci)
        # each intermediate is judged on the rows the output it is compared like is judged on: the
        # padding rows (slot < 0) are left out of out, next_hidden and the caches, not of query
        judged_on_valid = set(ci.op.slot_masked_outputs) | {c.name for c in ci.op.caches}
        self.row_masks = {i.name: ci.valid_rows if tolerance_output(ci.op.name, i) in judged_on_valid else None
                          for i in self.items}
        self.measured: dict[str, Measurement] = {}
        self.seen: set[str] = set()
        self.problems: list[str] = []        # what the ABI refused: unknown name, wrong shape, twice, ...
        self.refused: dict[str, str] = {}    # a known intermediate whose dump was refused -> why
        self.notes: list[str] = []           # not the kernel's fault (a golden that could not be read)
        if golden.problem:
            self.notes.append(golden.problem)

    # -- the callable the kernel gets ----------------------------------------------------
    def __call__(self, name: Any = None, tensor: Any = None, *args: Any, **kwargs: Any) -> None:
        try:
            self._take(name, tensor, args, kwargs)
        except Exception as exc:   # never into the kernel: the harness's own trouble is a note
            self.notes.append(f"dump({name!r}): could not be compared ({type(exc).__name__}: {exc})")

    def _take(self, name: Any, tensor: Any, args: tuple, kwargs: dict) -> None:
        if args or kwargs:
            self.problems.append(f"dump({name!r}, ...): called with extra arguments; the ABI is dump(name, tensor)")
            return
        if not isinstance(name, str) or name not in self.by_name:
            self.problems.append(f"dump({name!r}): unknown intermediate for {self.ci.op.name}; valid: {self.valid()}")
            return
        if name in self.seen:
            self.problems.append(f"intermediate {name} dumped twice")
            return
        self.seen.add(name)
        if not isinstance(tensor, torch.Tensor):
            self.refuse(name, f"dump({name!r}): got {type(tensor).__name__}, not a tensor")
            return
        item = self.by_name[name]
        want = self._shape(item)
        if not tensor.is_floating_point():
            self.refuse(name, f"intermediate {name}: dtype {str(tensor.dtype).removeprefix('torch.')}, "
                              f"not a float type")
            return
        reshaped = ""
        if want is not None and tuple(tensor.shape) != want:
            said = "its golden dumped" if item.declared else "the contract says"
            if tensor.numel() != _numel(want):
                self.refuse(name, f"intermediate {name}: shape {tuple(tensor.shape)}, {said} {want}")
                return
            # a dump tool writes rows flat ([B, Hq*D]): the same elements in row-major order
            reshaped = f"dumped as {tuple(tensor.shape)}, compared as {want}"
            tensor = tensor.reshape(want)
        golden = self.golden.get(name)
        if golden is None:
            self.notes.append(f"intermediate {name}: no golden to compare with")
            return
        tol = self.case.tolerance_for(tolerance_output(self.ci.op.name, item))
        with torch.no_grad():
            m = measure(item, tensor.detach(), golden[0], golden[1], atol=tol.atol,
                        rtol=tol.rtol, max_error_ratio=tol.max_error_ratio, rows=self.row_masks[name],
                        atol_rms=tol.atol_rms)
        if reshaped:
            m = dataclasses.replace(m, note="; ".join(x for x in (reshaped, m.note) if x))
        self.measured[name] = m

    def refuse(self, name: str, line: str) -> None:
        """A dump of a known intermediate the ABI refuses: a problem line, and the row says so."""
        self.problems.append(line)
        self.refused.setdefault(name, line)

    def _shape(self, item: Intermediate) -> tuple[int, ...] | None:
        """The shape ``item`` must have: the contract's, or for a spec op its golden's (None: no golden)."""
        return self.golden.shape(item.name) if item.declared else shape_of(item, self.ci.sizes, self.rows)

    def close(self) -> None:
        """Close the golden intermediates' file (the measurements stay)."""
        self.golden.close()

    def valid(self) -> str:
        layered = [i for i in self.items if i.layer is not None]
        if layered:         # an op that stacks layers: each layer's parts once, then the rest
            parts = ",".join(dict.fromkeys(i.base for i in layered))
            rest = "".join(f", {i.name}" for i in self.items if i.layer is None)
            return f"layers.{{0..{max(i.layer for i in layered)}}}.{{{parts}}}{rest}"
        return ", ".join(self.by_name)

    # -- files ---------------------------------------------------------------------------
    def read_folder(self, folder: Path) -> None:
        """Every dump file in ``folder``, through the same checks as ``dump``."""
        def cap(name: str) -> int:
            item = self.by_name.get(name)
            shape = None if item is None else self._shape(item)
            if shape is None:
                return 0
            n = 1
            for d in shape:
                n *= d
            return 8 * n

        for name, got in files.iterate(folder, cap):
            if isinstance(got, files.Problem):
                if name and name not in self.by_name:
                    self.problems.append(f"dump file {got.file}: unknown intermediate {name!r}; valid: {self.valid()}")
                elif name:
                    self.refuse(name, got.line())
                else:
                    self.problems.append(got.line())
                continue
            self(name, got)

    # -- the outcome -----------------------------------------------------------------------
    def rows_table(self) -> tuple[Row, ...]:
        return verdicts(self.items, self.measured, self.refused)

    def to_metrics(self) -> dict[str, Any]:
        rows = self.rows_table()
        bad = first_bad(rows)
        return {"first_bad_intermediate": bad.name if bad else None,
                "first_bad_layer": bad.layer if bad else None,
                "headline": headline(rows, self.outputs),
                "rows": [r.to_json() for r in rows],
                "dumped": len(self.measured), "problems": list(self.problems), "notes": list(self.notes)}


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def prime_pickling() -> None:
    """``torch.save`` caches ``__slotnames__`` on ``torch.Tensor`` the first time it pickles one;
    done here, before the kernel's window, a kernel that saves its dumps is not taken for one
    that changed torch (harness/worker/hygiene.py)."""
    import copyreg
    copyreg._slotnames(torch.Tensor)


_FOLDER: list[Path] = []      # this process's dump folder, made on first use, removed at exit


def _emptied(folder: Path) -> Path:
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            os.unlink(entry.path)
    return folder


@contextlib.contextmanager
def dump_folder() -> Iterator[Path]:
    """An empty ``$HARNESS_DUMP_DIR`` for one launch (the variable put back after).  One folder per
    process, emptied before and after each launch: making and removing a directory per case cost
    more than the dumps' comparison on a busy file system (bench/bench_intermediates.py)."""
    prime_pickling()
    if not _FOLDER or not _FOLDER[0].is_dir():
        _FOLDER[:] = [Path(tempfile.mkdtemp(prefix="harness-dumps-"))]
        atexit.register(shutil.rmtree, _FOLDER[0], True)
    folder = _emptied(_FOLDER[0])
    before = os.environ.get(files.ENV_VAR)
    os.environ[files.ENV_VAR] = str(folder)
    try:
        yield folder
    finally:
        if before is None:
            os.environ.pop(files.ENV_VAR, None)
        else:
            os.environ[files.ENV_VAR] = before
        try:
            _emptied(folder)
        except OSError:           # a kernel that removed or locked it: a fresh one next time
            _FOLDER.clear()
