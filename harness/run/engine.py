"""The one engine: run cases on devices, one warm worker per device, results as they come.

The CLI, the pytest plugin and later loops (flake, compare, bisect) all call
``Engine.run``.  Each device has a thread that owns its ``DeviceWorker`` and
pulls cases from a shared queue, so a slow or crashing device never stalls the
others.  Callbacks (progress, store) are called under one lock.
"""
from __future__ import annotations

import itertools
import queue
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from harness.case import Case
from harness.commands.process import OUTPUT_CAP_BYTES, Sessions
from harness.commands.runner import Context as CommandContext, run_case as run_command_case, scratch_name
from harness.devices import Device, Memory, accelerator_memory, host_memory
from harness.memory_plan import MemoryPlan, fit_problem, plan
from harness.outcomes import Outcome, Result
from harness.processes import sweep
from harness.run.golden_process import GoldenProcess
from harness.run.pool import DeviceLost, DeviceWorker, case_fields, log_name, worker_env
from harness.run.spawn import WorkerOptions


HOST_MEMORY_AGE_S = 0.5      # a case's plan is checked against what was free at most this long ago


@dataclass(frozen=True)
class RunOptions:
    devices: list[Device]
    worker: WorkerOptions
    run_device_tier_on_cpu: bool = False
    exitfirst: bool = False
    prefetch_goldens: bool = True   # the next case's goldens are made while this case runs


@dataclass(frozen=True)
class Planned:
    index: int
    case: Case
    repeat: int = 0
    bitwise: bool = False      # compare every output and cache bit for bit with the case's first iteration


PREFETCH_AHEAD = 3                 # waiting cases whose goldens are asked for ahead of their turn
PREFETCH_BYTES = 256 << 20         # beyond the next case, while their golden shares stay under this


def tier_skip_reason(case: Case, device: Device, run_device_tier_on_cpu: bool) -> str | None:
    if case.tier == "device" and device.kind == "cpu" and not run_device_tier_on_cpu:
        return "tier device: needs an accelerator (pass --tier all to run it on cpu)"
    return None


class Engine:
    def __init__(self, options: RunOptions):
        self.options = options
        # one golden process per run, shared by the devices: goldens never computed where a kernel runs
        self.goldens = GoldenProcess(options.worker, fork=options.worker.fork_cpu_workers
                                     and all(d.kind == "cpu" for d in options.devices))
        self.workers = [DeviceWorker(d, options.worker, name=f"w{i}", goldens=self.goldens)
                        for i, d in enumerate(options.devices)]
        self._lock = threading.Lock()
        self._baselines: Path | None = None
        self._baselines_lock = threading.Lock()
        self._accelerators: dict[Device, Memory | None] | None = None
        self._accelerators_lock = threading.Lock()
        self._asked: dict[int, Planned] = {}     # id -> the waiting items whose goldens were asked for (held: ids stay unique)
        self._asked_lock = threading.Lock()
        self._host: tuple[float, Memory | None] | None = None
        self._commands = Sessions()          # command cases running now (harness.commands)
        self.warnings: list[str] = []        # what the run-end sweep killed (harness.processes.sweep)

    def close(self) -> None:
        self._commands.kill_all()            # an interrupted run leaves no command running
        for w in self.workers:
            w.close()
        self.goldens.close()
        # nothing with the run's marker outlives the run, whatever a kernel did to its own process
        killed = sweep()
        if killed:
            self.warnings.append(f"at the end of the run, {len(killed)} process(es) with this run's marker were still "
                                 f"running outside its workers (killed): {', '.join(killed)}")
        if self._baselines is not None:   # bit-exact copies of every buffer: can be large, and only this run's
            shutil.rmtree(self._baselines, ignore_errors=True)
            self._baselines = None

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run_one(self, case: Case, repeat: int = 0, bitwise: bool = False) -> Result:
        """Run a single case on the first device's worker, in the caller's thread (pytest items use this);
        a command case's own result (its tests' results: ``run_all``)."""
        return self.run_all(case, repeat, bitwise)[0]

    def run_all(self, case: Case, repeat: int = 0, bitwise: bool = False) -> list[Result]:
        """``run_one``, with every result: a command case's own, then one per test of its JUnit."""
        try:
            got = self._run_on(self.workers[0], Planned(0, case, repeat, bitwise))
        except DeviceLost as exc:
            return [lost_result(case, repeat, self.workers[0].device, str(exc))]
        return got if isinstance(got, list) else [got]

    def baseline_path(self, case: Case, device: Device) -> Path:
        """Where a fixed-seed hunt keeps the case's first buffers: per case, seed and device
        (two devices need not agree bit for bit; one device with itself must)."""
        with self._baselines_lock:    # this engine's own: another run's baseline must never be compared with
            if self._baselines is None:
                self.options.worker.log_dir.mkdir(parents=True, exist_ok=True)
                self._baselines = Path(tempfile.mkdtemp(prefix="baselines-", dir=self.options.worker.log_dir))
        stem = log_name(case.case_id, 0).removesuffix(".r0.log")
        return self._baselines / f"{stem}.s{case.seed}.{str(device).replace(':', '')}.safetensors"

    def _host_memory(self) -> Memory | None:
        """The host's memory, read at most every ``HOST_MEMORY_AGE_S`` (a read costs 0.6 ms, a tiny case 15)."""
        now = time.monotonic()
        with self._accelerators_lock:
            if self._host is None or now - self._host[0] > HOST_MEMORY_AGE_S:
                self._host = (now, host_memory())
            return self._host[1]

    def memory_skip_reason(self, case: Case, device: Device, planned: MemoryPlan | None = None) -> str | None:
        """Why ``case`` cannot fit ``device`` (its memory plan, ``planned`` when the caller made it,
        against what is free), before it is sent."""
        host = self._host_memory()
        planned = planned or plan(case, self.options.worker.golden_dtype)
        if device.kind == "cpu":
            return fit_problem(planned, device, host, host)
        with self._accelerators_lock:   # asked once per run, before the workers allocate
            if self._accelerators is None:
                self._accelerators = accelerator_memory(self.options.devices, worker_env(self.options.worker, {}))
        return fit_problem(planned, device, self._accelerators.get(device), host, self.options.worker.golden_device)

    def skip_reason(self, case: Case, device: Device, planned: MemoryPlan | None = None) -> str | None:
        if case.command is not None:        # no kernel, no golden: nothing to plan memory for
            return tier_skip_reason(case, device, self.options.run_device_tier_on_cpu)
        return (tier_skip_reason(case, device, self.options.run_device_tier_on_cpu)
                or self.memory_skip_reason(case, device, planned))

    def _prefetch(self, p: Planned, waiting: queue.Queue, device: Device) -> None:
        """Ask for ``p``'s goldens, then for those of the cases waiting next (whichever device
        takes them), so the golden process makes them while ``p``'s kernel runs: up to
        ``PREFETCH_AHEAD`` cases, while their goldens' share stays under ``PREFETCH_BYTES`` (one
        case ahead, as before, whatever its size).  One ahead left the device worker waiting on a
        golden one case in three on tiny cases (0.7 ms a case on average): a golden that runs
        long on a busy core is not made up by the next."""
        with waiting.mutex:
            following = list(itertools.islice(waiting.queue, PREFETCH_AHEAD))
        with self._asked_lock:
            asked = self._asked.pop(id(p), None) is p       # its turn now: forgotten
        budget = PREFETCH_BYTES
        for i, item in enumerate((p, *following)):
            if i == 0 and asked:
                continue
            with self._asked_lock:
                if i > 0 and self._asked.get(id(item)) is item:
                    continue              # asked while an earlier case ran: each is planned once here
            planned = plan(item.case, self.options.worker.golden_dtype) if item.case.command is None else None
            if planned is not None and self.skip_reason(item.case, device, planned) is None:
                if i > 1:
                    budget -= planned.golden_share
                    if budget < 0:
                        return            # asked for later, nearer its turn
                self.goldens.prefetch(item.case)
            if i > 0:
                with self._asked_lock:
                    self._asked[id(item)] = item

    def _run_on(self, worker: DeviceWorker, p: Planned) -> Result | list[Result]:
        case, repeat = p.case, p.repeat
        reason = self.skip_reason(case, worker.device)
        if reason:
            return Result(outcome=Outcome.SKIPPED, summary=reason, **case_fields(case, repeat, worker.device, None))
        if case.command is not None:
            return self._run_command(worker.device, p)
        log = self.options.worker.log_dir / log_name(case.case_id, repeat)
        baseline = self.baseline_path(case, worker.device) if p.bitwise else None
        return worker.run(case, log, repeat, baseline=baseline)

    def _run_command(self, device: Device, p: Planned) -> list[Result]:
        """A command case: run here, in the device's thread, never in the device worker (harness.commands)."""
        w = self.options.worker
        ctx = CommandContext(device=device, repeat=p.repeat, log_path=w.log_dir / log_name(p.case.case_id, p.repeat),
                             scratch=w.log_dir / "commands" / scratch_name(p.case.case_id, p.repeat, device),
                             base_env=w.base_env, worktree=w.worktree, rules=w.rules,
                             cap_bytes=min(w.max_log_bytes, OUTPUT_CAP_BYTES), sessions=self._commands)
        return run_command_case(p.case, ctx)

    def run(self, planned: Iterable[Planned],
            on_start: Callable[[Planned, DeviceWorker], None] | None = None,
            on_result: Callable[[Planned, Result], None] | None = None,
            should_run: Callable[[Planned], bool] | None = None) -> list[Result]:
        """Run ``planned`` across the devices; results in planned order (those that ran; a command
        case's own result, then its tests', each given to ``on_result``).

        ``on_result`` may return a replacement for the result (as it was recorded).
        ``should_run`` is asked (under the callback lock) as each item is taken: False
        drops it unrun (flake hunts stop a case after K failures, or at a deadline).
        """
        todo: queue.Queue[Planned] = queue.Queue()
        items = list(planned)
        for p in items:
            todo.put(p)
        results: dict[int, list[Result]] = {}
        stop = threading.Event()
        interrupted = threading.Event()     # what a case comes to once its worker is killed for it is not its result
        errors: list[BaseException] = []

        def record(p: Planned, batch: list[Result]) -> None:
            """Keep ``p``'s results as ``on_result`` records them (it may return a replacement,
            e.g. with its ref set); called under the callback lock."""
            kept = results[p.index] = []
            for result in batch:
                recorded = on_result(p, result) if on_result else None
                kept.append(recorded if isinstance(recorded, Result) else result)

        def drain(worker: DeviceWorker) -> None:
            try:
                while not stop.is_set():
                    try:
                        p = todo.get_nowait()
                    except queue.Empty:
                        return
                    with self._lock:
                        if should_run is not None and not should_run(p):
                            continue
                        if on_start:
                            on_start(p, worker)
                    if self.options.prefetch_goldens:
                        self._prefetch(p, todo, worker.device)
                    try:
                        got = self._run_on(worker, p)
                    except DeviceLost:
                        # the case did not run: it goes back for another device, and this device takes no more
                        todo.put(p)
                        return
                    if interrupted.is_set():
                        return
                    batch = got if isinstance(got, list) else [got]
                    with self._lock:
                        record(p, batch)
                    if self.options.exitfirst and batch[0].outcome.failed:
                        stop.set()
            except BaseException as exc:  # surfaced in the caller's thread
                errors.append(exc)
                stop.set()

        while True:
            live = [w for w in self.workers if not w.lost]
            threads = [threading.Thread(target=drain, args=(w,), name=f"device-{w.device}", daemon=True)
                       for w in live]
            for t in threads:
                t.start()
            try:
                for t in threads:
                    while t.is_alive():
                        t.join(timeout=0.2)
            except KeyboardInterrupt:
                interrupted.set()
                stop.set()
                self.close()
                raise
            # a device lost mid-run put its case back: another round on the devices left, if any
            if errors or stop.is_set() or todo.empty() or not any(not w.lost for w in self.workers):
                break
        with self._asked_lock:          # what never had its turn (a stop, -x, a stop rule)
            for p in items:
                self._asked.pop(id(p), None)
        if errors:
            raise errors[0]
        while not stop.is_set():        # every device lost: what is left is said, not dropped
            try:
                p = todo.get_nowait()
            except queue.Empty:
                break
            lost = [w for w in self.workers if w.lost]
            with self._lock:
                record(p, [lost_result(p.case, p.repeat, lost[0].device,
                                       "; ".join(f"{w.device}: {w.lost}" for w in lost))])
        return [r for p in items if p.index in results for r in results[p.index]]


def lost_result(case: Case, repeat: int, device: Device, why: str) -> Result:
    """A case no device could take: every device it could go to was lost."""
    return Result(outcome=Outcome.SKIPPED, summary=f"device lost: {why}",
                  **case_fields(case, repeat, device, None))
