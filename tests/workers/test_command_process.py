"""One command in its own session: capture caps, binary output, timeouts and leftovers killed.

Real processes (sh, sleep, python), each bounded by a timeout of a few seconds.
"""
from __future__ import annotations

import os
import sys
import time

from harness.commands.process import kill_session, run, session_members


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] != b"Z"


def test_output_is_captured_with_head_and_tail_past_the_cap(tmp_path):
    code = "import sys\nsys.stdout.write('HEAD\\n' + 'x' * 300000 + '\\nTAIL\\n')\nsys.stderr.write('on stderr\\n')"
    done = run([sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ), timeout_s=20, cap_bytes=4096)
    assert done.returncode == 0 and not done.timed_out
    assert done.output_bytes == len("HEAD\n") + 300000 + len("\nTAIL\n") + len("on stderr\n")
    assert done.output.startswith(b"HEAD\n") and done.output.endswith(b"on stderr\n")
    assert b"bytes dropped ...]" in done.output and len(done.output) < 4200


def test_binary_output_is_kept_as_bytes(tmp_path):
    code = "import sys\nsys.stdout.buffer.write(bytes(range(256)))"
    done = run([sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ), timeout_s=20)
    assert done.output == bytes(range(256))


def test_a_timeout_kills_the_whole_session_including_a_child_in_another_group(tmp_path):
    # the child moves to a process group of its own: a killpg of the leader's group would miss it
    script = "python3 -c 'import os,time; os.setpgid(0,0); print(os.getpid(), flush=True); time.sleep(60)' & " \
             "wait"
    started = time.monotonic()
    done = run(["/bin/sh", "-c", script], cwd=tmp_path, env=dict(os.environ), timeout_s=1, grace_s=0.5)
    assert done.timed_out and done.returncode is None
    assert time.monotonic() - started < 10
    child = int(done.output.split()[0])
    time.sleep(0.1)
    assert not _alive(child)


def test_what_a_command_leaves_running_is_killed_and_does_not_hold_its_output_open(tmp_path):
    done = run(["/bin/sh", "-c", "sleep 60 & echo started"], cwd=tmp_path, env=dict(os.environ), timeout_s=20,
               grace_s=0.5)
    assert done.returncode == 0 and done.output == b"started\n"
    assert done.leftovers == 1 and done.duration_s < 10


def test_a_missing_program_is_reported_not_raised(tmp_path):
    done = run(["no-such-program-xyz"], cwd=tmp_path, env=dict(os.environ), timeout_s=5)
    assert done.returncode is None and "no-such-program-xyz" in done.not_started


def test_kill_session_of_an_empty_session_is_nothing():
    assert session_members(2**22 + 12345) == [] and kill_session(2**22 + 12345) == 0


def test_a_child_in_another_group_that_holds_the_output_is_found_after_a_normal_end(tmp_path):
    script = "python3 -c 'import os,time; os.setpgid(0,0); open(\"pid\", \"w\").write(str(os.getpid())); " \
             "time.sleep(60)' & while [ ! -s pid ]; do sleep 0.05; done; echo done"
    done = run(["/bin/sh", "-c", script], cwd=tmp_path, env=dict(os.environ), timeout_s=20, grace_s=0.5)
    assert done.returncode == 0 and done.output == b"done\n"
    assert done.leftovers == 1 and done.duration_s < 10
    child = int((tmp_path / "pid").read_text())
    time.sleep(0.1)
    assert not _alive(child)
