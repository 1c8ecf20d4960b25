"""An interrupted harness ends (harness/cli/__init__.py ``_leave_promptly``): after it said what it
saved, a helper thread still waiting on a process the interrupt cut short does not keep it alive
(a bisect stopped by SIGTERM sat past the test's 120 s after printing how to resume it)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCKED = textwrap.dedent("""
    import threading
    import harness.cli as cli
    cli.INTERRUPT_EXIT_S = 0.5
    threading.Thread(target=threading.Event().wait, name="stuck").start()   # never ends, not a daemon
    print("said what it saved", flush=True)
    cli._leave_promptly(143)
""")


def test_a_stuck_helper_thread_does_not_keep_an_interrupted_harness_alive():
    done = subprocess.run([sys.executable, "-c", BLOCKED], capture_output=True, text=True, timeout=60)
    assert done.returncode == 143 and done.stdout == "said what it saved\n", done.stderr


def test_without_it_the_same_process_would_not_end():
    """The check can fail: the same thread with a plain exit keeps the interpreter waiting."""
    plain = BLOCKED.replace("cli._leave_promptly(143)", "raise SystemExit(143)")
    try:
        subprocess.run([sys.executable, "-c", plain], capture_output=True, text=True, timeout=3)
    except subprocess.TimeoutExpired:
        return
    raise AssertionError("the interpreter ended with a non-daemon thread still waiting")
