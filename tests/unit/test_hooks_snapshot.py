"""harness/worker/hooks.py in this process: each process-wide hook a kernel can leave is found in
its window, put back where it can be, and the worker's pristine snapshot tells a change made
between cases (``hygiene.drift``, ``Deferred``) from the kernel's own."""
from __future__ import annotations

import builtins
import gc
import signal
import sys

import pytest
import torch

from harness.worker import hooks, hygiene


def window(act) -> hygiene.Disturbance:
    with hygiene.Watch() as watch:
        act()
    return watch.disturbed


def _mode():
    class Scale(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))
    Scale().__enter__()


def _round():
    builtins.round = lambda x, n=None: 0


def _alarm():
    signal.signal(signal.SIGALRM, lambda *a: None)
    signal.setitimer(signal.ITIMER_REAL, 30)


def _gc():
    gc.callbacks.append(lambda phase, info: None)


@pytest.mark.parametrize("act, says", [
    (gc.disable, "garbage collector on → off"),
    (lambda: torch.autocast("cpu", dtype=torch.bfloat16).__enter__(), "torch autocast (cpu) off → on (bfloat16)"),
    (_mode, "torch function mode stack 0 → 1 deep"),
    (_round, "builtins.round replaced"),
    (_alarm, "interval timer ITIMER_REAL armed (signal.alarm)"),
    (_gc, "gc.callbacks "),
])
def test_each_hook_is_found_and_put_back(act, says):
    before = hooks.read()
    disturbed = window(act)
    assert any(says in f for f in disturbed.findings), disturbed.findings
    assert hooks.changes(before, hooks.read()) == []          # put back for the case's own checks
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0 and builtins.round(2.6) == 3
    assert gc.isenabled()


def test_an_audit_hook_is_counted_by_the_sentinel():
    hooks.install_audit_sentinel()
    before = hooks.read()
    sys.addaudithook(lambda event, args: None)        # cannot be removed: this process keeps it (harmless)
    assert hooks.changes(before, hooks.read()) == ["1 audit hook(s) added (sys.addaudithook; cannot be removed)"]


def test_registrations_that_compute_no_aten_values_are_not_findings():
    """A library's own namespace, and meta kernels (what torch registers lazily when ``torch._dynamo``
    is imported: 143 registrations, none an aten kernel for a real device), compute no aten values."""
    own = torch.library.Library("hygiene_unit", "DEF")
    meta = torch.library.Library("aten", "IMPL")
    try:
        def act():
            own.define("twice(Tensor x) -> Tensor")
            own.impl("twice", lambda x: 2 * x, "CPU")
            meta.impl("exp2", lambda x: torch.empty_like(x), "Meta")
        assert window(act).findings == ()
    finally:
        own._destroy()
        meta._destroy()


def test_an_aten_override_from_python_is_named():
    lib = torch.library.Library("aten", "IMPL")
    try:
        disturbed = window(lambda: lib.impl("exp2", lambda x: x, "CPU"))
        assert ("the kernel changed process state: torch.library implementation registered: aten::exp2 for CPU "
                "(cannot be removed)") in disturbed.findings
    finally:
        lib._destroy()


def test_a_change_between_cases_is_drift_against_the_pristine_snapshot():
    pristine = hygiene.snapshot()
    original = torch.rsqrt
    torch.rsqrt = lambda x: x
    try:
        with pytest.raises(hygiene.Deferred, match="torch.rsqrt replaced"):
            with hygiene.Watch(pristine):
                pass
    finally:
        torch.rsqrt = original
    with hygiene.Watch(pristine) as watch:       # once put back: no drift, an ordinary window
        pass
    assert watch.disturbed == hygiene.Disturbance()


def test_names_added_after_the_snapshot_do_not_hide_a_replaced_one():
    old = {"a": 1, "b": builtins.len}
    assert hygiene._kept(old, {**old, "c": 3})
    assert not hygiene._kept(old, {"a": 1, "b": builtins.abs, "c": 3})
    assert not hygiene._kept(old, {"b": builtins.len, "a": 2})
    assert hygiene._kept(old, {"b": builtins.len, "a": 1})               # order changed, same bindings


def test_the_interpreters_callbacks_and_global_module_hooks_are_found_and_put_back():
    """What a later case can set off (a warning shown, an nn.Module called) is read at the end of the
    window that left it (issue 37, item 3), and put back for the case's own checks."""
    import warnings
    shown = warnings.showwarning
    excepthook = sys.excepthook
    forward = dict(torch.nn.modules.module._global_forward_hooks)

    def leave():
        warnings.showwarning = lambda *a, **k: None
        sys.excepthook = lambda *a: None
        torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: None)
    disturbed = window(leave)
    text = "; ".join(disturbed.findings)
    assert "warnings.showwarning warnings.showwarning → " in text, text
    assert "sys.excepthook sys.excepthook → " in text, text
    assert "torch.nn global forward hooks 0 → 1 (register_module_forward_hook)" in text, text
    assert warnings.showwarning is shown and sys.excepthook is excepthook
    assert dict(torch.nn.modules.module._global_forward_hooks) == forward


def test_a_change_by_another_kernels_code_is_traced_to_it():
    """A rebound name whose new object is defined in a module another kernel's window imported is
    traced to that kernel (``Deferred`` with its last case); one made by the window's own kernel is not."""
    import types
    module = types.ModuleType("late_hook_kernel_mod")
    exec("def wrong(x):\n    return x\n", module.__dict__)
    module.__file__ = "/nonexistent/late_hook_kernel_mod.py"
    module.wrong.__code__ = module.wrong.__code__.replace(co_filename=module.__file__)
    original = torch.rsqrt
    try:
        with hygiene.Watch(None, "case-a", "late_hook_kernel_mod:a"):
            sys.modules["late_hook_kernel_mod"] = module           # the first kernel's window imports it
        with pytest.raises(hygiene.Deferred) as deferred:
            with hygiene.Watch(None, "case-b", "other_mod:b"):
                torch.rsqrt = module.wrong                          # its callback fires in a later window
        assert deferred.value.blamed == "case-a"
        assert "torch.rsqrt replaced during case case-b's launch, by code of late_hook_kernel_mod:a" in str(deferred.value)
        assert torch.rsqrt is original                              # put back before the re-run
        with hygiene.Watch(None, "case-c", "late_hook_kernel_mod:a") as watch:
            torch.rsqrt = module.wrong                              # its own kernel: its own finding
        assert any("torch.rsqrt replaced" in f for f in watch.disturbed.findings)
    finally:
        torch.rsqrt = original
        sys.modules.pop("late_hook_kernel_mod", None)
        hygiene._imported_by.pop("late_hook_kernel_mod", None)
        hygiene._last_case_of.pop("late_hook_kernel_mod:a", None)
