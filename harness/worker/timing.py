"""A case's kernel timed on the inputs it was checked with (runs in the device worker; docs/latency.md).

After the checks pass, ``time_kernel`` calls the kernel again and again on the same inputs and
buffers: warmup for ``warmup_s`` (caches, clocks, lazy compilation), then samples until the
median's 95% interval (order statistics, ``harness.stats.median_ci``) is within ``target`` of
the median, or ``budget_s`` of sampling has passed, or ``max_samples`` were taken; the relative
half-width reached is reported as the noise either way.

One sample is one call: on the host, the process's CPU time (``process_time_ns``; ``clock: wall``:
``perf_counter_ns``) around the call and a synchronize; on
an accelerator, a pair of the backend's events recorded on the current stream around the call
(``Backend.events``: ``torch.cuda``/``torch.npu``), read after the end event completes, so the
host's launch overhead between samples is not counted.  Cold samples write ``cache_bytes``
into a scratch buffer before each call (outside the timed window) so that the kernel's
inputs are not in the last-level cache; on by default on accelerators, off on the host.

What the kernel writes: the outputs are overwritten whole by every call, and the caches are
written at the slots of a fixed slot mapping, so a call on buffers that a previous call wrote
reads and writes what the first did (idempotent).  A kernel whose output depends on what its
buffers held (``restore: true``) gets them back before each sample, outside the timed window.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from harness import stats
from harness.case import LatencySpec

BATCH_S = 0.02          # the interval is re-checked about this often (sorting samples is not free)


class HostTimer:
    """``perf_counter_ns`` around the call, the device synchronized before and after."""

    method = "perf_counter_ns"

    def __init__(self, synchronize: Callable[[], None]):
        self.synchronize = synchronize
        self._t0 = 0

    def start(self) -> None:
        self.synchronize()
        self._t0 = time.perf_counter_ns()

    def stop(self) -> float:
        self.synchronize()
        return (time.perf_counter_ns() - self._t0) * 1e-9


class CpuTimer(HostTimer):
    """The process's CPU time (every thread's) around the call: on a shared host, time the process
    spent descheduled is not counted, so another tenant's load does not pass for the kernel's."""

    method = "process_time_ns"

    def start(self) -> None:
        self.synchronize()
        self._t0 = time.process_time_ns()

    def stop(self) -> float:
        self.synchronize()
        return (time.process_time_ns() - self._t0) * 1e-9


class EventTimer:
    """Two device events on the current stream; ``elapsed_time`` is in milliseconds."""

    def __init__(self, events, name: str):
        self.method = f"{name} events"
        self._start = events.Event(enable_timing=True)
        self._end = events.Event(enable_timing=True)

    def start(self) -> None:
        self._start.record()

    def stop(self) -> float:
        self._end.record()
        self._end.synchronize()
        return self._start.elapsed_time(self._end) * 1e-3


@dataclass(frozen=True)
class Timing:
    samples_s: tuple[float, ...]
    median_s: float
    ci_low_s: float
    ci_high_s: float
    rel_noise: float            # the interval's half-width over the median
    warmup_calls: int
    cold: bool
    method: str
    stopped_by: str             # "target" | "budget" | "max_samples"
    wall_s: float

    def to_metrics(self) -> dict:
        """``metrics.latency`` (docs/json-schema.md); the samples go too: compare pools them."""
        return {"measured": True, "median_s": self.median_s, "ci_low_s": self.ci_low_s, "ci_high_s": self.ci_high_s,
                "samples": len(self.samples_s), "rel_noise": self.rel_noise, "cold": self.cold,
                "method": self.method, "warmup_calls": self.warmup_calls, "stopped_by": self.stopped_by,
                "wall_s": self.wall_s, "samples_s": list(self.samples_s)}


def _interval(samples: list[float]) -> tuple[float, float, float, float]:
    med = stats.median(samples)
    ci = stats.median_ci(samples) or (min(samples), max(samples))
    half = (ci[1] - ci[0]) / 2
    return med, ci[0], ci[1], (half / med if med > 0 else float("inf"))


def time_kernel(call: Callable[[], object], timer, spec: LatencySpec, *,
                flush: Callable[[], None] | None = None, restore: Callable[[], None] | None = None,
                clock: Callable[[], float] = time.perf_counter) -> Timing:
    """Samples of ``call`` (module docstring).  ``flush``: evicts the caches (cold samples);
    ``restore``: the writable buffers back to their pre-launch bytes; both run outside the window."""
    began = clock()
    warmup_calls = 0
    while warmup_calls < 1 or clock() - began < spec.warmup_s:
        call()
        warmup_calls += 1
    samples: list[float] = []
    start = clock()
    next_check = start + BATCH_S
    stopped_by = "max_samples"
    while len(samples) < spec.max_samples:
        if restore is not None:
            restore()
        if flush is not None:
            flush()
        timer.start()
        call()
        samples.append(timer.stop())
        now = clock()
        if len(samples) >= spec.min_samples and now >= next_check:
            next_check = now + BATCH_S
            if _interval(samples)[3] < spec.target:
                stopped_by = "target"
                break
            if now - start >= spec.budget_s:
                stopped_by = "budget"
                break
    med, lo, hi, noise = _interval(samples)
    return Timing(tuple(samples), med, lo, hi, noise, warmup_calls, flush is not None, timer.method, stopped_by,
                  clock() - began)


def not_measured(why: str) -> dict:
    """``metrics.latency`` of a case that was not timed, and why."""
    return {"measured": False, "why": why}


def timer_for(backend, device, synchronize: Callable[[], None], clock: str = "auto"):
    """Device events where the backend has them; on the host the process's CPU time (``auto``,
    ``cpu``) or ``perf_counter_ns`` (``wall``)."""
    events = backend.events(device)
    if events is not None:
        return EventTimer(events, device.kind)
    return HostTimer(synchronize) if clock == "wall" else CpuTimer(synchronize)


def measure(case, ci, launched, kernel, torch_device, device, backend, device_name: str = "") -> dict:
    """``metrics.latency`` of a case whose checks passed: ``kernel`` timed on the inputs and buffers it
    was checked with, and the derived figures (``harness/worker/work.py``, the peak table of
    ``harness/devices.py``)."""
    import torch

    from harness.devices import peak_bytes_per_s
    from harness.worker.launch import kernel_kwargs
    from harness.worker.work import work

    spec: LatencySpec = case.latency
    kwargs = kernel_kwargs(ci, torch_device, launched.buffers)
    cold = spec.cold if spec.cold is not None else device.kind != "cpu"
    flush = None
    if cold:
        scratch = torch.empty(backend.cache_bytes(device), dtype=torch.uint8, device=torch_device)
        flush = scratch.zero_
    restore = (lambda: launched.buffers.restore(ci)) if spec.restore else None
    timer = timer_for(backend, device, lambda: backend.synchronize(device), spec.clock)
    timing = time_kernel(lambda: kernel(**kwargs), timer, spec, flush=flush, restore=restore)
    backend.synchronize(device)
    moved = work(ci)
    out = timing.to_metrics()
    out.update(restored=spec.restore, bytes=moved.bytes, flops=moved.flops,
               gb_per_s=moved.bytes / timing.median_s / 1e9 if timing.median_s > 0 else None,
               tflop_per_s=(moved.flops / timing.median_s / 1e12) if moved.flops and timing.median_s > 0 else None)
    peak = peak_bytes_per_s(device_name) if device.kind != "cpu" else None
    if peak is not None and out["gb_per_s"] is not None:
        out.update(peak_gb_per_s=peak[0] / 1e9, peak_source=peak[1], fraction_of_peak=out["gb_per_s"] * 1e9 / peak[0])
    return out
