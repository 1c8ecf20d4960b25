"""Nothing outlives the run, whatever a kernel does to its own process (issue 37, item 4): helpers that
left the worker's tree (its subreaper and parent-death signal turned off, then fork + setsid + fork; a
clone(CLONE_PARENT) child in a session of its own) are found by the run's marker, reported and killed
at the end of their case, and nothing started by the run is alive once the front end has exited."""
from __future__ import annotations

import json
import os
import secrets
import signal
import time

import pytest

from helpers import KERNELS_UNDER_TEST, run_harness, write_case_file

CASES = """name: escapes
op: rope_kv_write
seq_lens: multi_block
matrix:
  kernel: [hostile.escapes_marker:no_subreaper_double_fork, hostile.escapes_marker:clone_parent, reference]
"""


def _carrying(entry: bytes) -> list[int]:
    """Live processes of this uid whose environment holds ``entry`` (the test's own marker)."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if entry not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{name}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] in ("Z", "X"):
                    continue
        except OSError:
            continue
        found.append(int(name))
    return found


@pytest.fixture(scope="module", params=["forked", "isolated"])
def finished(request, tmp_path_factory):
    """One CLI run of the three cases (warm forked workers, and --isolation case), with a marker of
    the test's own in its environment: every process the run starts inherits it."""
    tmp = tmp_path_factory.mktemp("marked")
    entry = f"TEST_ESCAPE_MARK={secrets.token_hex(8)}"
    path = write_case_file(tmp, "escapes.yaml", CASES)
    extra = ["--isolation", "case"] if request.param == "isolated" else []
    done = run_harness("run", str(path), "--no-store", "--kernel-path", str(KERNELS_UNDER_TEST), "--json",
                       str(tmp / "r.json"), "--no-golden-cache", *extra, cwd=tmp, timeout=300,
                       env={entry.split("=")[0]: entry.split("=")[1]})
    deadline = time.monotonic() + 5.0        # what was SIGKILLed is gone within moments
    while (left := _carrying(entry.encode())) and time.monotonic() < deadline:
        time.sleep(0.1)
    yield done, tmp, left
    for pid in _carrying(entry.encode()):     # only the test's own marked processes, should any be left
        os.kill(pid, signal.SIGKILL)


def test_nothing_with_the_marker_is_alive_after_the_front_end_exits(finished):
    done, _, left = finished
    assert left == [], [open(f"/proc/{p}/cmdline", "rb").read() for p in left]
    assert done.returncode == 1, done.stdout + done.stderr


def test_the_escapes_are_the_kernels_contract_and_the_clean_case_passes(finished):
    done, tmp, _ = finished
    results = {r["kernel"].rpartition(":")[2]: r for r in json.loads((tmp / "r.json").read_text())["results"]}
    assert results["reference"]["outcome"] == "PASS", results["reference"]["summary"]
    for kernel in ("no_subreaper_double_fork", "clone_parent"):
        result = results[kernel]
        assert result["outcome"] == "CONTRACT", result["summary"]
        assert "left the worker's process tree: 1 process(es) with this run's marker" in result["summary"], \
            result["summary"]
        assert any("sleep" in line or "python" in line for line in result["metrics"]["escaped"])
