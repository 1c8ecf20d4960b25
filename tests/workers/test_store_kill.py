"""``kill -9`` of a process writing the results store loses no written result and leaves a
readable database.

A child (``sys.executable -c``) opens a store, records a run with planned cases and writes
results in a loop, printing each case id after ``add_result`` returned.  The test SIGKILLs
it at a chosen moment and opens the file: integrity check ok, every reported result there,
``missing()`` is exactly what was not written.  Every wait is bounded.
"""
from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from harness.store import Store

ROOT = Path(__file__).resolve().parents[2]
PLANNED = 3_000

CHILD = r"""
import sys
from harness.outcomes import Outcome, Result
from harness.store import Store
path, planned = sys.argv[1], int(sys.argv[2])
store = Store(path)
rid = store.start_run(command=["child"], devices=["cpu"], cases=[{"case_id": f"c{i}"} for i in range(planned)])
print("run", rid, flush=True)
metrics = {"max_abs": float("nan"), "per_head": [0.5] * 64, "first_bad": [[1, 2, 3, 0.25]] * 16}
for i in range(planned):
    store.add_result(rid, Result(case_id=f"c{i}", outcome=Outcome.MISMATCH, metrics=metrics, report="x" * 2000))
    print(f"c{i}", flush=True)
"""


@contextmanager
def _spawn(path: Path, planned: int = PLANNED) -> Iterator[subprocess.Popen]:
    """The writing child; whatever the test does, it is gone and its pipes closed afterwards."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(planned)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()


def _check_readable(path: Path) -> None:
    with closing(sqlite3.connect(path, timeout=10)) as conn, conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def _check_plan(store: Store, run_id: str) -> None:
    """A run exists whole (its planned cases recorded with it) or not at all, and what it did
    not store is exactly what it planned and has not written, in plan order."""
    stored = [r.case_id for r in store.results(run_id)]
    missing = [m["case_id"] for m in store.missing(run_id)]
    assert stored + missing == [f"c{i}" for i in range(PLANNED)]


@pytest.mark.parametrize("reported", [1, 40, 300])
def test_kill_after_results_were_reported_loses_none(tmp_path, reported):
    path = tmp_path / "results.sqlite"
    written: list[str] = []
    run_id = None
    with _spawn(path) as proc:
        deadline = time.monotonic() + 30
        while len(written) < reported:
            assert time.monotonic() < deadline, "child too slow"
            line = proc.stdout.readline()
            assert line, f"child ended early: {proc.stderr.read()}"
            if line.startswith("run "):
                run_id = line.split()[1]
            else:
                written.append(line.strip())
        _kill(proc)  # the child is mid-loop: usually inside a transaction
        written += [line.strip() for line in proc.stdout.read().splitlines()]

    _check_readable(path)
    with Store(path) as store:
        stored = [r.case_id for r in store.results(run_id)]
        assert stored[:len(written)] == written  # every reported result, in order
        assert len(stored) - len(written) <= 1   # at most the one committed before its print
        run = store.run(run_id)
        assert run["status"] == "unfinished" and run["n_results"] == len(stored)
        missing = store.missing(run_id)
        assert len(missing) == PLANNED - len(stored) and missing[0]["case_id"] == f"c{len(stored)}"
        store.add_result(run_id, store.results(run_id)[0])  # still writable
    _check_readable(path)


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.07, 0.08, 0.09, 0.1, 0.2])
def test_kill_at_any_moment_of_opening_leaves_a_usable_file(tmp_path, delay):
    """Killed while creating the file, the schema or the run: the file opens, or was never made."""
    path = tmp_path / "results.sqlite"
    with _spawn(path, planned=3_000) as proc:
        time.sleep(delay)
        _kill(proc)
    if path.exists():
        _check_readable(path)
    with Store(path) as store:
        for run in store.runs():
            _check_plan(store, run["run_id"])
        rid = store.start_run(command=["after"], devices=["cpu"])
        assert store.run(rid)["command"] == ["after"]
    _check_readable(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.sqlite"]


def test_kill_just_after_the_run_was_recorded_leaves_it_whole(tmp_path):
    path = tmp_path / "results.sqlite"
    with _spawn(path) as proc:
        line = proc.stdout.readline()          # the run line, or EOF if the child died
        assert line.startswith("run "), proc.stderr.read()
        _kill(proc)
    _check_readable(path)
    with Store(path) as store:
        assert [run["run_id"] for run in store.runs()] == [line.split()[1]]
        _check_plan(store, line.split()[1])
