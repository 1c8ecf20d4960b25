"""Workers die with the front end: kill -9 of the front end while a kernel hangs leaves no
worker, zygote or resource-tracker process of that run behind; SIGTERM ends a run as Ctrl-C does."""
from __future__ import annotations

import json
import os
import sqlite3
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from helpers import KERNELS_UNDER_TEST, ROOT, write_case_file

FRONT_END = textwrap.dedent('''
    import sys
    from pathlib import Path
    from harness.case import PRESETS, Case, SeqLens, SlotMode
    from harness.devices import Device
    from harness.run.pool import DeviceWorker
    from harness.run.spawn import WorkerOptions

    if __name__ == "__main__":
        worker = DeviceWorker(Device("cpu"), WorkerOptions(log_dir=Path(sys.argv[1]), kernel_paths=(sys.argv[4],),
                                                           fork_cpu_workers=sys.argv[2] == "forked"))
        case = Case(case_id="hang", matrix="t", source="test", op="rope_kv_write", kernel=sys.argv[3],
                    geometry=PRESETS["tiny"], seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("arange"),
                    seed=3, timeout_s=600.0)
        worker.ensure({})
        print("ready", flush=True)
        worker.run(case, Path(sys.argv[1]) / "hang.log")
''')


def _marked(marker: bytes) -> list[int]:
    """Processes whose environment carries ``marker`` (the front end's, inherited by all it started)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    with open(f"/proc/{entry}/stat") as s:
                        if s.read().rpartition(")")[2].split()[0] != "Z":
                            found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("kernel", ["hang", "hostile.kernels:holds_the_gil_forever"], ids=["hang", "gil-held"])
@pytest.mark.parametrize("start", ["forked", "spawned"])
def test_kill_9_of_the_front_end_takes_every_process_of_the_run_with_it(tmp_path, start, kernel):
    """``hang`` sleeps in Python (the worker's watch thread runs); the other holds the GIL in
    native code, so only the parent-death signal can end its worker."""
    marker = f"HARNESS_TEST_RUN={uuid.uuid4().hex}"
    script = tmp_path / "front_end.py"
    script.write_text(FRONT_END)
    env = {**os.environ, "HARNESS_TEST_RUN": marker.partition("=")[2],
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    front = subprocess.Popen([sys.executable, str(script), str(tmp_path / "logs"), start, kernel,
                              str(KERNELS_UNDER_TEST)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert front.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        while not (tmp_path / "logs" / "hang.log").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)                                          # the kernel is in its hang
        started = _marked(marker.encode())
        assert len(started) >= 2, started                       # the front end and its worker at least
        front.kill()
        front.wait()
        deadline = time.monotonic() + 8.0
        while _marked(marker.encode()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _marked(marker.encode()) == []
    finally:
        front.kill()
        for pid in _marked(marker.encode()):
            os.kill(pid, signal.SIGKILL)


def test_sigterm_ends_a_run_as_ctrl_c_does_reports_written_and_stored_interrupted(tmp_path, golden_cache_dir):
    cases = write_case_file(tmp_path, "c.yaml", """
        name: sigterm
        op: rope_kv_write
        geometry: tiny
        seq_lens: multi_block
        slot_mode: arange
        timeout_s: 600
        include:
          - {name: a, kernel: reference, seed: 1}
          - {name: b, kernel: hang, seed: 2}
          - {name: c, kernel: reference, seed: 3}
    """)
    out, store = tmp_path / "out.json", tmp_path / "results.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", str(cases), "--device", "cpu", "--json", str(out),
         "--store", str(store), "--golden-cache", str(golden_cache_dir), "--log-dir", str(tmp_path / "logs")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list((tmp_path / "logs").glob("sigterm_b_*")) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    results = {r["case_id"]: r["outcome"] for r in json.loads(out.read_text())["results"]}
    assert results == {"sigterm[a]": "PASS"}        # the interrupted case has no result: --resume runs it
    summary = json.loads(sqlite3.connect(store).execute("SELECT summary FROM runs").fetchone()[0])
    assert summary["interrupted"] is True
