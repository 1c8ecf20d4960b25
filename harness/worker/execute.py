"""One case, start to reply, inside the device worker's process.

inputs from the seed (a repeat's restored instead: ``repeats``) → goldens (read from the golden
process's file) → kernel import → launch → checks.
Returns a ``protocol.CaseReply``; the front end turns it into a ``Result``
(classifying exceptions there, where the log and exit status are known too).
The in-process benchmark loop calls this same function, so the harness's
overhead is measured against exactly this work.
"""
from __future__ import annotations

import importlib
import time
import traceback
from typing import Callable

import torch

from harness.adapters import Adapted
from harness.goldens.cache import GoldenCache
from harness.worker import checks
from harness.worker import determinism
from harness.worker import hints
from harness.worker import hygiene
from harness.worker import inputs
from harness.worker import repeats as reuse
from harness.worker import timing
from harness import memory_plan
from harness.worker.input_digest import digest_inputs
from harness.case import Case
from harness.devices import Backend, Device
from harness.worker.launch import ContractError, launch
from harness.worker.protocol import CaseReply, Failure, GoldenRef, Stage
from harness.provenance import kernel_origin
from harness.registry import target as kernel_target

GOLDEN_DTYPES = {"fp32": torch.float32, "fp64": torch.float64}


class StageError(Exception):
    """An exception tagged with the stage it came from (import, contract, launch, ...)."""

    def __init__(self, stage: Stage, exc: BaseException):
        super().__init__(stage.value)
        self.stage, self.exc = stage, exc


class KernelLoader:
    """Imports ``module:callable`` once per process."""

    def __init__(self) -> None:
        self._loaded: dict[str, Callable] = {}
        self.origins: dict[str, dict] = {}

    def load(self, kernel: str, op: str) -> Callable:
        target = kernel_target(kernel, op)
        if target not in self._loaded:
            module_name, _, attr = target.partition(":")
            module = importlib.import_module(module_name)
            fn = getattr(module, attr, None)
            if fn is None or not callable(fn):
                raise ImportError(f"{module_name} has no callable {attr!r}")
            self._loaded[target] = fn
            self.origins[target] = {"target": target, **kernel_origin(getattr(module, "__file__", None))}
        return self._loaded[target]

    def origin(self, kernel: str, op: str) -> dict:
        return self.origins.get(kernel_target(kernel, op), {})


def _stage(stage: Stage, fn: Callable, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # tagged and re-raised; classified by the front end
        raise StageError(stage, exc) from exc


def _goldens(case: Case, ci: inputs.CaseInputs, golden_cache: GoldenCache, golden_dtype: str,
             golden: GoldenRef | None) -> tuple[dict[str, torch.Tensor], bool]:
    dtype = GOLDEN_DTYPES[golden_dtype]
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


def _hint(case: Case, ci: inputs.CaseInputs, goldens: dict[str, torch.Tensor], launched, found: checks.Findings,
          golden_dtype: str) -> tuple[str, str]:
    """``(hint, "")``, or ``("", why)`` when the hint could not be computed: a hint is advice, so
    its failure keeps the checks' verdict and is said in ``metrics.hint_error``."""
    try:
        return hints.find_hint(case, ci, goldens, launched, found, GOLDEN_DTYPES[golden_dtype]), ""
    except Exception as exc:  # noqa: BLE001 (said in the result, never hides the verdict)
        return "", f"{type(exc).__name__}: {exc}"


def execute_case(case: Case, device: Device, backend: Backend, golden_cache: GoldenCache,
                 loader: KernelLoader, golden_dtype: str = "fp32", *, golden: GoldenRef | None = None,
                 repeat: int = 0, baseline: str | None = None,
                 baselines: determinism.Baselines | None = None,
                 repeats: reuse.Repeats | None = None, pristine: hygiene.Snapshot | None = None) -> CaseReply:
    """``golden``: the golden process's file of this case's goldens, read (key and digest checked)
    through ``golden_cache``; None computes them here (``golden_cache.get_or_compute``).
    ``baseline``: a file to compare every output and cache with bit for bit (fixed-seed
    flake hunts; the first iteration writes it), kept in ``baselines`` between cases.
    ``repeats``: this worker's kept inputs; a case kept there is restored instead of generated
    (``harness/worker/repeats.py``).  ``pristine``: the worker's snapshot at start; a state that
    changed since, found before the kernel runs, is a reply with ``deferred`` and no verdict."""
    t0 = time.perf_counter()
    watch = hygiene.Watch(pristine)   # what the kernel leaves behind in this process (docs/architecture.md)
    try:
        torch_device = backend.torch_device(device)
        wanted = _stage(Stage.INPUTS, reuse.key, case, golden, golden_dtype) if repeats else ""
        kept = repeats.take(wanted) if repeats else None
        if kept is not None:  # a repeat: the first one's inputs, its buffers back to their pre-launch bytes
            _stage(Stage.INPUTS, kept.buffers.restore, kept.ci)
            ci, generated = kept.ci, kept.generated
        else:
            if repeats:
                repeats.make_room(memory_plan.plan(case, golden_dtype))
            ci = _stage(Stage.INPUTS, inputs.generate, case, torch_device)      # drawn where the kernel runs
            generated = _stage(Stage.INPUTS, digest_inputs, ci.op, ci.args)   # before the kernel can touch them
        t1 = time.perf_counter()
        if kept is not None:
            goldens, hit = kept.goldens, (golden.hit if golden else True)
        else:
            goldens, hit = _stage(Stage.GOLDEN, _goldens, case, ci, golden_cache, golden_dtype, golden)
        t2 = time.perf_counter()
        with watch:           # the kernel's window: its import and its launch
            kernel = _stage(Stage.IMPORT, loader.load, case.kernel, case.op)
            try:
                launched = launch(kernel, ci, torch_device, lambda: backend.synchronize(device),
                                  kept.buffers if kept else None)
            except ContractError as exc:
                raise StageError(Stage.CONTRACT, exc) from exc
            except Exception as exc:
                raise StageError(Stage.LAUNCH, exc) from exc
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
        t4 = time.perf_counter()
        latency = _latency(case, ci, launched, kernel, torch_device, device, backend, found.outcome.passed)
    except hygiene.Deferred as changed:
        return CaseReply(case.case_id, time.perf_counter() - t0, deferred=str(changed),
                         replace_worker=f"changed since the worker started: {changed}")
    except StageError as tagged:
        exc = tagged.exc
        failure = Failure(tagged.stage, type(exc).__name__, str(exc), "".join(traceback.format_exception(exc)))
        return CaseReply(case.case_id, time.perf_counter() - t0, failure=failure,
                         metrics=watch.disturbed.metrics(), replace_worker=watch.disturbed.replace_reason,
                         warnings=watch.disturbed.warnings)
    if repeats:
        plan = kept.plan if kept else memory_plan.plan(case, golden_dtype)
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
               **({"adapter": kernel.last_call.to_metrics()} if isinstance(kernel, Adapted) else {}),
               **({"hint_error": hint_error} if hint_error else {}),
               **watch.disturbed.metrics()}
    return CaseReply(case.case_id, time.perf_counter() - t0, outcome=found.outcome,
                     summary=found.summary + (f"; hint: {hint}" if hint else ""),
                     report=found.report + (f"\nhint: {hint}" if hint else ""), metrics=metrics,
                     replace_worker=watch.disturbed.replace_reason, warnings=watch.disturbed.warnings, hint=hint)
