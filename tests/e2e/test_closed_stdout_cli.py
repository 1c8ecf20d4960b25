"""A reader that stops early (`harness history ... | head`) ends the command quietly: exit 141,
nothing on stderr, no BrokenPipeError traceback."""
from __future__ import annotations

import os
import subprocess
import sys

from helpers import AUDIT_BLIND, run_harness, write_case_file


def test_history_into_a_closed_pipe_exits_quietly(tmp_path, golden_cache_dir):
    matrix = write_case_file(tmp_path / "cases", "m.yaml", AUDIT_BLIND)
    store = tmp_path / "r.sqlite"
    ran = run_harness("run", str(matrix), "--store", str(store), "--golden-cache", str(golden_cache_dir),
                      "--log-dir", str(tmp_path / "logs"), "--no-progress", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    read_end, write_end = os.pipe()
    os.close(read_end)            # the reader is gone before the first line: every write fails
    try:
        proc = subprocess.run([sys.executable, "-m", "harness", "history", "*", "--store", str(store)],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=tmp_path, timeout=120)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (141, "")
