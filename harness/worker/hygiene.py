"""What a kernel leaves behind in the warm worker, found and undone before the next case.

Cases share one worker process, so whatever a kernel changes in it outlives its case: an
``os.environ`` entry, the working directory, torch's default dtype or flags, a patched
torch function, a thread still printing, a child process still running.  The kernel's
window (its import and its launch) is bracketed by two snapshots:

- the environment and the working directory are put back after every case (no finding:
  a kernel may set a variable for itself);
- torch's process state (default dtype and device, grad and inference mode,
  deterministic, anomaly, TF32 and matmul-precision flags, thread counts), the identity
  of every existing name in the torch namespaces of ``NAMESPACES``, and every entry
  already in ``sys.modules``: a change is a ``CONTRACT`` finding ("the kernel changed
  process state: torch default dtype float32 → float64"), the state is put back for the
  case's own checks, and the worker is replaced before the next case;
- the import machinery (``imports``), the standard library modules the harness uses, resource
  limits, descriptors, CPU affinity and nice value, files left in /dev/shm (``os_state``):
  findings too (issue 37);
- a full garbage collection opens and closes the window, so a finalizer of an object the
  kernel dropped runs while the kernel is still the one blamed;
- a change whose new object is defined in a module another kernel's window imported (a callback
  that kernel left, set off during this launch) is not this case's: ``Deferred`` with that
  kernel's last case, and the case runs again in a fresh worker (``_traced``);
- threads (Python and native) and child processes started in the window and still
  running after it: a ``CONTRACT`` finding, and the worker is replaced (its whole process
  group is killed), so nothing they print or hold reaches another case.

What is not flagged: a module imported for the first time (lazy imports are how torch
and its libraries work; a module only matters when it replaces something the next case
would use, and that is the namespace and ``sys.modules`` check), a new name added to a
torch module (lazy submodules do that), torch rebinding its own names (``_torch_own``),
threads and processes that ended before the launch returned.  torch's own pools (intra-op threads, a device runtime's threads) are
started by ``warm_up`` when the worker starts, so a correct kernel's first launch does
not start them.  docs/architecture.md ("Trust model") says what this defends and what not.
"""
from __future__ import annotations

import gc
import itertools
import json
import math
import operator
import os
import pickle
import shutil
import struct
import tempfile
import traceback
import sys
import threading
import time
import types
import functools
import hashlib
import io
from dataclasses import dataclass, replace
from typing import Any

import torch

from harness.outcomes import CHECK_PRECEDENCE, Outcome
from harness.processes import children, kill_tree, reap
from harness.worker import checks as checks_module
from harness.worker import hooks
from harness.worker import imports
from harness.worker import os_state
from harness.worker import input_guard as input_guard_module
from harness.worker import launch as launch_module
from harness.worker.kernel_loader import KernelLoader
from harness.worker import ratio_allclose as ratio_allclose_module
from harness.worker.findings import Finding, Findings

# The namespaces whose existing names a kernel may not rebind.  Classes are checked for
# added names too (``torch.Tensor.rsqrt = f`` adds a name that shadows an inherited one).
NAMESPACES: tuple[tuple[str, Any], ...] = (
    ("torch", torch), ("torch.nn.functional", torch.nn.functional), ("torch.linalg", torch.linalg),
    ("torch.special", torch.special), ("torch.fft", torch.fft), ("torch.Tensor", torch.Tensor),
    ("torch._C.TensorBase", torch._C.TensorBase),
    # the harness's own judges: a careless patch of the comparison would pass every mutant
    ("harness.worker.ratio_allclose", ratio_allclose_module), ("harness.worker.checks", checks_module),
    ("harness.worker.launch", launch_module), ("harness.worker.input_guard", input_guard_module),
    # and what imports each case's kernel: a rebound load() serves a later mutant control the reference
    ("harness.worker.kernel_loader.KernelLoader", KernelLoader),
    # the standard library the harness's own code uses, checked like builtins (issue 37): a rebound
    # math.isnan fails every later case's checks.  Only their functions, classes, modules and numbers
    # count: module-level data (tempfile.tempdir) is a cache the library fills itself.
    *((module.__name__ if module is not os.path else "os.path", module) for module in (
        math, os, os.path, struct, json, io, time, tempfile, shutil, pickle, functools, itertools, operator,
        traceback, hashlib)),
    *((("numpy", sys.modules["numpy"]),) if "numpy" in sys.modules else ()),
)
_BY_NAME = dict(NAMESPACES)
_STDLIB = frozenset(name for name, obj in NAMESPACES if not name.startswith(("torch", "harness")))


def _watched_value(value: Any) -> bool:
    """In a standard-library namespace: the names a rebinding of which changes what code calling
    them computes (functions, classes, modules, constants), not the module's data caches."""
    return callable(value) or isinstance(value, (types.ModuleType, int, float))


@dataclass(frozen=True)
class TorchState:
    """torch's process-wide settings that a later case's math or speed depends on."""

    values: tuple[tuple[str, Any], ...]      # (name, value), in _TORCH_STATE order


def _default_device() -> Any:
    return torch.get_default_device() if hasattr(torch, "get_default_device") else None


def _set_default_device(device: Any) -> None:
    if hasattr(torch, "set_default_device"):
        torch.set_default_device(None if device == torch.device("cpu") else device)


# name -> (read, restore); the name is what a finding says.
_TORCH_STATE: dict[str, tuple[Any, Any]] = {
    "default dtype": (torch.get_default_dtype, torch.set_default_dtype),
    "default device": (_default_device, _set_default_device),
    "grad mode": (torch.is_grad_enabled, torch.set_grad_enabled),
    "inference mode": (torch.is_inference_mode_enabled, None),     # a context manager: cannot be left on
    "deterministic algorithms": (
        lambda: (torch.are_deterministic_algorithms_enabled(),
                 torch.is_deterministic_algorithms_warn_only_enabled()),
        lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1])),
    "anomaly detection": (torch.is_anomaly_enabled, torch.set_anomaly_enabled),
    "cuDNN benchmark": (lambda: torch.backends.cudnn.benchmark,
                        lambda v: setattr(torch.backends.cudnn, "benchmark", v)),
    "cuDNN deterministic": (lambda: torch.backends.cudnn.deterministic,
                            lambda v: setattr(torch.backends.cudnn, "deterministic", v)),
    "intra-op threads": (torch.get_num_threads, torch.set_num_threads),
}


def _setting(path: str) -> tuple[Any, Any]:
    """(read, restore) of the attribute at ``path`` below ``torch.backends``."""
    owner_path, _, attr = path.rpartition(".")

    def owner() -> Any:
        obj = torch.backends
        for part in filter(None, owner_path.split(".")):
            obj = getattr(obj, part)
        return obj
    return (lambda: getattr(owner(), attr)), (lambda v: setattr(owner(), attr, v))


# TF32: torch >= 2.9 has the fp32_precision API, and reading a legacy flag (allow_tf32,
# get_float32_matmul_precision) after a kernel set the new one raises "mix of the legacy and new
# APIs", so where it exists only the new one is read (a legacy setter shows there too).  The generic
# setting comes first: putting it back resets the specific ones that were not set explicitly.
_FP32_PRECISION = ("fp32_precision", "cuda.matmul.fp32_precision", "cudnn.fp32_precision",
                   "cudnn.conv.fp32_precision", "cudnn.rnn.fp32_precision", "mkldnn.fp32_precision",
                   "mkldnn.matmul.fp32_precision", "mkldnn.conv.fp32_precision", "mkldnn.rnn.fp32_precision")
if hasattr(torch.backends, "fp32_precision"):
    for _path in _FP32_PRECISION:
        try:
            _setting(_path)[0]()
        except AttributeError:          # a backend this torch does not have
            continue
        _TORCH_STATE[f"backends.{_path}"] = _setting(_path)
else:
    _TORCH_STATE.update({
        "TF32 matmul": (lambda: torch.backends.cuda.matmul.allow_tf32,
                        lambda v: setattr(torch.backends.cuda.matmul, "allow_tf32", v)),
        "TF32 cuDNN": (lambda: torch.backends.cudnn.allow_tf32,
                       lambda v: setattr(torch.backends.cudnn, "allow_tf32", v)),
        "float32 matmul precision": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
    })


def torch_state() -> TorchState:
    return TorchState(tuple((name, read()) for name, (read, _) in _TORCH_STATE.items()))


@dataclass(frozen=True)
class Snapshot:
    """The worker's process state at one moment (cheap: dict copies and a few /proc reads)."""

    environ: dict[Any, Any]              # os.environ as it stores it (``_environ``): compare, then ``_decoded``
    cwd: str
    torch: TorchState
    namespaces: tuple[tuple[str, dict[str, Any]], ...]
    modules: dict[str, Any]
    hooks: hooks.Hooks                   # autocast, modes, library, builtins, signals, timers, gc, audit, trace
    imports: imports.ImportState         # sys.meta_path, sys.path_hooks, sys.path_importer_cache
    os: os_state.OsState                 # resource limits, descriptors, affinity, nice, /dev/shm
    threads: frozenset[int]              # Python threads' idents
    native_threads: frozenset[int]       # every thread of the process (tids), where /proc has them
    children: frozenset[int]             # running child processes (pids), where /proc has them


def _tasks() -> list[str]:
    try:
        return os.listdir("/proc/self/task")
    except OSError:                       # no /proc (macOS): native threads and children are not seen
        return []


def _process_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:80] or "?"
    except OSError:
        return "?"


def _listed_children(tasks: list[str]) -> bool:
    """Whether any thread of this process lists a child in /proc (read raw: one open and read each,
    no text decoding); most windows have none, and ``children`` then need not look further."""
    for tid in tasks:
        try:
            fd = os.open(f"/proc/self/task/{tid}/children", os.O_RDONLY)
        except OSError:
            continue
        try:
            if os.read(fd, 1):
                return True
        except OSError:
            pass
        finally:
            os.close(fd)
    return False


def _running() -> dict[str, frozenset[int]]:
    """The threads and child processes running now (``Snapshot``'s last three fields)."""
    tasks = _tasks()
    kids = children(os.getpid(), tasks) if _listed_children(tasks) else ()
    return dict(threads=frozenset(t.ident for t in threading.enumerate() if t.ident is not None),
                native_threads=frozenset(int(t) for t in tasks), children=frozenset(kids))


def _environ() -> dict[Any, Any]:
    """``os.environ`` as it stores it (encoded keys and values: a copy in C, not a decode per variable);
    a plain copy where it is not the standard library's mapping."""
    data = getattr(os.environ, "_data", None)
    return dict(data) if isinstance(data, dict) else dict(os.environ)


def _decoded(environ: dict[Any, Any]) -> dict[str, str]:
    """``_environ``'s reading as str -> str."""
    key, value = getattr(os.environ, "decodekey", None), getattr(os.environ, "decodevalue", None)
    if key is None or value is None or not all(isinstance(k, bytes) for k in environ):
        return {str(k): str(v) for k, v in environ.items()}
    return {key(k): value(v) for k, v in environ.items()}


def snapshot() -> Snapshot:
    return Snapshot(
        environ=_environ(), cwd=os.getcwd(), torch=torch_state(),
        namespaces=tuple((name, _copy(name, vars(obj))) for name, obj in NAMESPACES),
        modules=_copy("sys.modules", sys.modules), hooks=hooks.read(), imports=imports.read(), os=os_state.read(),
        **_running(),
    )


# The last copy made of each watched dict (``_copy``), shared by later snapshots while it is unchanged.
_copies: dict[str, dict[str, Any]] = {}


def _copy(slot: str, live: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``live``: the last one made for ``slot`` when ``live`` still equals it (one comparison
    in C, each value by identity first), so that snapshots of an unchanged worker share their dicts and
    comparing two of them is an identity test (``_kept``).  Copies are never written to."""
    last = _copies.get(slot)
    try:
        if last is not None and len(last) == len(live) and last == live:
            return last
    except Exception:        # a value whose == raises: copied, and compared name by name later
        pass
    _copies[slot] = copy = dict(live)
    return copy


# A thread that was joined, or a child that was waited for, can still be listed for a moment
# (join returns before the OS thread has exited): what looks left over is looked at again.
_LEFTOVER_GRACE_S = 0.1


def _short(value: Any) -> str:
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    return str(value)


@dataclass(frozen=True)
class Disturbance:
    """What a kernel's window left behind: findings (the worker must go) and what was put back."""

    findings: tuple[str, ...] = ()       # one line each: "torch default dtype float32 → float64"
    restored: tuple[str, ...] = ()       # environment variables and the cwd, put back (no finding)
    warnings: tuple[str, ...] = ()       # the same, said to the user on the case's result (``put_back_warnings``)
    # (kernel, change) for each change made by code another kernel's window brought in (``_traced``)
    traced: tuple[tuple[str, str], ...] = ()

    def metrics(self) -> dict[str, Any]:
        """The case's ``metrics["hygiene"]``, only when there is something to say."""
        if not (self.findings or self.restored):
            return {}
        return {"hygiene": {"findings": list(self.findings), "restored": list(self.restored)}}

    @property
    def replace_reason(self) -> str:
        """Why the worker must be replaced before the next case; "" when it need not."""
        return "; ".join(self.findings)


def _kept(old: dict[str, Any], new: dict[str, Any], *, closed: bool = False) -> bool:
    """Every name of ``old`` still bound to the same object in ``new``; ``closed``: and no name
    added.  Compared in C, with no copy: two dicts of one length as a whole (each value by identity
    first), a longer ``new`` (names added since: a lazy import) as a superset of ``old``'s items.
    A value that is not the same object fails here, and ``_rebound`` then names it by identity."""
    if old is new:
        return True
    if len(new) < len(old) or (closed and len(new) != len(old)):
        return False
    key = (id(old), id(new), closed)
    if key in _kept_pairs:
        return True
    try:
        kept = old == new if len(new) == len(old) else old.items() <= new.items()
    except Exception:        # a value whose == raises (a tensor bound in place of a function)
        return False
    if kept:
        _remember(_kept_pairs, key, (old, new))
    return bool(kept)


# Pairs of snapshot dicts (never written to) found kept, and sys.modules pairs found with no impostor,
# with the dicts themselves (so their ids are not reused): the drift check compares the worker's
# pristine snapshot with each case's, which share their dicts while nothing changes (``_copy``).
_kept_pairs: dict[tuple[int, int, bool], tuple[Any, Any]] = {}
_clean_pairs: dict[tuple[int, int], tuple[Any, Any]] = {}
_MAX_PAIRS = 512


def _remember(pairs: dict, key: tuple, value: tuple) -> None:
    if len(pairs) >= _MAX_PAIRS:
        pairs.clear()
    pairs[key] = value


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _torch_own(obj: Any) -> bool:
    """Whether ``obj`` is defined in torch's own files: torch rebinds some of its names itself
    on a lazy import (``torch._dynamo`` wraps ``torch.manual_seed``), and ``set_default_dtype``
    rebinds ``torch.Storage``.  A function is placed by its code (a ``functools.wraps``
    wrapper keeps its own), anything else by its module's file."""
    code = getattr(obj, "__code__", None) or getattr(getattr(obj, "__func__", None), "__code__", None)
    if code is not None:
        return code.co_filename.startswith(_TORCH_DIR)
    module = obj if isinstance(obj, types.ModuleType) else sys.modules.get(getattr(obj, "__module__", None) or "")
    return (getattr(module, "__file__", None) or "").startswith(_TORCH_DIR)


def _rebound(old: dict[str, Any], new: dict[str, Any], closed: bool, stdlib: bool = False) -> list[tuple[str, str]]:
    """(name, "replaced" | "removed" | "added") for each name whose binding changed, torch's own
    rebindings (``_torch_own``) left out; ``stdlib``: only names ``_watched_value`` keeps."""
    if _kept(old, new, closed=closed):
        return []
    out = [(name, "removed" if name not in new else "replaced") for name, obj in old.items()
           if new.get(name, _GONE) is not obj and not (name in new and _torch_own(new[name]))
           and (not stdlib or _watched_value(obj))]
    if closed:
        out += [(name, "added") for name in new.keys() - old.keys()
                if name not in _STDLIB_CACHES and not _torch_own(new[name])]
    return out


# Names the standard library caches on a class the first time it needs them: copyreg sets
# ``__slotnames__`` when an instance is first copied or pickled (a ``copy.deepcopy`` of a tensor,
# by a kernel or by the harness's own hints).  Not a kernel's change of what later cases run.
_STDLIB_CACHES = frozenset({"__slotnames__"})


_GONE = object()


def _added(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Names of ``new`` not in ``old`` (a module imported since); cheap when ``old`` is a prefix."""
    n = len(old)
    if len(new) == n and list(old) == list(new):
        return []
    tail = list(itertools.islice(new, n, None))
    if list(itertools.islice(new, n)) == list(old):
        return tail
    return [name for name in new if name not in old]


def _modules_kept(before: Snapshot, after: Snapshot) -> bool:
    """``sys.modules`` unchanged (one length, every entry the same object): the common case, one C
    comparison, and nothing replaced, removed or added to look at."""
    return len(before.modules) == len(after.modules) and _kept(before.modules, after.modules)


def _impostors(before: Snapshot, after: Snapshot) -> list[tuple[str, str]]:
    if _modules_kept(before, after) or (id(before.modules), id(after.modules)) in _clean_pairs:
        return []
    found = imports.added_modules(_added(before.modules, after.modules), after.modules, before.imports)
    if not found:          # each added module judged genuine once, for good (``imports._judged``)
        _remember(_clean_pairs, (id(before.modules), id(after.modules)), (before.modules, after.modules))
    return found


def state_changes(before: Snapshot, after: Snapshot) -> list[str]:
    """torch's settings, rebound names in the watched namespaces, replaced or removed modules, added
    modules that are not what the import system would load, the import machinery, the hooks, the
    resource limits, CPU affinity and nice value."""
    out = [f"torch {name} {_short(a)} → {_short(b)}"
           for (name, a), (_, b) in zip(before.torch.values, after.torch.values) if a != b]
    for (ns, old), (_, new) in zip(before.namespaces, after.namespaces):
        out += [f"{ns}.{name} {how}"
                for name, how in _rebound(old, new, isinstance(_BY_NAME[ns], type), ns in _STDLIB)]
    if not _modules_kept(before, after):
        out += [f"sys.modules[{name!r}] {how}" for name, how in _rebound(before.modules, after.modules, False)]
        out += [why for _, why in _impostors(before, after)]
    out += imports.changes(before.imports, after.imports)
    return out + hooks.changes(before.hooks, after.hooks) + os_state.changes(before.os, after.os)


def leftovers(before: Snapshot, after: Snapshot) -> list[str]:
    """Threads and child processes started in the window and still running after it."""
    out = []
    python = {t.ident: t for t in threading.enumerate()}
    new = [python[i] for i in after.threads - before.threads if i in python and python[i].is_alive()]
    if new:
        out.append(f"{len(new)} thread(s) still running: " + ", ".join(sorted(t.name for t in new)))
    known = {t.native_id for t in python.values()}
    native = sorted(after.native_threads - before.native_threads - known)
    if native:
        out.append(f"{len(native)} native thread(s) still running: tid " + ", ".join(map(str, native)))
    procs = sorted(after.children - before.children)
    if procs:
        out.append(f"{len(procs)} child process(es) still running: "
                   + ", ".join(f"pid {p} ({_process_name(p)})" for p in procs))
    return out


def restore(before: Snapshot, after: Snapshot, state_changed: bool = True) -> list[str]:
    """Put the environment, the cwd, torch's settings, rebound names and modules back as
    ``before`` had them (the last three only with ``state_changed``, which ``state_changes``
    decides); returns the environment variables and cwd it put back."""
    put_back = []
    if after.environ != before.environ:
        old, new = _decoded(before.environ), _decoded(after.environ)
        changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        os.environ.clear()
        os.environ.update(old)
        put_back += [f"environment variable {k}" for k in changed]
    if after.cwd != before.cwd:
        os.chdir(before.cwd)
        put_back.append(f"working directory {after.cwd}")
    if not state_changed:
        return put_back
    for (name, old), (_, new) in zip(before.torch.values, after.torch.values):
        setter = _TORCH_STATE[name][1]
        if old != new and setter is not None:
            setter(old)
    # a setting put back can move another (the generic fp32_precision resets the specific ones)
    for (name, old), now in zip(before.torch.values, torch_state().values):
        setter = _TORCH_STATE[name][1]
        if old != now[1] and setter is not None:
            setter(old)
    for (ns, old), (_, new) in zip(before.namespaces, after.namespaces):
        target = _BY_NAME[ns]
        for name, how in _rebound(old, new, isinstance(target, type), ns in _STDLIB):
            if how == "added":
                _delete(target, name)
            else:
                _set(target, name, old[name])
    for name, _ in _rebound(before.modules, after.modules, False):
        sys.modules[name] = before.modules[name]
    for name, _ in _impostors(before, after):
        sys.modules.pop(name, None)
    imports.restore(before.imports, after.imports)
    hooks.restore(before.hooks, after.hooks)
    os_state.restore(before.os, after.os)
    return put_back


def _set(target: Any, name: str, value: Any) -> None:
    try:
        setattr(target, name, value)
    except (AttributeError, TypeError):     # a read-only slot of a C type: it cannot have changed either
        pass


def _delete(target: Any, name: str) -> None:
    try:
        delattr(target, name)
    except (AttributeError, TypeError):
        pass


def settle(before: Snapshot, kernel: str | None = None) -> Disturbance:
    """After the kernel's window: what it left behind, with everything that can be put back put back.
    ``kernel`` (the case's, ``Watch``): the modules first imported in the window are noted as its, and
    a change made by code of a module another kernel's window imported is in ``traced``."""
    after = snapshot()
    state = state_changes(before, after)
    traced: tuple[tuple[str, str], ...] = ()
    if kernel is not None:
        traced = tuple(_traced(before, after, kernel)) if state else ()
        if not _modules_kept(before, after):
            for name in _added(before.modules, after.modules):
                _imported_by.setdefault(name, kernel)
    findings = ([f"the kernel changed process state: {'; '.join(state)}"] if state else [])
    findings += [f"the kernel left {what}" for what in os_state.window_changes(before.os, after.os)]
    left = leftovers(before, after)
    deadline = time.monotonic() + _LEFTOVER_GRACE_S
    while left and time.monotonic() < deadline:
        time.sleep(0.005)
        left = leftovers(before, replace(after, **_running()))
    findings += [f"the kernel left {what}" for what in left]
    _end_processes(before)
    return Disturbance(tuple(findings), tuple(restore(before, after, bool(state))),
                       put_back_warnings(before, after), traced)


def put_back_warnings(before: Snapshot, after: Snapshot) -> tuple[str, ...]:
    """One line per kind of change the worker undid after the case (no finding: a kernel may
    set a variable for itself), because it matters to the cases after it: a kernel that sets
    a variable at import sees it in its first case only; the kernel is imported once per
    worker, so every later case in that worker runs without it."""
    out = []
    old, new = (_decoded(before.environ), _decoded(after.environ)) if before.environ != after.environ else ({}, {})
    keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    if keys:
        how = {k: "set" if k not in old else "removed" if k not in new else "changed"
               for k in keys}
        listed = ", ".join(f"{k} ({how[k]})" for k in keys[:_MAX_NAMED]) + \
            (f", and {len(keys) - _MAX_NAMED} more" if len(keys) > _MAX_NAMED else "")
        out.append(f"the kernel changed the environment: {listed}; put back after this case, so later "
                   f"cases in this worker do not see the change")
    if after.cwd != before.cwd:
        out.append(f"the kernel changed the working directory to {after.cwd}; put back to {before.cwd} "
                   f"after this case, so later cases in this worker do not see the change")
    return tuple(out)


_MAX_NAMED = 8     # variables named in a warning; the rest are counted


def _end_processes(before: Snapshot) -> None:
    """Kill what the kernel left running, with everything below it, before the reply is sent: the
    worker is a subreaper, so a process in a session of its own is among its children too, and
    nothing it holds (the protocol socket, an inherited pipe) outlives the case."""
    left = sorted(_running()["children"] - before.children)
    for pid in left:
        reap([pid, *kill_tree(pid, include_self=True)])


def with_findings(found: Findings, disturbed: Disturbance) -> Findings:
    """The checks' findings with one ``CONTRACT`` finding per disturbance, by precedence."""
    if not disturbed.findings:
        return found
    items = sorted([*found.items, *(Finding(Outcome.CONTRACT, f) for f in disturbed.findings)],
                   key=lambda f: CHECK_PRECEDENCE.index(f.outcome))
    return replace(found, outcome=items[0].outcome, items=tuple(items))


# Which kernel's window first imported each module (issue 37, item 3): a change seen in a later case's
# window, made by code defined in a module another kernel brought in (a callback it left: at fork, on a
# warning, in a module hook) is traced to that kernel: the case runs again in a fresh worker, which
# decides (what it changes there is its own); the kernel is a module and a function (``pkg.mod:fn``).
_imported_by: dict[str, str] = {}      # module name -> the kernel (``pkg.mod:fn``) whose window imported it
_last_case_of: dict[str, str] = {}     # kernel -> the last case of it this worker ran


def _module_of(obj: Any) -> str | None:
    """The module that defines ``obj``: a function's by the file of its code (a ``functools.wraps``
    wrapper keeps the wrapped one's ``__module__``), else its ``__module__``."""
    func = getattr(obj, "__func__", obj)
    code = getattr(func, "__code__", None)
    if code is not None:
        found = _module_by_file().get(code.co_filename)
        if found is not None:
            return found
    module = getattr(obj, "__module__", None)
    return module if isinstance(module, str) else None


def _module_by_file() -> dict[str, str]:
    """File -> module name of the modules the windows imported (few: read when a change is traced)."""
    out = {}
    for name in _imported_by:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file:
            out[file] = name
    return out


def _changed_objects(before: Snapshot, after: Snapshot) -> list[tuple[str, Any]]:
    """(what, the new object) for each rebound name and each replaced hook an origin can be read from."""
    out: list[tuple[str, Any]] = []
    for (ns, old), (_, new) in zip(before.namespaces, after.namespaces):
        out += [(f"{ns}.{name} {how}", new[name])
                for name, how in _rebound(old, new, isinstance(_BY_NAME[ns], type), ns in _STDLIB) if how != "removed"]
    out += [(f"builtins.{name} {how}", after.hooks.builtins[name])
            for name, how in hooks._rebound(before.hooks.builtins, after.hooks.builtins) if how != "removed"]
    names = (*_TRACE_NAMES, *hooks._CALLBACK_NAMES,
             *(f"handler of {hooks._signal_name(sig)}" for sig in hooks._SIGNALS))
    for what, old, new in zip(names, (*before.hooks.trace, *before.hooks.callbacks, *before.hooks.signals),
                              (*after.hooks.trace, *after.hooks.callbacks, *after.hooks.signals)):
        if old is not new and callable(new):
            out.append((f"{what} replaced", new))
    return out


_TRACE_NAMES = ("sys.settrace", "sys.setprofile", "threading.settrace", "threading.setprofile")


def _traced(before: Snapshot, after: Snapshot, kernel: str) -> list[tuple[str, str]]:
    """(kernel, change) for each change whose new object is defined in a module that another kernel's
    window imported: code that kernel left behind ran in this window."""
    out = []
    for what, obj in _changed_objects(before, after):
        origin = _module_of(obj)
        owner = _imported_by.get(origin) if origin else None
        if owner is not None and owner != kernel:
            out.append((owner, what))
    return out


def note_case(case_id: str, kernel: str) -> None:
    """The case just run in this worker with ``kernel`` (a later traced change names it)."""
    _last_case_of[kernel] = case_id


def traced_to(traced: tuple[tuple[str, str], ...]) -> str:
    """The case a traced change is blamed on: the last case of the first kernel it is traced to."""
    kernel = traced[0][0]
    return _last_case_of.get(kernel, f"(a case of {kernel})")


class Deferred(Exception):
    """The worker's state changed between cases (``drift``): something an earlier kernel left (a
    timer, a finalizer, a callback) acted after that kernel's case was checked.  This case must not
    run here, nor take the blame."""

    def __init__(self, changes: list[str], blamed: str = ""):
        super().__init__("; ".join(changes))
        self.changes = changes
        self.blamed = blamed          # the case it is traced to ("": the worker's last case)


def drift(pristine: Snapshot, now: Snapshot) -> list[str]:
    """What differs from the worker's state when it started (torch, namespaces, modules, hooks), and
    processes that appeared below it since; the environment and cwd are put back after every case."""
    out = state_changes(pristine, now)
    procs = sorted(now.children - pristine.children)
    if procs:
        out.append(f"{len(procs)} process(es) started: "
                   + ", ".join(f"pid {p} ({_process_name(p)})" for p in procs))
    return out


class Watch:
    """The kernel's window in ``execute_case``: ``with watch:`` around its import and launch;
    ``disturbed`` afterwards (empty when the window never opened).  With ``pristine`` (the
    worker's snapshot at start) the window's first snapshot is compared with it, and a
    difference raises ``Deferred`` before the kernel runs."""

    def __init__(self, pristine: Snapshot | None = None, case_id: str | None = None, kernel: str | None = None) -> None:
        self._before: Snapshot | None = None
        self._pristine = pristine
        self._case = (case_id, kernel) if case_id is not None and kernel is not None else None
        self.disturbed = Disturbance()

    def __enter__(self) -> "Watch":
        _collect()        # garbage an earlier case left is finalised now, before its drift is judged
        if _collecting[0] and self._pristine is not None and _frozen_pristine[0] is not self._pristine:
            # the worker's snapshot at start lives as long as it: out of the collector's reach, not
            # walked by the two collections of every case (~50 us each)
            gc.freeze()
            _frozen_pristine[0] = self._pristine
        before = snapshot()
        if self._pristine is not None:
            changed = drift(self._pristine, before)
            if changed:
                traced = _traced(self._pristine, before, "")      # whose code made the change, where it says
                raise Deferred(changed, traced_to(tuple(traced)) if traced else "")
        self._before = before
        return self

    def __exit__(self, *exc: object) -> None:
        if self._before is not None:
            # the kernel's unreachable objects are finalised while it is still the one blamed: a
            # __del__ in a reference cycle would otherwise run in a later case's launch
            _collect()
            self.disturbed = settle(self._before, self._case[1] if self._case else None)
            if _collecting[0] and len(sys.modules) > len(self._before.modules):
                gc.freeze()     # what the kernel imported lives as long as the worker: not walked again
            if self._case is not None:
                traced = self.disturbed.traced
                blamed = traced_to(traced) if traced else ""
                note_case(*self._case)
                if traced:      # not this kernel's doing: it runs again in a fresh worker
                    raise Deferred([f"{what} during case {self._case[0]}'s launch, by code of {kernel}"
                                    for kernel, what in traced], blamed)


# Set by ``freeze_baseline`` (the worker, at start): full collections around every window.
_collecting = [False]
_frozen_pristine: list[Any] = [None]      # the pristine snapshot frozen (``Watch.__enter__``)


def freeze_baseline(collect: bool = True) -> None:
    """Move every object the worker has at start out of the collector's reach (``gc.freeze``), so
    the full collection after each launch walks only what was made since: microseconds instead of
    the ~0.4 s a collection over torch's objects takes.  Called once, before the worker's first
    snapshot; nothing frozen is ever freed, and nothing alive at start is meant to be.
    ``collect`` off (a worker forked from the zygote, which only imported): the little garbage
    of those imports is frozen with the rest instead of a 0.3-0.5 s collection over every object
    (that also copies every page the fork shares), which is most of a forked worker's start."""
    if collect:
        gc.collect()
    gc.freeze()
    imports.set_baseline(imports.read())     # the finders and hooks an added module is judged against
    _collecting[0] = True


def _collect() -> None:
    if _collecting[0]:
        gc.collect()


def warm_up(device: torch.device) -> None:
    """Start torch's own pools before the first case, so they are not a kernel's leftovers:
    the intra-op thread pool (a parallel reduction above its grain size) and, on an
    accelerator, the runtime's context and threads."""
    torch.ones(1 << 17).sum()
    if device.type != "cpu":
        torch.ones(1, device=device).sum().item()
