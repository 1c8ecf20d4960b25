"""One case, start to reply, inside the device worker's process.

inputs from the seed (a repeat's restored instead: ``repeats``) → goldens (read from the golden
process's file) → kernel import → launch → checks.
Returns a ``protocol.CaseReply``; the front end turns it into a ``Result``
(classifying exceptions there, where the log and exit status are known too).
The in-process benchmark loop calls this same function, so the harness's
overhead is measured against exactly this work.
"""
from __future__ import annotations

import contextlib
import time
import traceback
from typing import Callable

import torch

from harness.goldens.cache import GoldenCache
from harness.worker import checks
from harness.worker import dumps
from harness.worker import determinism
from harness.worker import hints
from harness.worker import hygiene
from harness.worker import inputs
from harness.worker import repeats as reuse
from harness.worker import timing
from harness import memory_plan
from harness.worker.findings import Finding, Findings
from harness.worker.input_digest import digest_inputs
from harness.case import Case
from harness.devices import Backend, Device
from harness.worker.launch import ContractError, launch
from harness.worker.protocol import CaseReply, Failure, GoldenRef, Stage
from harness.worker.spec_inputs import golden_source
from harness.worker.kernel_loader import KernelLoader
from harness.worker.spec_module import SpecError
from harness.outcomes import Outcome

GOLDEN_DTYPES = {"fp32": torch.float32, "fp64": torch.float64}


class StageError(Exception):
    """An exception tagged with the stage it came from (import, contract, launch, ...)."""

    def __init__(self, stage: Stage, exc: BaseException):
        super().__init__(stage.value)
        self.stage, self.exc = stage, exc


def _stage(stage: Stage, fn: Callable, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except SpecError as exc:  # a spec op's own code (its specs, inputs, golden, comparator): GOLDEN_ERROR
        raise StageError(Stage.SPEC, exc) from exc
    except Exception as exc:  # tagged and re-raised; classified by the front end
        raise StageError(stage, exc) from exc


def _goldens(case: Case, ci: inputs.CaseInputs, golden_cache: GoldenCache, golden_dtype: str,
             golden: GoldenRef | None, inputs_digest: str) -> tuple[dict[str, torch.Tensor], bool]:
    """The case's goldens and whether they came from the cache; ``inputs_digest``: the digest of
    ``ci`` as generated (a spec op's is checked against the golden process's)."""
    dtype = GOLDEN_DTYPES[golden_dtype]
    if case.spec is not None:     # a spec op: its module's golden, on the host (docs/specs.md)
        from harness.worker.spec_inputs import check_reproduced
        source = golden_source(case)
        if golden is None:
            return golden_cache.get_or_compute(source, ci.spec, inputs.on_host(ci), dtype)
        found = golden_cache.read(source, ci.spec, golden.path, dtype, golden.device)
        check_reproduced(case, golden.path, inputs_digest)
        return found, golden.hit
    if golden is None:       # in-process (the benchmark's loop, or no golden process could start): on the host
        return golden_cache.get_or_compute(case.op, ci.spec, inputs.on_host(ci).args, dtype)
    return golden_cache.read(case.op, ci.spec, golden.path, dtype, golden.device), golden.hit


def _latency(case: Case, ci, launched, kernel, torch_device, device: Device, backend: Backend,
             passed: bool) -> dict | None:
    """``metrics.latency`` when the case asks for it: timed only once its checks passed (a fast
    wrong kernel is no win), else why not (docs/latency.md)."""
    if case.latency is None:
        return None
    if not passed:
        return timing.not_measured("the case failed its checks: latency is measured for correct results only")
    name = backend.describe(device).get("device_name", "") if device.kind != "cpu" else ""
    try:
        return timing.measure(case, ci, launched, kernel, torch_device, device, backend, name)
    except Exception as exc:  # the first call passed; a later one raising is said, not hidden
        return timing.not_measured(f"a timed call raised {type(exc).__name__}: {exc}")


def _hint(case: Case, ci: inputs.CaseInputs, goldens: dict[str, torch.Tensor], launched, found: Findings,
          golden_dtype: str) -> tuple[str, str]:
    """``(hint, "")``, or ``("", why)`` when the hint could not be computed: a hint is advice, so
    its failure keeps the checks' verdict and is said in ``metrics.hint_error``."""
    try:
        return hints.find_hint(case, ci, goldens, launched, found, GOLDEN_DTYPES[golden_dtype]), ""
    except Exception as exc:  # noqa: BLE001 (said in the result, never hides the verdict)
        return "", f"{type(exc).__name__}: {exc}"


def _collector(case: Case, ci: inputs.CaseInputs, golden_cache: GoldenCache, golden_dtype: str,
               golden: GoldenRef | None) -> dumps.Collector:
    dtype = GOLDEN_DTYPES[golden_dtype]
    source = golden_cache.intermediates(golden_source(case), ci.spec, golden.path if golden else None, dtype,
                                        golden.device if golden else "cpu")
    return dumps.Collector(case, ci, source)


def _rerun_with_dumps(case: Case, ci: inputs.CaseInputs, goldens: dict, launched, kernel: Callable,
                      torch_device, synchronize: Callable[[], None], golden_cache: GoldenCache,
                      golden_dtype: str, golden: GoldenRef | None) -> tuple[dumps.Collector, Findings | None]:
    """The failing launch once more, on the same inputs (its buffers back to their pre-launch
    bytes), with ``dump`` and a dump folder: the collector, and what the checks found this time
    (None when the rerun itself raised: its intermediates up to the failure are still there)."""
    collector = _collector(case, ci, golden_cache, golden_dtype, golden)
    launched.buffers.restore(ci)
    with dumps.dump_folder() as folder:
        try:
            again = launch(kernel, ci, torch_device, synchronize, launched.buffers, dump=collector)
        except Exception as exc:    # the first launch's result stands; say why the rerun has none
            collector.notes.append(f"the rerun with dumps raised {type(exc).__name__}: {exc}")
            again = None
        collector.read_folder(folder)
    return collector, (checks.run_checks(case, ci, goldens, again) if again is not None else None)


def intermediate_findings(found: Findings, collector: dumps.Collector,
                          rerun: Findings | None) -> Findings:
    """``found`` with what the intermediates say: the first bad one in the summary line, a bad dump
    a CONTRACT finding, a passing case whose intermediate is bad a note (docs/intermediates.md)."""
    data = collector.to_metrics()
    if rerun is not None:
        data["rerun"] = {"outcome": rerun.outcome.value, "summary": rerun.summary}
        if rerun.outcome.passed:
            data["notes"].append("the rerun with dumps passed: the failure did not repeat (flaky)")
    items = list(found.items)
    if rerun is not None and rerun.outcome.passed and items:     # its dumps describe a launch that passed
        first = items[0]
        items[0] = Finding(first.outcome, f"{first.message}; the rerun with dumps passed (flaky)",
                           first.detail)
    elif data["dumped"] and items:      # where inside the kernel the failure the checks found begins
        first = items[0]
        items[0] = Finding(first.outcome, f"{first.message}; {data['headline']}", first.detail)
    elif data["dumped"] and data["first_bad_intermediate"]:
        data["notes"].append(f"outputs pass, but {data['headline']}")
    # A refused dump is the diagnosis's trouble, not the outputs': it never changes the outcome or
    # the summary's first finding (docs/intermediates.md); it is listed after the checks' findings.
    if data["problems"] and not items:
        data["notes"].append(f"outputs pass; {len(data['problems'])} dump(s) refused: {data['problems'][0]}")
    items += [Finding(Outcome.CONTRACT, f"dump refused: {p}") for p in data["problems"]] if items else []
    return Findings(found.outcome, tuple(items), {**found.metrics, "intermediates": data})


def execute_case(case: Case, device: Device, backend: Backend, golden_cache: GoldenCache,
                 loader: KernelLoader, golden_dtype: str = "fp32", *, golden: GoldenRef | None = None,
                 repeat: int = 0, baseline: str | None = None,
                 baselines: determinism.Baselines | None = None,
                 repeats: reuse.Repeats | None = None, pristine: hygiene.Snapshot | None = None,
                 intermediates: str = "off") -> CaseReply:
    """``golden``: the golden process's file of this case's goldens, read (key and digest checked)
    through ``golden_cache``; None computes them here (``golden_cache.get_or_compute``).
    ``baseline``: a file to compare every output and cache with bit for bit (fixed-seed
    flake hunts; the first iteration writes it), kept in ``baselines`` between cases.
    ``repeats``: this worker's kept inputs; a case kept there is restored instead of generated
    (``harness/worker/repeats.py``).  ``pristine``: the worker's snapshot at start; a state that
    changed since, found before the kernel runs, is a reply with ``deferred`` and no verdict.
    ``intermediates``: ``off``, ``on-failure`` (a failing case is launched once more on the same
    inputs with ``dump`` and ``$HARNESS_DUMP_DIR``, and its intermediates compared) or ``always``
    (every launch dumps); docs/intermediates.md."""
    t0 = time.perf_counter()
    # what the kernel leaves behind in this process (docs/architecture.md); the case names the kernel a
    # change is traced to
    watch = hygiene.Watch(pristine, case.case_id, case.kernel)
    collector: dumps.Collector | None = None
    case_plan: memory_plan.MemoryPlan | None = None       # planned once: for the room a new state needs, and for keeping it
    try:
        torch_device = backend.torch_device(device)
        wanted = _stage(Stage.INPUTS, reuse.key, case, golden, golden_dtype) if repeats else ""
        kept = repeats.take(wanted) if repeats else None
        if kept is not None:  # a repeat: the first one's inputs, its buffers back to their pre-launch bytes
            _stage(Stage.INPUTS, kept.buffers.restore, kept.ci)
            ci, generated = kept.ci, kept.generated
        else:
            if repeats:
                case_plan = memory_plan.plan(case, golden_dtype)
                repeats.make_room(case_plan)
            ci = _stage(Stage.INPUTS, inputs.generate, case, torch_device)      # drawn where the kernel runs
            generated = _stage(Stage.INPUTS, digest_inputs, ci.op, {**ci.args, **ci.initial})   # before the kernel can touch them
        t1 = time.perf_counter()
        if kept is not None:
            goldens, hit = kept.goldens, (golden.hit if golden else True)
        else:
            goldens, hit = _stage(Stage.GOLDEN, _goldens, case, ci, golden_cache, golden_dtype, golden,
                                 generated.digest)
        t2 = time.perf_counter()
        collector = (_stage(Stage.GOLDEN, _collector, case, ci, golden_cache, golden_dtype, golden)
                     if intermediates == "always" else None)
        with dumps.dump_folder() if collector else contextlib.nullcontext() as folder, watch:
            # the kernel's window: its import and its launch
            kernel = _stage(Stage.IMPORT, loader.load, case.kernel, case.op)
            try:
                launched = launch(kernel, ci, torch_device, lambda: backend.synchronize(device),
                                  kept.buffers if kept else None, dump=collector, goldens=goldens)
            except ContractError as exc:
                raise StageError(Stage.CONTRACT, exc) from exc
            except Exception as exc:
                raise StageError(Stage.LAUNCH, exc) from exc
            if collector:
                _stage(Stage.CHECK, collector.read_folder, folder)
        t3 = time.perf_counter()
        # on the kernel's device: only what the report prints comes to the host
        found = hygiene.with_findings(_stage(Stage.CHECK, checks.run_checks, case, ci, goldens, launched),
                                      watch.disturbed)
        hint, hint_error = _hint(case, ci, goldens, launched, found, golden_dtype)
        bits = None
        if baseline:
            bits = _stage(Stage.DETERMINISM, determinism.diff_against_baseline,
                          baselines or determinism.Baselines(), baseline,
                          ci.op, launched.outputs, launched.caches, repeat, found.outcome.passed)
        # after the bitwise comparison: the rerun overwrites the buffers the first launch left
        # never a second launch of a kernel that changed this worker (left processes, patched torch):
        # the rerun runs outside the hygiene window, and the worker is replaced after this case anyway
        if (collector is None and intermediates == "on-failure" and not found.outcome.passed
                and not watch.disturbed.replace_reason):
            collector, rerun = _stage(Stage.CHECK, _rerun_with_dumps, case, ci, goldens, launched, kernel,
                                      torch_device, lambda: backend.synchronize(device),
                                      golden_cache, golden_dtype, golden)
        else:
            rerun = None
        if collector is not None:
            found = intermediate_findings(found, collector, rerun)
        t4 = time.perf_counter()
        latency = _latency(case, ci, launched, kernel, torch_device, device, backend, found.outcome.passed)
    except hygiene.Deferred as changed:
        return CaseReply(case.case_id, time.perf_counter() - t0, deferred=str(changed), deferred_to=changed.blamed,
                         replace_worker=f"changed since the worker started: {changed}")
    except StageError as tagged:
        exc = tagged.exc
        failure = Failure(tagged.stage, type(exc).__name__, str(exc), "".join(traceback.format_exception(exc)))
        return CaseReply(case.case_id, time.perf_counter() - t0, failure=failure,
                         metrics=watch.disturbed.metrics(), replace_worker=watch.disturbed.replace_reason,
                         warnings=watch.disturbed.warnings)
    finally:
        if collector is not None:      # its golden intermediates' file (one a rerun that raised made: when collected)
            collector.close()
    if repeats:
        plan = kept.plan if kept else case_plan or memory_plan.plan(case, golden_dtype)
        repeats.keep(wanted, reuse.Kept(ci, generated, goldens, hit, launched.buffers, plan),
                     launched, watch.disturbed.replace_reason)
    # golden_s: the golden process's time for this case and this worker's read of its file
    timings = {"inputs_s": t1 - t0, "golden_s": (golden.seconds if golden else 0.0) + t2 - t1,
               **({"golden_read_s": t2 - t1} if golden else {}), "launch_s": t3 - t2, "check_s": t4 - t3}
    metrics = {**found.metrics, "timings": timings, "golden_cache_hit": hit,
               "golden_source": f"golden process {golden.pid}" if golden else "device worker",
               "inputs_bytes": generated.nbytes, "inputs_digest": generated.digest,
               "inputs_reused": kept is not None, "inputs_kept_bytes": repeats.nbytes if repeats else 0,
               "kernel": loader.origin(case.kernel, case.op),
               **({"determinism": bits} if bits is not None else {}),
               **({"latency": latency} if latency is not None else {}),
               # what an adapted kernel copied, which the buffer checks cannot see (docs/adapters.md)
               # (an adapter reports its last call as ``last_call.to_metrics()``: a pack's adapters,
               # harness/packs/qwen3/adapters.py ``Adapted``, imported by the kernel, never here)
               **({"adapter": kernel.last_call.to_metrics()}
                  if callable(getattr(getattr(kernel, "last_call", None), "to_metrics", None)) else {}),
               **({"hint_error": hint_error} if hint_error else {}),
               **watch.disturbed.metrics()}
    return CaseReply(case.case_id, time.perf_counter() - t0, outcome=found.outcome,
                     summary=found.summary + (f"; hint: {hint}" if hint else ""),
                     report=found.report + (f"\nhint: {hint}" if hint else ""), metrics=metrics,
                     replace_worker=watch.disturbed.replace_reason, warnings=watch.disturbed.warnings, hint=hint)
