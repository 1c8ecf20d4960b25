"""Careless kernels of issue 37, item 2, each followed by clean cases and mutant controls in one warm
worker, written as an outsider would: the import machinery bent (a finder that serves the reference
for every mutant, modules registered before their first import, a path hook, a poisoned importer
cache), the standard library patched, resource limits lowered, descriptors leaked to the limit, the
worker pinned and reniced, a file left in /dev/shm, the new TF32 API.  The case that did it is
``CONTRACT`` naming the change; every clean case after it passes; both mutant controls (the builtin
``skip_rope`` and the user's own module) still fail."""
from __future__ import annotations

import os
import resource

import pytest

from helpers import KERNELS_UNDER_TEST
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device
from harness.outcomes import Outcome
from harness.run.pool import DeviceWorker
from harness.run.spawn import WorkerOptions

SHM = f"/dev/shm/hostile-round3-{os.getpid()}"


def case(kernel: str, case_id: str) -> Case:
    if ":" not in kernel and kernel not in ("reference", "skip_rope"):
        kernel = f"hostile.round3:{kernel}"
    return Case(case_id=case_id, matrix="t", source="test", op="rope_kv_write", kernel=kernel,
                geometry=PRESETS["tiny"], seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("arange"), seed=3,
                timeout_s=60.0)


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    """One worker for every attack: each attack must leave it fit for the next (that is the point)."""
    tmp = tmp_path_factory.mktemp("round3")
    options = WorkerOptions(log_dir=tmp / "logs", golden_cache=str(tmp / "goldens"),
                            kernel_paths=(str(KERNELS_UNDER_TEST),),
                            base_env={**os.environ, "HOSTILE_SHM": SHM})
    w = DeviceWorker(Device("cpu"), options)
    yield w
    w.close()
    if os.path.exists(SHM):
        os.unlink(SHM)


def _limits_ok() -> bool:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1] > 64


ATTACKS = [
    ("meta_path_serves_reference", "sys.meta_path: hostile.round3._CachedKernels added ahead"),
    ("preloads_mutant_modules", "sys.modules['harness.kernels.mutants.skip_rope'] added: no file, where the "
                                "import system finds"),
    ("path_hook_first", "sys.path_hooks: hostile.round3._Hook added ahead"),
    ("importer_cache_poisoned", "sys.path_importer_cache: "),
    ("rebinds_isnan", "math.isnan replaced"),
    ("no_file_size", "resource limit RLIMIT_FSIZE soft"),
    ("ten_descriptors", "resource limit RLIMIT_NOFILE soft"),
    ("lowers_hard_nofile", "resource limit RLIMIT_NOFILE hard"),
    ("leaks_descriptors", "no descriptor free: /proc/self/fd could not be listed after the launch"),
    ("pins_and_renices", "nice value 0 → 19 (cannot be lowered again)"),
    ("leaves_shm_file", f"1 file(s) in /dev/shm: {os.path.basename(SHM)}"),
    ("new_tf32_api", "backends.fp32_precision none → tf32"),
    # the worker's own kernel import rebound to serve the reference: every later mutant would PASS
    ("hostile.isolation:patches_the_loader", "harness.worker.kernel_loader.KernelLoader.load replaced"),
]


@pytest.mark.parametrize("kernel, says", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_the_attack_is_its_own_contract_and_later_cases_keep_their_verdicts(worker, tmp_path, kernel, says):
    if kernel == "lowers_hard_nofile" and not _limits_ok():
        pytest.skip("the hard descriptor limit is already at most 64 here")
    if kernel == "pins_and_renices" and os.getpriority(os.PRIO_PROCESS, 0) != 0:
        pytest.skip("the tests already run reniced")
    worker.replace("a fresh worker for each attack: no mutant imported yet")
    replaced = worker.replacements
    bad = worker.run(case(kernel, f"{kernel}-bad"), tmp_path / "bad.log")
    assert bad.outcome is Outcome.CONTRACT, (bad.summary, bad.report)
    assert says in bad.report, bad.report
    assert worker.replacements == replaced + 1
    after = [worker.run(case("reference", f"{kernel}-clean{i}"), tmp_path / f"clean{i}.log") for i in range(2)]
    controls = [worker.run(case(k, f"{kernel}-{k}"), tmp_path / f"{i}.log")
                for i, k in enumerate(("skip_rope", "hostile.user_mutant:rope_kv_write"))]
    assert [r.outcome for r in after] == [Outcome.PASS] * 2, [r.summary for r in after]
    assert [r.outcome for r in controls] == [Outcome.MISMATCH] * 2, [r.summary for r in controls]
    assert worker.replacements == replaced + 1 and not worker.warnings
    if kernel == "leaves_shm_file":
        assert os.path.exists(SHM)        # named, not removed: the harness deletes no file it did not make


def test_a_finalizer_in_a_dropped_cycle_is_blamed_on_the_kernel_that_dropped_it(worker, tmp_path):
    """The object's __del__ patches torch whenever the collector next runs, which without a collection
    after each launch is during some later case: the innocent one was blamed (issue 37, item 3)."""
    worker.replace("a fresh worker")
    replaced = worker.replacements
    bad = worker.run(case("drops_a_cycle_that_patches_torch", "cycle-bad"), tmp_path / "bad.log")
    after = [worker.run(case("reference", f"cycle-clean{i}"), tmp_path / f"clean{i}.log") for i in range(3)]
    assert bad.outcome is Outcome.CONTRACT and "torch.rsqrt replaced" in bad.report, bad.report
    assert [r.outcome for r in after] == [Outcome.PASS] * 3, [r.summary for r in after]
    assert all("hygiene" not in r.metrics for r in after), [r.metrics.get("hygiene") for r in after]
    assert worker.replacements == replaced + 1 and not worker.warnings
