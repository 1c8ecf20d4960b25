"""``harness run ... | cat`` ends with the harness, whatever a kernel started (issue 23, item 2).

A kernel's finalizer forks a daemon into a session of its own after its case was answered.  Before, the daemon
outlived the run and kept multiprocessing's resource tracker alive, which held the front end's
stdout: the pipeline waited for the daemon (minutes).  The wait here is bounded well below the
daemon's life, so a pipeline held open fails the test instead of passing late."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from helpers import KERNELS_UNDER_TEST, write_case_file

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")

CASES = """\
op: rope_kv_write
geometry: tiny
env: {{HOSTILE_PIDS: "{pids}", HARNESS_REUSE_INPUTS: "0"}}
include:
  - {{name: after, kernel: reference, seed: 1}}
  - {{name: daemon, kernel: "hostile.escapes:finalizer_starts_daemon"}}
"""


def test_a_pipeline_reading_the_harness_ends_with_it(tmp_path, golden_cache_dir):
    pids = tmp_path / "pids"
    pids.mkdir()
    path = write_case_file(tmp_path, "cases.yaml", CASES.format(pids=pids))
    harness = [sys.executable, "-m", "harness", "run", str(path), "--no-store", "--kernel-path",
               str(KERNELS_UNDER_TEST), "--golden-cache", str(golden_cache_dir), "--log-dir", str(tmp_path / "logs")]
    pipeline = subprocess.Popen(f"{subprocess.list2cmdline(harness)} | cat", shell=True, cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = pipeline.communicate(timeout=180)              # the daemon sleeps 600 s
    assert "after" in out and "PASS" in out, out
    pid = int((pids / "late.pid").read_text())             # forked once the last case was answered
    time.sleep(0.2)
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(") ")[1][0] == "Z"


def test_multiprocessing_helpers_do_not_hold_the_front_ends_output(tmp_path):
    """The forkserver and resource tracker started under ``helper_output`` write to their log."""
    from multiprocessing import util
    from harness.processes import helper_output
    log = tmp_path / "helper.log"
    with helper_output(log):
        pid = util.spawnv_passfds(sys.executable, [sys.executable, "-c", "import os; os.write(1, b'out'); "
                                                   "os.write(2, b'err'); print(os.read(0, 1) == b'')"], ())
    os.waitpid(pid, 0)
    assert log.read_text() == "outerrTrue\n"
    assert util.spawnv_passfds.__module__ == "multiprocessing.util"    # put back


def test_a_change_between_cases_is_a_warning_naming_the_case_before_it(tmp_path, golden_cache_dir):
    pids = tmp_path / "pids"
    pids.mkdir()
    path = write_case_file(tmp_path, "cases.yaml", CASES.format(pids=pids)
                           + '  - {name: next, kernel: reference, seed: 2}\n')
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "harness", "run", str(path), "--no-store", "--kernel-path",
                           str(KERNELS_UNDER_TEST), "--golden-cache", str(golden_cache_dir), "--log-dir",
                           str(tmp_path / "logs"), "--json", str(out)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning: deferred change after case cases[daemon] (worker" in proc.stdout + proc.stderr, proc.stdout
    import json
    doc = json.loads(out.read_text())
    assert [r["outcome"] for r in doc["results"]] == ["PASS"] * 3
    assert any(w.startswith("deferred change after case cases[daemon]") for w in doc["warnings"])
