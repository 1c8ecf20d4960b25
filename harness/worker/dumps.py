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
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from harness.case import Case
from harness.goldens.cache import IntermediateGoldens
from harness.intermediates import files
from harness.intermediates.compare import Measurement, Row, first_bad, headline, measure, verdicts
from harness.intermediates.spec import Intermediate, LAYER_PARTS, intermediates, shape_of, tolerance_output
from harness.worker.inputs import CaseInputs

MODES = ("off", "on-failure", "always")


def case_intermediates(ci: CaseInputs) -> tuple[Intermediate, ...]:
    return intermediates(ci.op.name, int(ci.args.get("num_layers", 0) or 0))


def rows_of(ci: CaseInputs) -> int:
    return ci.sizes["T"] if ci.op.name == "prefill_attention" else ci.sizes["B"]


class Collector:
    """The ``dump`` callable of one launch, and what its dumps came to."""

    def __init__(self, case: Case, ci: CaseInputs, golden: IntermediateGoldens):
        self.case, self.ci, self.golden = case, ci, golden
        self.items = case_intermediates(ci)
        self.by_name = {i.name: i for i in self.items}
        self.rows = rows_of(ci)
        # rows whose slot < 0 are not compared where the op's outputs ignore them (padding rows)
        self.row_mask = ci.valid_rows if ci.op.slot_masked_outputs else None
        self.measured: dict[str, Measurement] = {}
        self.seen: set[str] = set()
        self.problems: list[str] = []        # CONTRACT lines: unknown name, wrong shape, twice, ...
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
            self.problems.append(f"dump({name!r}): got {type(tensor).__name__}, not a tensor")
            return
        item = self.by_name[name]
        want = shape_of(item, self.ci.sizes, self.rows)
        if not tensor.is_floating_point():
            self.problems.append(f"intermediate {name}: dtype {str(tensor.dtype).removeprefix('torch.')}, "
                                 f"not a float type")
            return
        if tuple(tensor.shape) != want:
            self.problems.append(f"intermediate {name}: shape {tuple(tensor.shape)}, the contract says {want}")
            return
        golden = self.golden.get(name)
        if golden is None:
            self.notes.append(f"intermediate {name}: no golden to compare with")
            return
        tol = self.case.tolerance_for(tolerance_output(self.ci.op.name, item))
        with torch.no_grad():
            self.measured[name] = measure(item, tensor.detach(), golden[0], golden[1], atol=tol.atol,
                                          rtol=tol.rtol, max_error_ratio=tol.max_error_ratio, rows=self.row_mask,
                                          atol_rms=tol.atol_rms)

    def close(self) -> None:
        """Close the golden intermediates' file (the measurements stay)."""
        self.golden.close()

    def valid(self) -> str:
        if self.ci.op.name == "decode_layers":
            layers = len(self.items) // len(LAYER_PARTS)
            return f"layers.{{0..{layers - 1}}}.{{{','.join(LAYER_PARTS)}}}, final_norm"
        return ", ".join(self.by_name)

    # -- files ---------------------------------------------------------------------------
    def read_folder(self, folder: Path) -> None:
        """Every dump file in ``folder``, through the same checks as ``dump``."""
        def cap(name: str) -> int:
            item = self.by_name.get(name)
            if item is None:
                return 0
            n = 1
            for d in shape_of(item, self.ci.sizes, self.rows):
                n *= d
            return 8 * n

        for name, got in files.iterate(folder, cap):
            if isinstance(got, files.Problem):
                if name and name not in self.by_name:
                    self.problems.append(f"dump file {got.file}: unknown intermediate {name!r}; valid: {self.valid()}")
                else:
                    self.problems.append(got.line())
                continue
            self(name, got)

    # -- the outcome -----------------------------------------------------------------------
    def rows_table(self) -> tuple[Row, ...]:
        return verdicts(self.items, self.measured)

    def to_metrics(self) -> dict[str, Any]:
        rows = self.rows_table()
        bad = first_bad(rows)
        return {"first_bad_intermediate": bad.name if bad else None,
                "first_bad_layer": bad.layer if bad else None,
                "headline": headline(rows),
                "rows": [r.to_json() for r in rows],
                "dumped": len(self.measured), "problems": list(self.problems), "notes": list(self.notes)}


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
