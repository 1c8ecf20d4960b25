"""What the warm worker's hygiene costs per case, piece by piece (harness/worker/hygiene.py).

    python bench/bench_hygiene.py [--n 2000] [--clock cpu]
    python bench/bench_hygiene.py --against main [--rounds 7] [--n 1000]


Times, in this process after ``warm_up``: each part of a snapshot, a whole snapshot, the
comparison and restore of an unchanged window (``settle``, which takes the second
snapshot), the comparison with the worker's snapshot at start (``drift``), the ``Watch`` a
case pays (both), and the reply's conversion to plain data (``protocol.plain``) for a typical
passing case's metrics.  Prints microseconds per call (median of 5 rounds), then the window
without what issue 23 added (no hooks, no drift check) and with it, interleaved, with their ratio.

``--against REV``: what a case pays (``Watch`` with the drift check, after ``freeze_baseline``) with
this checkout's ``harness`` and with REV's (``git archive`` into a temporary folder, first on
``PYTHONPATH``), each round one child process of each, alternated so load reaches both; prints the
medians, their difference and the load average before and after (``uptime``).
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import torch

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device, backend
from harness.goldens.cache import GoldenCache
from harness.worker import hooks, hygiene, imports, os_state, protocol
from harness.worker.execute import KernelLoader, execute_case


CLOCK = [time.perf_counter]      # --clock cpu: time.process_time


def per_call_us(fn, n: int, clock=None) -> float:
    """Microseconds per call of ``fn``, median of 5 rounds of ``n``; ``clock``: ``time.process_time``
    for the CPU time (on a loaded host the wall time is mostly waiting for a CPU)."""
    clock = clock or CLOCK[0]
    rounds = []
    for _ in range(5):
        start = clock()
        for _ in range(n):
            fn()
        rounds.append((clock() - start) / n * 1e6)
    return statistics.median(rounds)


def case_cost(n: int) -> tuple[float, float]:
    """Microseconds a case pays for its window (``Watch`` with the drift check), wall and CPU time, with
    only the public API of ``hygiene`` used, so that another revision's harness is timed by the same code."""
    from harness.worker import hygiene
    hygiene.warm_up(torch.device("cpu"))
    hygiene.freeze_baseline()
    import harness.kernels.reference  # noqa: F401  (the modules a worker has imported at its first case)
    pristine = hygiene.snapshot()

    def watch() -> None:
        with hygiene.Watch(pristine):
            pass
    for _ in range(20):
        watch()
    return per_call_us(watch, n, time.perf_counter), per_call_us(watch, n, time.process_time)


def against(rev: str, rounds: int, n: int) -> None:
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="bench-hygiene-") as tmp:
        archive = subprocess.run(["git", "-C", str(root), "archive", rev, "harness"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        trees = {rev: tmp, "this checkout": str(root)}
        times: dict[str, list[float]] = {name: [] for name in trees}
        cpu: dict[str, list[float]] = {name: [] for name in trees}
        print("before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
        for _ in range(rounds):
            for name, tree in trees.items():
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tree, os.environ.get("PYTHONPATH")]))}
                out = subprocess.run([sys.executable, __file__, "--case-cost", "--n", str(n)], env=env, check=True,
                                     capture_output=True, text=True).stdout.split()
                assert out[2] == os.path.join(tree, "harness", "worker", "hygiene.py"), out
                times[name].append(float(out[0]))
                cpu[name].append(float(out[1]))
        print("after: ", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
        for clock, measured in (("wall", times), ("CPU", cpu)):
            for name, values in measured.items():
                print(f"{clock:4s} {name:16s} {statistics.median(values):8.1f} us per case  (rounds: "
                      + ", ".join(f"{v:.0f}" for v in values) + ")")
            old, new = statistics.median(measured[rev]), statistics.median(measured["this checkout"])
            print(f"{clock:4s} {'difference':16s} {new - old:+8.1f} us per case ({new / old:.2f}x)")


def _side_by_side(old_label: str, old_fn, new_label: str, new_fn, n: int) -> None:
    """Two ways of a case's window in 5 interleaved rounds (load changes reach both), medians and ratio."""
    old, new = [], []
    for _ in range(5):
        old.append(per_call_us(old_fn, n // 5))
        new.append(per_call_us(new_fn, n // 5))
    old_us, new_us = statistics.median(old), statistics.median(new)
    print(f"{old_label:36s} {old_us:8.1f} us")
    print(f"{new_label:36s} {new_us:8.1f} us   ({new_us / old_us:.2f}x, +{new_us - old_us:.1f} us per case)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--against", metavar="REV", help="time a case's window here and at REV, alternated")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--case-cost", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="what the pieces and the side-by-side windows are timed with (cpu: process time)")
    parsed = parser.parse_args()
    CLOCK[0] = time.process_time if parsed.clock == "cpu" else time.perf_counter
    n = parsed.n
    if parsed.case_cost:
        from harness.worker import hygiene as timed
        wall, cpu_us = case_cost(n)
        print(f"{wall:.3f} {cpu_us:.3f} {timed.__file__}")
        return
    if parsed.against:
        against(parsed.against, parsed.rounds, n)
        return
    hygiene.warm_up(torch.device("cpu"))
    hygiene.freeze_baseline()       # as the worker does at start: each window's gc.collect() walks only what came since
    case = Case(case_id="bench", matrix="bench", source="bench", op="fused_rope_decode_attention",
                kernel="reference", geometry=replace(PRESETS["tiny"], batch=4), seq_lens=SeqLens("multi_block"),
                slot_mode=SlotMode("arange"), seed=0)
    device = Device("cpu")
    reply = execute_case(case, device, backend(device), GoldenCache(None), KernelLoader())
    before = hygiene.snapshot()

    def watch() -> None:
        with hygiene.Watch():
            pass

    pristine = hygiene.snapshot()

    def watch_pristine() -> None:       # what a worker's case pays now: the window and the drift check
        with hygiene.Watch(pristine):
            pass

    def watch_without_hooks() -> None:  # the window without what issue 23 added: no hooks, no drift check
        read, changes, restore = hooks.read, hooks.changes, hooks.restore
        hooks.read, hooks.changes, hooks.restore = (lambda: frozen), (lambda a, b: []), (lambda a, b: None)
        try:
            with hygiene.Watch():
                pass
        finally:
            hooks.read, hooks.changes, hooks.restore = read, changes, restore

    frozen = hooks.read()

    pieces = [
        ("environment copy", lambda: dict(os.environ)),
        ("torch settings", hygiene.torch_state),
        ("torch namespaces", lambda: [dict(vars(o)) for _, o in hygiene.NAMESPACES]),
        ("sys.modules copy", lambda: dict(sys.modules)),
        ("python threads", lambda: [t.ident for t in threading.enumerate()]),
        ("native threads + children (/proc)", hygiene._running),
        ("hooks (autocast ... audit, issue 23)", hooks.read),
        ("import machinery (issue 37)", imports.read),
        ("limits, fds, affinity, nice, shm (37)", os_state.read),
        ("gc.collect() after freeze (issue 37)", gc.collect),
        ("snapshot (all of the above)", hygiene.snapshot),
        ("settle (snapshot + compare)", lambda: hygiene.settle(before)),
        ("drift (compare with pristine)", lambda: hygiene.drift(pristine, before)),
        ("Watch: one case's window", watch),
        ("Watch + drift (what a case pays)", watch_pristine),
        ("protocol.plain(reply)", lambda: protocol.plain(reply.to_wire())),
    ]
    print(f"{len(sys.modules)} modules, {sum(len(vars(o)) for _, o in hygiene.NAMESPACES)} names watched, "
          f"{len(hygiene._tasks())} threads; median of 5 rounds of {n}")
    for name, fn in pieces:
        print(f"{name:36s} {per_call_us(fn, n):8.1f} us")
    # side by side, interleaved so that load changes reach both: the window without and with issue 23
    _side_by_side("window without issue 23 additions", watch_without_hooks,
                  "window + hooks + drift (now)", watch_pristine, n)
    # and without what issue 37 added: no import machinery, no OS state, no standard library
    # namespaces, no collection around the window (their readings frozen, their lists cut)
    full = hygiene.NAMESPACES
    frozen_imports, frozen_os = imports.read(), os_state.read()
    watched_by_23 = tuple((name, obj) for name, obj in full if name.startswith(("torch", "harness")))

    def without_37():
        saved = imports.read, os_state.read, os_state.window_changes, hygiene._collect
        imports.read, os_state.read = (lambda: frozen_imports), (lambda: frozen_os)
        os_state.window_changes, hygiene._collect = (lambda a, b: []), (lambda: None)
        hygiene.NAMESPACES = watched_by_23
        return saved

    def back(saved):
        imports.read, os_state.read, os_state.window_changes, hygiene._collect = saved
        hygiene.NAMESPACES = full

    saved = without_37()
    pristine_23 = hygiene.snapshot()
    back(saved)

    def watch_without_37() -> None:
        saved = without_37()
        try:
            with hygiene.Watch(pristine_23):
                pass
        finally:
            back(saved)

    _side_by_side("window without issue 37 additions", watch_without_37, "window with them (now)", watch_pristine, n)
    print(f"load average {os.getloadavg()[0]:.1f}; timed with {'CPU' if CLOCK[0] is time.process_time else 'wall'} time")


if __name__ == "__main__":
    main()
