"""A kernel's log cannot fill the disk (issue 13, item 12): case logs cut to head and tail."""
from __future__ import annotations

from harness.logs import cap_log


def test_a_long_log_keeps_its_head_and_tail_with_a_marker(tmp_path):
    log = tmp_path / "case.log"
    log.write_bytes(b"HEAD" + b"x" * 10_000 + b"TAIL")
    dropped = cap_log(log, 1000)
    text = log.read_bytes()
    assert dropped == 10_008 - 1000
    assert text.startswith(b"HEAD") and text.endswith(b"TAIL")
    assert f"\n[... {dropped} bytes dropped ...]\n".encode() in text
    assert len(text) < 1100


def test_a_short_or_missing_log_is_left_alone(tmp_path):
    log = tmp_path / "case.log"
    log.write_bytes(b"short\n")
    assert cap_log(log, 1000) == 0 and log.read_bytes() == b"short\n"
    assert cap_log(tmp_path / "absent.log", 10) == 0


def test_appends_after_the_cut_land_at_the_end(tmp_path):
    """The worker's case log is opened O_APPEND: what it writes after the cut follows the tail."""
    log = tmp_path / "case.log"
    log.write_bytes(b"a" * 5000)
    with open(log, "ab") as writer:
        cap_log(log, 100)
        writer.write(b"LATE")
    assert log.read_bytes().endswith(b"a" * 50 + b"LATE")


def test_worker_warnings_reach_the_report_document():
    from harness.run.session import Recorded, document
    recorded = Recorded("RUN", [], {}, 0.0, ["cpu"], warnings=["worker w0 (cpu, pid 1) grew by 2048 MiB ..."])
    assert document(recorded, ["harness"])["warnings"] == ["worker w0 (cpu, pid 1) grew by 2048 MiB ..."]
    assert "warnings" not in document(Recorded("RUN", [], {}, 0.0, ["cpu"]), ["harness"])
