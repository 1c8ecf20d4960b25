"""Process-wide hooks a kernel can leave in the warm worker, read cheaply for every case.

What ``hygiene`` snapshots besides torch's settings and namespaces: each item changes what
a later case computes or how it is labelled, without touching a tensor the checks see.

- torch's autocast state per device type, and the torch-function and dispatch mode stacks
  (an autocast or a ``TorchFunctionMode`` entered and never exited rewrites every later op);
- ``torch.library`` registrations made from Python (``torch.library._impls``: one entry per
  op and dispatch key, ``Library("aten", "IMPL").impl("rsqrt", ...)`` included); torch's
  own lazy registrations (its meta kernels, say) are told apart by the file that registered
  them and are not findings;
- ``builtins`` (``round``, ``abs``, ... rebound), and the namespaces of the harness's own
  worker modules that judge a case (the comparison, the checks, the launch);
- Python signal handlers, armed interval timers (``signal.alarm`` is ``ITIMER_REAL``),
  ``gc.callbacks`` and whether the collector is on, ``sys.settrace`` / ``sys.setprofile``
  (and their ``threading`` twins).  The import machinery is ``imports.py``'s (a finder or path
  hook is judged by what the harness's and the kernel paths' modules then resolve to, not by
  where it sits);
- what the interpreter and the standard library call on an event a later case can set off
  (``sys.excepthook``, ``sys.unraisablehook``, ``sys.displayhook``, ``sys.breakpointhook``,
  ``threading.excepthook``, ``warnings.showwarning``, ``warnings.formatwarning``), and torch.nn's
  global module hooks (``register_module_forward_hook`` and its kin: every later ``nn.Module`` call
  runs them);
- audit hooks: ``sys.addaudithook`` cannot be undone or listed, but it raises the audit
  event ``sys.addaudithook`` to the hooks already there, so the worker installs one hook of
  its own at start (``install_audit_sentinel``) that counts them (and records the
  ``/dev/shm`` files this process opens, for ``os_state``).

Everything here is a finding when it changed; what can be put back is put back for the
case's own checks (``restore``), and the worker is replaced either way.
"""
from __future__ import annotations

import _signal
import builtins
import functools
import gc
import os
import signal
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.library

from harness.worker.os_state import note_open

# Device types whose autocast state torch keeps (``torch.is_autocast_enabled(device_type)``);
# one unknown to this torch is skipped.
_AUTOCAST_TYPES = ("cpu", "cuda", "xpu", "mps", "hpu", "mtia", "maia", "xla", "privateuseone")
_SIGNALS = tuple(s for s in signal.valid_signals()
                 if s not in (getattr(signal, "SIGKILL", None), getattr(signal, "SIGSTOP", None)))
_TIMERS = tuple((name, getattr(signal, name)) for name in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF")
                if hasattr(signal, name))
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


@functools.cache
def _autocast_types() -> tuple[str, ...]:
    """The device types this torch keeps autocast state for (asked once, on first read)."""
    known = []
    for device_type in _AUTOCAST_TYPES:
        try:
            torch.is_autocast_enabled(device_type)
            torch.get_autocast_dtype(device_type)
        except (RuntimeError, TypeError, AttributeError):
            continue
        known.append(device_type)
    return tuple(known)



# -- audit hooks -------------------------------------------------------------------------

_audit_hooks_added = [0]
_sentinel_installed = [False]


def _sentinel(event: str, args: tuple) -> None:
    if event == "open":                  # which /dev/shm files this process made (os_state)
        note_open(args[0])
    elif event == "sys.addaudithook":
        _audit_hooks_added[0] += 1


def install_audit_sentinel() -> None:
    """Count every audit hook added after this (the worker calls it once, at start).  A hook of our
    own costs a string comparison per audit event (imports, opens), none per tensor op."""
    if not _sentinel_installed[0]:
        sys.addaudithook(_sentinel)
        _sentinel_installed[0] = True


# -- the hooks, read -----------------------------------------------------------------------

@dataclass(frozen=True)
class Hooks:
    """One reading of every hook above (cheap: a few C calls and two small dict copies)."""

    autocast: tuple[tuple[bool, Any], ...]       # (enabled, dtype) per _autocast_types() entry
    autocast_cache: bool
    function_modes: int                           # depth of the torch-function mode stack
    dispatch_modes: int                           # depth of the torch-dispatch mode stack
    library_impls: int                            # len(torch.library._impls)
    builtins: dict[str, Any]
    signals: tuple[Any, ...]                      # Python handler per _SIGNALS entry
    timers: tuple[bool, ...]                      # armed, per _TIMERS entry
    gc_callbacks: tuple[Any, ...]
    gc_enabled: bool
    trace: tuple[Any, Any, Any, Any]              # sys.gettrace, sys.getprofile, threading's two
    audit_hooks: int                              # hooks added since the sentinel was installed
    callbacks: tuple[Any, ...]                    # per _CALLBACKS entry: what the interpreter calls
    module_hooks: tuple[tuple[Any, ...], ...]     # per _MODULE_HOOKS entry: its handles' ids


# What the interpreter or the standard library calls on an event a later case can set off (a warning
# shown, an exception not caught in a thread or a finalizer): a kernel's replacement runs in that case.
_CALLBACKS: tuple[tuple[Any, str], ...] = (
    (sys, "excepthook"), (sys, "unraisablehook"), (sys, "displayhook"), (sys, "breakpointhook"),
    (threading, "excepthook"), (warnings, "showwarning"), (warnings, "formatwarning"))
_CALLBACK_NAMES = tuple(f"{owner.__name__}.{name}" for owner, name in _CALLBACKS)

# torch.nn's global module hooks: every nn.Module call of every later case runs them.
_MODULE_HOOKS = tuple(name for name in (
    "_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks", "_global_backward_hooks",
    "_global_module_registration_hooks", "_global_parameter_registration_hooks",
    "_global_buffer_registration_hooks") if isinstance(getattr(torch.nn.modules.module, name, None), dict))


def _module_hooks() -> tuple[tuple[Any, ...], ...]:
    module = torch.nn.modules.module
    return tuple(tuple(getattr(module, name)) for name in _MODULE_HOOKS)


def _impls() -> set[str]:
    return getattr(torch.library, "_impls", set())


def read() -> Hooks:
    _pristine_impls()
    return Hooks(
        autocast=tuple((torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in _autocast_types()),
        autocast_cache=torch.is_autocast_cache_enabled(),
        function_modes=torch._C._len_torch_function_stack(),
        dispatch_modes=torch._C._len_torch_dispatch_stack(),
        library_impls=len(_impls()),
        builtins=dict(vars(builtins)),
        signals=tuple(map(_signal.getsignal, _SIGNALS)),     # the C function: no enum per call
        timers=tuple(signal.getitimer(which)[0] > 0 for _, which in _TIMERS),
        gc_callbacks=tuple(gc.callbacks),
        gc_enabled=gc.isenabled(),
        trace=(sys.gettrace(), sys.getprofile(), _threading_hook("gettrace"), _threading_hook("getprofile")),
        audit_hooks=_audit_hooks_added[0],
        callbacks=tuple(getattr(owner, name, None) for owner, name in _CALLBACKS),
        module_hooks=_module_hooks(),
    )


def _threading_hook(name: str) -> Any:
    getter = getattr(threading, name, None)      # Python >= 3.10
    return getter() if getter else None


# -- what changed -----------------------------------------------------------------------------

def _name(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__
    module = getattr(obj, "__module__", None)
    return f"{module}.{name}" if module and module != "builtins" else str(name)


def _handler(handler: Any) -> str:
    if isinstance(handler, int):
        return {0: "SIG_DFL", 1: "SIG_IGN"}.get(int(handler), str(handler))
    return "None" if handler is None else _name(handler)


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


# Registrations judged torch's own, once per worker: reading the dispatcher costs milliseconds.
_judged_own: set[str] = set()
_baseline_impls: list[frozenset[str]] = []


def _foreign(keys: list[str]) -> list[str]:
    """Of new ``torch.library`` registrations (``"aten/rsqrt/CPU"``), those that can change what an
    aten op computes on real tensors and were not made by torch's own files (torch registers meta
    kernels and decompositions lazily, as its submodules are imported).  Other namespaces are a
    library's own ops, and meta kernels compute no values: neither is a finding."""
    out = []
    for key in keys:
        ns, _, rest = key.partition("/")
        op, _, dispatch_key = rest.rpartition("/")
        if ns != "aten" or dispatch_key == "Meta" or key in _judged_own:
            continue
        if _registered_by_torch(f"{ns}::{op}", dispatch_key):
            _judged_own.add(key)
        else:
            out.append(f"aten::{op} for {dispatch_key}")
    return out


def _registered_by_torch(op: str, dispatch_key: str) -> bool:
    try:
        dump = torch._C._dispatch_dump(op)
    except RuntimeError:
        return False
    for line in dump.splitlines():
        if line.startswith(f"{dispatch_key}: registered at "):
            return line.split("registered at ", 1)[1].startswith(_TORCH_DIR)
    return False


def changes(before: Hooks, after: Hooks) -> list[str]:
    """One line per hook that differs between two readings."""
    out = []
    for device_type, (old, new) in zip(_autocast_types(), zip(before.autocast, after.autocast)):
        if old != new:
            out.append(f"torch autocast ({device_type}) {_autocast_text(old)} → {_autocast_text(new)}")
    if before.autocast_cache != after.autocast_cache:
        out.append(f"torch autocast cache {before.autocast_cache} → {after.autocast_cache}")
    if after.function_modes != before.function_modes:
        out.append(f"torch function mode stack {before.function_modes} → {after.function_modes} deep "
                   f"(a TorchFunctionMode left active)")
    if after.dispatch_modes != before.dispatch_modes:
        out.append(f"torch dispatch mode stack {before.dispatch_modes} → {after.dispatch_modes} deep "
                   f"(a TorchDispatchMode left active)")
    if after.library_impls != before.library_impls:
        foreign = _foreign(sorted(_impls() - _pristine_impls()))
        if foreign:
            out.append("torch.library implementation registered: " + ", ".join(foreign[:5])
                       + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "") + " (cannot be removed)")
    out += [f"builtins.{name} {how}" for name, how in _rebound(before.builtins, after.builtins)]
    if before.signals != after.signals:
        for sig, old, new in zip(_SIGNALS, before.signals, after.signals):
            if old is not new and old != new:
                out.append(f"handler of {_signal_name(sig)} {_handler(old)} → {_handler(new)}")
    if before.timers != after.timers:
        for (name, _), old, new in zip(_TIMERS, before.timers, after.timers):
            if new and not old:
                out.append(f"interval timer {name} armed" + (" (signal.alarm)" if name == "ITIMER_REAL" else ""))
    if before.gc_callbacks != after.gc_callbacks:
        added = [cb for cb in after.gc_callbacks if not any(cb is old for old in before.gc_callbacks)]
        out.append("gc.callbacks " + (", ".join(f"{_name(cb)} added" for cb in added) or "changed"))
    if before.gc_enabled != after.gc_enabled:
        out.append(f"garbage collector {'on' if before.gc_enabled else 'off'} → {'on' if after.gc_enabled else 'off'}")
    if before.trace != after.trace:
        for what, old, new in zip(("sys.settrace", "sys.setprofile", "threading.settrace", "threading.setprofile"),
                                  before.trace, after.trace):
            if old is not new:
                out.append(f"{what} {_name(old) if old else 'None'} → {_name(new) if new else 'None'}")
    if before.callbacks != after.callbacks:
        for what, old, new in zip(_CALLBACK_NAMES, before.callbacks, after.callbacks):
            if old is not new:
                out.append(f"{what} {_name(old)} → {_name(new)}")
    if before.module_hooks != after.module_hooks:
        for what, old, new in zip(_MODULE_HOOKS, before.module_hooks, after.module_hooks):
            if old != new:
                out.append(f"torch.nn {what.strip('_').replace('_', ' ')} {len(old)} → {len(new)} "
                           f"(register_module_{what.removeprefix('_global_').removesuffix('s')})")
    if after.audit_hooks != before.audit_hooks:
        out.append(f"{after.audit_hooks - before.audit_hooks} audit hook(s) added (sys.addaudithook; "
                   f"cannot be removed)")
    return out


def _autocast_text(state: tuple[bool, Any]) -> str:
    enabled, dtype = state
    return f"on ({str(dtype).removeprefix('torch.')})" if enabled else "off"


_GONE = object()


def _rebound(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        if len(old) == len(new) and list(old) == list(new) and list(old.values()) == list(new.values()):
            return []
    except Exception:        # a value whose == raises: compared one by one below
        pass
    out = [(name, "removed" if name not in new else "replaced") for name, obj in old.items()
           if new.get(name, _GONE) is not obj]
    return out + [(name, "added") for name in new.keys() - old.keys()]


# -- putting back ------------------------------------------------------------------------------

def restore(before: Hooks, after: Hooks) -> None:
    """Put back what can be put back, for the case's own checks (the worker is replaced anyway):
    autocast, the mode stacks, builtins, signal handlers, timers, gc, trace and profile, the
    interpreter's callbacks, torch.nn's global module hooks (those added are removed).  Library
    registrations and audit hooks cannot be undone."""
    for device_type, (old, new) in zip(_autocast_types(), zip(before.autocast, after.autocast)):
        if old != new:
            torch.set_autocast_enabled(device_type, old[0])
            torch.set_autocast_dtype(device_type, old[1])
    if before.autocast_cache != after.autocast_cache:
        torch.set_autocast_cache_enabled(before.autocast_cache)
    while torch._C._len_torch_function_stack() > before.function_modes:
        torch._C._pop_torch_function_stack()
    while torch._C._len_torch_dispatch_stack() > before.dispatch_modes:
        torch._C._pop_torch_dispatch_stack()
    for name, how in _rebound(before.builtins, after.builtins):
        if how == "added":
            delattr(builtins, name)
        else:
            setattr(builtins, name, before.builtins[name])
    for sig, old, new in zip(_SIGNALS, before.signals, after.signals):
        if old is not new and old is not None:
            try:
                signal.signal(sig, old)
            except (OSError, ValueError, TypeError):
                pass
    for (_, which), old, new in zip(_TIMERS, before.timers, after.timers):
        if new and not old:
            signal.setitimer(which, 0)
    gc.callbacks[:] = list(before.gc_callbacks)
    (gc.enable if before.gc_enabled else gc.disable)()
    if after.trace[0] is not before.trace[0]:
        sys.settrace(before.trace[0])
    if after.trace[1] is not before.trace[1]:
        sys.setprofile(before.trace[1])
    if after.trace[2] is not before.trace[2] and hasattr(threading, "settrace"):
        threading.settrace(before.trace[2])
    if after.trace[3] is not before.trace[3] and hasattr(threading, "setprofile"):
        threading.setprofile(before.trace[3])
    for (owner, name), old, new in zip(_CALLBACKS, before.callbacks, after.callbacks):
        if old is not new:
            setattr(owner, name, old)
    for name, old, new in zip(_MODULE_HOOKS, before.module_hooks, after.module_hooks):
        if old != new:
            hooks = getattr(torch.nn.modules.module, name)
            for key in set(new) - set(old):
                hooks.pop(key, None)


def _pristine_impls() -> frozenset[str]:
    """The registrations when this module first read them (``read`` at worker start): new ones are
    told from these."""
    if not _baseline_impls:
        _baseline_impls.append(frozenset(_impls()))
    return _baseline_impls[0]
