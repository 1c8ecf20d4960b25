"""Tracing (``harness.trace``): spawns, messages and the kill escalation are logged when enabled, nothing when not."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest

from harness import trace
from harness.devices import Device
from harness.outcomes import Outcome
from harness.processes import terminate
from harness.run.pool import DeviceWorker
from harness.run.spawn import WorkerOptions
from test_device_worker import make_case


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def trace_lines(monkeypatch):
    """What the trace logger emits during the test; its level is the test's to set, and restored after."""
    monkeypatch.delenv("HARNESS_DEBUG", raising=False)
    saved = trace.log.level, trace.log.propagate, list(trace.log.handlers)
    handler = _Lines()
    trace.log.addHandler(handler)
    trace.log.setLevel(logging.NOTSET)
    yield handler.lines
    trace.log.handlers[:] = saved[2]
    trace.log.setLevel(saved[0])
    trace.log.propagate = saved[1]


def _run(tmp_path, case, fork: bool = True):
    w = DeviceWorker(Device("cpu"), WorkerOptions(log_dir=tmp_path / "logs", golden_cache="", fork_cpu_workers=fork))
    try:
        return w.run(case, tmp_path / f"{case.case_id}.log")
    finally:
        w.close()


def test_one_case_traces_the_start_the_request_and_the_reply(tmp_path, trace_lines):
    trace.log.setLevel(logging.DEBUG)
    assert _run(tmp_path, make_case(case_id="one")).outcome is Outcome.PASS
    text = "\n".join(trace_lines)
    assert "w0: forked pid" in text and "for cpu from the zygote (env -" in text, text
    assert "received ready pid=" in text
    assert "sent run case=one repeat=0 (" in text
    assert "received reply case=one PASS" in text
    assert "sent stop" in text


def test_a_timeout_traces_the_kill_escalation(tmp_path, trace_lines):
    trace.log.setLevel(logging.DEBUG)
    hung = _run(tmp_path, make_case(kernel="native_hang", case_id="nh", timeout_s=1.0))
    assert hung.outcome is Outcome.HANG
    text = "\n".join(trace_lines)
    steps = ["case nh gave no reply within timeout_s=1", "SIGUSR1 (stack dump into the case log)",
             "replacing the worker: no reply within timeout_s=1", ": SIGTERM", ": SIGKILL (still running"]
    for step in steps:
        assert step in text, (step, text)
    assert [text.index(s) for s in steps] == sorted(text.index(s) for s in steps)


def test_nothing_is_traced_unless_enabled(tmp_path, trace_lines):
    assert _run(tmp_path, make_case(case_id="quiet")).outcome is Outcome.PASS
    assert trace_lines == []


def test_harness_debug_in_the_environment_traces_a_spawned_worker_on_stderr(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from pathlib import Path
        from harness.devices import Device
        from harness.run.pool import DeviceWorker
        from harness.run.spawn import WorkerOptions
        from test_device_worker import make_case
        w = DeviceWorker(Device("cpu"), WorkerOptions(log_dir=Path({str(tmp_path)!r}), golden_cache="",
                                                      fork_cpu_workers=False))
        print(w.run(make_case(case_id="env"), Path({str(tmp_path / "env.log")!r})).outcome.value)
        w.close()
    """)
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "HARNESS_DEBUG": "1"},
                          capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "PASS", done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("[harness ")]
    text = "\n".join(lines)
    assert "w0: spawned pid" in text and "sent run case=env" in text and "received reply case=env PASS" in text, \
        done.stderr


_IGNORES_SIGTERM = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                    "print('ready', flush=True); time.sleep(60)")


def test_terminate_traces_each_signal_it_sends(trace_lines):
    trace.log.setLevel(logging.DEBUG)
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    terminate(polite)
    assert trace_lines == [f"pid {polite.pid}: SIGTERM"]
    trace_lines.clear()
    stubborn = subprocess.Popen([sys.executable, "-c", _IGNORES_SIGTERM], stdout=subprocess.PIPE,
                                start_new_session=True)
    assert stubborn.stdout.readline().strip() == b"ready"
    terminate(stubborn, group=True, grace_s=0.2)
    stubborn.stdout.close()
    assert trace_lines == [f"process group {stubborn.pid}: SIGTERM",
                           f"process group {stubborn.pid}: SIGKILL (still running 0.2s after SIGTERM)"]
    trace_lines.clear()
    terminate(stubborn)                      # already gone: nothing sent, nothing traced
    assert trace_lines == []
