"""A hook one kernel leaves that changes the worker during a LATER case's launch (issue 37, item 3),
written as an outsider would: a thread that patches torch a little later, ``threading.settrace``, a
replaced ``warnings.showwarning``, a global ``nn.Module`` forward hook, an at-fork callback.  The
innocent case that sets it off (a correct kernel that runs a thread, warns, calls a module, forks) is
never blamed: a hook the snapshot can read is the contract of the case that left it; an at-fork
callback cannot be listed, so the change it makes is traced by its code's module to the kernel whose
window imported it, and the innocent case runs again in a fresh worker.  A clean case and the mutant
control after it keep their verdicts."""
from __future__ import annotations

import time

import pytest

from helpers import hostile_case
from harness.case import Case
from harness.outcomes import Outcome


def case(kernel: str, case_id: str) -> Case:
    return hostile_case("late_hooks", kernel, case_id)


def _then(worker, tmp_path, *kernels):
    out = []
    for i, k in enumerate(kernels):
        out.append(worker.run(case(k, f"{i}-{k}"), tmp_path / f"{i}.log"))
    return out


@pytest.mark.parametrize("hook, innocent, says", [
    ("thread_patches_later", "innocent_thread", "1 thread(s) still running: late-patcher"),
    ("threading_settrace_patches", "innocent_thread", "threading.settrace None → "),
    ("showwarning_patches", "innocent_warns", "warnings.showwarning warnings.showwarning → "),
    ("module_hook_patches", "innocent_module", "torch.nn global forward hooks 0 → 1 (register_module_forward_hook)"),
])
def test_a_hook_that_fires_later_is_the_contract_of_the_case_that_left_it(worker, tmp_path, hook, innocent, says):
    bad = worker.run(case(hook, "bad"), tmp_path / "bad.log")
    assert bad.outcome is Outcome.CONTRACT and says in bad.report, bad.report
    time.sleep(0.5)                    # past the moment the thread patches
    after = _then(worker, tmp_path, innocent, "reference", "skip_rope")
    assert [r.outcome for r in after] == [Outcome.PASS, Outcome.PASS, Outcome.MISMATCH], [r.summary for r in after]
    assert all("deferred" not in r.metrics.get("hygiene", {}) for r in after)
    assert worker.replacements == 1 and not worker.warnings, worker.warnings


def test_an_at_fork_callback_is_traced_to_its_kernel_and_the_innocent_case_runs_again(worker, tmp_path):
    """``os.register_at_fork`` cannot be listed: the kernel that registers one passes, and the case that
    forks later sees torch.rsqrt replaced in its own window.  The replacement's code is in the module
    the first kernel's window imported: the innocent case runs again in a fresh worker, and the change
    is blamed on the first case (before, the innocent case was CONTRACT)."""
    bad = worker.run(case("at_fork_patches", "bad"), tmp_path / "bad.log")
    assert bad.outcome is Outcome.PASS, bad.summary           # nothing readable left at its end
    innocent, clean, control = _then(worker, tmp_path, "innocent_forks", "reference", "skip_rope")
    assert innocent.outcome is Outcome.PASS, innocent.summary
    deferred = innocent.metrics["hygiene"]["deferred"]
    assert deferred["after_case"] == "bad", deferred
    assert "torch.rsqrt replaced during case 0-innocent_forks's launch, by code of hostile.late_hooks:at_fork_patches" \
        in deferred["changes"], deferred
    assert [clean.outcome, control.outcome] == [Outcome.PASS, Outcome.MISMATCH], [clean.summary, control.summary]
    assert worker.replacements == 1 and len(worker.warnings) == 1 and "after case bad" in worker.warnings[0]


def test_a_kernel_that_patches_late_with_its_own_code_is_still_its_own_contract(worker, tmp_path):
    """Tracing never excuses the kernel whose own code made the change: one that patches torch from its
    second call on is CONTRACT at that call; one whose module another kernel brought in runs again in
    a fresh worker, where the change it makes is its own."""
    first, second = _then(worker, tmp_path, "patches_on_its_second_call", "patches_on_its_second_call")
    assert first.outcome is Outcome.PASS and second.outcome is Outcome.CONTRACT, (first.summary, second.summary)
    assert "torch.rsqrt replaced" in second.report and "deferred" not in second.metrics.get("hygiene", {})
    worker.replace("a fresh worker")
    sibling = worker.run(case("at_fork_patches", "sibling-first"), tmp_path / "s.log")
    patched = worker.run(case("patches_now", "patches-now"), tmp_path / "p.log")
    assert sibling.outcome is Outcome.PASS
    assert patched.outcome is Outcome.CONTRACT and "torch.rsqrt replaced" in patched.report, patched.report
    assert patched.metrics["hygiene"]["deferred"]["after_case"] == "sibling-first"
