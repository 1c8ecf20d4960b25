"""Libraries that change the import machinery when a kernel first imports them, and kernels that bend
it on purpose, each followed by clean cases and mutant controls in one warm worker (issue 37, item 2).

Innocent: a library that puts a finder for its own names first on ``sys.meta_path``, one that puts a
path hook first with its own ``sys.path`` entry (and clears the importer cache), a type-checking style
hook that wraps the loader of every module, a vendored folder put first on ``sys.path``.  Each case
PASSES with no hygiene finding, the worker is kept (the library's hook stays in place and keeps working
in the kernel's next case), and the mutant controls after it are still MISMATCH.

Hostile, beyond test_hygiene_round3's: a finder that answers honestly unless the harness's loader is
importing (the mutant control it serves is caught when imported, never a PASS), and a folder put
first on ``sys.path`` that shadows a package of the kernel paths."""
from __future__ import annotations

import os

import pytest

from helpers import KERNELS_UNDER_TEST
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device
from harness.outcomes import Outcome
from harness.run.pool import DeviceWorker
from harness.run.spawn import WorkerOptions

MUTANTS = ("skip_rope", "hostile.user_mutant:rope_kv_write")


def case(kernel: str, case_id: str, seed: int = 3) -> Case:
    return Case(case_id=case_id, matrix="t", source="test", op="rope_kv_write", kernel=kernel,
                geometry=PRESETS["tiny"], seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("arange"), seed=seed,
                timeout_s=60.0)


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("import_hooks")
    options = WorkerOptions(log_dir=tmp / "logs", golden_cache=str(tmp / "goldens"),
                            kernel_paths=(str(KERNELS_UNDER_TEST),), base_env=dict(os.environ))
    w = DeviceWorker(Device("cpu"), options)
    yield w
    w.close()


INNOCENT = ("import_hooks.k_own_finder:rope_kv_write", "import_hooks.k_path_hook:rope_kv_write",
            "import_hooks.k_wrapping:rope_kv_write", "import_hooks.k_vendored:rope_kv_write")


@pytest.mark.parametrize("kernel", INNOCENT, ids=[k.split(".")[1].split(":")[0] for k in INNOCENT])
def test_a_library_that_hooks_imports_for_itself_is_not_blamed(worker, tmp_path, kernel):
    worker.replace("a fresh worker: the library not imported yet")
    replaced = worker.replacements
    first = worker.run(case(kernel, "first"), tmp_path / "first.log")
    assert first.outcome is Outcome.PASS, (first.summary, first.report)
    assert "hygiene" not in first.metrics, first.metrics.get("hygiene")
    again = worker.run(case(kernel, "again", seed=4), tmp_path / "again.log")     # its hook still in place
    clean = worker.run(case("reference", "clean"), tmp_path / "clean.log")
    controls = [worker.run(case(k, f"control{i}"), tmp_path / f"control{i}.log") for i, k in enumerate(MUTANTS)]
    assert [r.outcome for r in (again, clean)] == [Outcome.PASS] * 2, [r.summary for r in (again, clean)]
    assert [r.outcome for r in controls] == [Outcome.MISMATCH] * 2, [r.summary for r in controls]
    assert all("hygiene" not in r.metrics for r in (again, clean, *controls))
    assert worker.replacements == replaced and not worker.warnings, worker.warnings


def test_a_finder_that_answers_honestly_to_the_probe_is_caught_at_the_import_it_bends(worker, tmp_path):
    """Its lookups look right from the hygiene check, so the attack itself passes; the mutant control it
    serves the reference to is judged when imported: a CONTRACT naming the file, never a PASS."""
    worker.replace("a fresh worker: no mutant imported yet")
    worker.run(case("hostile.import_tricks:finder_that_sniffs_its_caller", "bad"), tmp_path / "bad.log")
    control = worker.run(case("skip_rope", "control"), tmp_path / "control.log")
    assert control.outcome is Outcome.CONTRACT, (control.summary, control.report)
    assert "sys.modules['harness.kernels.mutants.skip_rope'] added: " in control.report
    assert "reference.py" in control.report
    after = [worker.run(case(k, f"after{i}"), tmp_path / f"after{i}.log")
             for i, k in enumerate(("reference", *MUTANTS))]
    assert [r.outcome for r in after] == [Outcome.PASS, Outcome.MISMATCH, Outcome.MISMATCH], \
        [r.summary for r in after]


def test_a_folder_that_shadows_a_kernel_package_is_a_contract(worker, tmp_path):
    worker.replace("a fresh worker")
    replaced = worker.replacements
    bad = worker.run(case("hostile.import_tricks:shadows_a_kernel_package", "bad"), tmp_path / "bad.log")
    assert bad.outcome is Outcome.CONTRACT, (bad.summary, bad.report)
    assert "sys.path: '" in bad.report and "'classic_bugs' → " in bad.report, bad.report
    assert worker.replacements == replaced + 1
    after = [worker.run(case(k, f"after{i}"), tmp_path / f"after{i}.log")
             for i, k in enumerate(("reference", *MUTANTS))]
    assert [r.outcome for r in after] == [Outcome.PASS, Outcome.MISMATCH, Outcome.MISMATCH], \
        [r.summary for r in after]
