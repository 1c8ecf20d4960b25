"""Helpers shared by the project's tests (importable as `helpers`: tests/ is on pythonpath)."""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS_UNDER_TEST = Path(__file__).resolve().parent / "kernels_under_test"


def write_case_file(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


def run_harness(*args: str, cwd: Path, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def results_by_id(json_path: Path) -> dict[str, dict]:
    return {r["case_id"]: r for r in json.loads(json_path.read_text())["results"]}


def finished_bisect_steps(store: Path) -> int:
    """Bisect steps the store has finished (0 while it does not exist yet): how far a bisect got."""
    try:
        with sqlite3.connect(store) as conn:
            return conn.execute("SELECT COUNT(*) FROM runs WHERE kind = 'bisect-step' AND finished IS NOT NULL"
                                ).fetchone()[0]
    except sqlite3.Error:
        return 0


# Two audit matrices: one blind to writes for slot < 0 (no row has one), one that sees them (a warmup row).
AUDIT_BLIND = """\
name: blind
op: rope_kv_write
geometry: tiny
matrix:
  batch: [16]
  seq_lens: ["const(5)"]
  slot_mode: [arange]
  seed: [0]
"""
AUDIT_SEES = AUDIT_BLIND + """\
include:
  - {name: warmup, batch: 16, seq_lens: "const(1)", slot_mode: "const(-1)", scratch_pages: 1, block_value: 0, seed: 1}
"""



OUTSIDE_KERNELS = Path(__file__).resolve().parent / "outside_kernels"


@contextlib.contextmanager
def outside_kernels_on_path():
    """tests/outside_kernels importable while it lasts (its kernels are `outside.<module>`)."""
    sys.path.insert(0, str(OUTSIDE_KERNELS))
    try:
        yield
    finally:
        sys.path.remove(str(OUTSIDE_KERNELS))


def case_runner(goldens: Path):
    """A function running one case in this process as a worker would (inputs -> golden ->
    kernel -> checks) and returning (outcome, summary). `mutant:<name>` runs that shipped
    mutant of the reference kernel."""
    import pytest
    from harness.devices import Device, backend
    from harness.goldens.cache import GoldenCache
    from harness.worker.execute import KernelLoader, execute_case

    device = Device("cpu")
    be, loader, cache = backend(device), KernelLoader(), GoldenCache(goldens)

    def run(case) -> tuple[str, str]:
        kernel, env = case.kernel, {}
        if kernel.startswith("mutant:"):
            env = {"HARNESS_MUTANT": kernel.split(":")[1], "HARNESS_MUTANT_KERNEL": "reference"}
            kernel = "harness.kernels.mutants.operators"
        with pytest.MonkeyPatch.context() as mp:       # a worker sets the case's env around it
            for name, value in env.items():
                mp.setenv(name, value)
            reply = execute_case(replace(case, kernel=kernel, env=env), device, be, cache, loader)
        assert reply.failure is None, reply.failure
        return reply.outcome.value, reply.to_wire().get("summary") or ""

    return run


OUTSIDE_KERNELS = Path(__file__).resolve().parent / "outside_kernels"


@contextlib.contextmanager
def outside_kernels_in_process(golden_root=None):
    """Cases executed in this process (``execute_case`` on the CPU, one kernel loader and golden
    cache), with tests/outside_kernels importable as ``outside``: yields ``run(case, **kwargs)``,
    the reply of a case that raised nothing of the harness's own."""
    from harness.devices import Device, backend
    from harness.goldens.cache import GoldenCache
    from harness.worker.execute import KernelLoader, execute_case
    sys.path.insert(0, str(OUTSIDE_KERNELS))
    device, loader, cache = Device("cpu"), KernelLoader(), GoldenCache(golden_root)

    def run(case, **kwargs):
        reply = execute_case(case, device, backend(device), cache, loader, **kwargs)
        assert reply.failure is None, reply.failure.traceback
        return reply
    try:
        yield run
    finally:
        sys.path.remove(str(OUTSIDE_KERNELS))
        for name in [m for m in sys.modules if m == "outside" or m.startswith("outside.")]:
            del sys.modules[name]


def classify_collected(folder: Path, name: str, spec: dict):
    """A log of a collection (tests/fixtures/logs/*/collection.yaml) classified the way it was seen:
    ``via: exit`` (a return code), ``timeout``, or an exception at launch (the default); the very
    function bench/score_public_logs.py scores them with."""
    return _score_public_logs().classify(folder, name, spec)


@functools.cache
def _score_public_logs():
    spec = importlib.util.spec_from_file_location("score_public_logs", ROOT / "bench" / "score_public_logs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hostile_case(module: str, kernel: str, case_id: str, env: dict[str, str] | None = None):
    """A tiny ``rope_kv_write`` case running ``kernel`` of ``hostile.<module>`` (tests/kernels_under_test/);
    a shipped kernel name (``reference``, ``skip_rope``) or a ``module:function`` as it is."""
    target = kernel if ":" in kernel or kernel in ("reference", "skip_rope") else f"hostile.{module}:{kernel}"
    from harness.case import PRESETS, Case, SeqLens, SlotMode
    return Case(case_id=case_id, matrix="t", source="test", op="rope_kv_write", kernel=target,
                geometry=PRESETS["tiny"], seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("arange"), seed=3,
                timeout_s=60.0, env=dict(env or {}))


def process_gone(pid: int) -> bool:
    """``pid`` has ended (gone, or a zombie not yet reaped)."""
    from harness.processes import process_state
    return process_state(pid) in ("", "Z", "X")


def pid_written(folder: Path, name: str, tries: int = 300) -> int:
    """The pid a hostile kernel's helper wrote to ``folder/<name>.pid``, waited for 10 ms at a time."""
    import time
    path = folder / f"{name}.pid"
    for _ in range(tries):
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.01)
    raise AssertionError(f"{name}.pid never written")
