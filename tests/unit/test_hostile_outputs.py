"""Report paths that are not plain files (issue 13, item 9): written through, never renamed over;
unwritable ones refused before anything runs; a failed write is one line."""
from __future__ import annotations

import os
import stat
import threading

import pytest

from harness.errors import UsageError
from harness.files import WriteError, atomic_path, unwritable, write_text
from harness.reports.writers import OutputError, OutputPathError, Outputs, check_outputs, write_outputs

DOC = {"schema": 1, "results": [], "summary": {"counts": {}, "total": 0, "passed": 0, "failed": 0}}


def test_dev_null_is_written_through_and_stays_a_device():
    write_text("/dev/null", "hello")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert unwritable("/dev/null") is None


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_a_full_device_is_a_one_line_write_error():
    with pytest.raises(WriteError, match=r"^cannot write /dev/full: No space left on device$"):
        write_text("/dev/full", "x" * 100_000)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_fifo_gets_the_content(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_text(fifo, "through the pipe")
    reader.join(10)
    assert got == ["through the pipe"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_symlink_stays_a_link_and_its_target_is_updated(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_text(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_a_regular_file_is_still_replaced_atomically(tmp_path):
    path = tmp_path / "out" / "r.json"
    write_text(path, "one")
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("renderer broke")
    assert path.read_text() == "one"
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]


def test_a_directory_is_refused(tmp_path):
    assert unwritable(tmp_path) == "is a directory"
    with pytest.raises(WriteError, match="is a directory"):
        write_text(tmp_path, "x")


def test_a_path_under_a_regular_file_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert unwritable(blocker / "sub" / "r.json") == f"{blocker} is not a directory"


def test_a_read_only_directory_is_refused(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("running as root: permission bits do not stop root (the path-under-a-file case covers it)")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        assert unwritable(ro / "r.json") == f"cannot create files in {ro}"
    finally:
        ro.chmod(0o700)


def test_writable_places_pass(tmp_path):
    assert unwritable(tmp_path / "new" / "deeper" / "r.json") is None
    (tmp_path / "r.json").write_text("")
    assert unwritable(tmp_path / "r.json") is None


def test_check_outputs_names_the_flag(tmp_path):
    with pytest.raises(OutputPathError, match=rf"^--html {tmp_path}: is a directory$") as info:
        check_outputs(Outputs(json=str(tmp_path / "ok.json"), html=str(tmp_path)))
    assert isinstance(info.value, UsageError)


def test_one_failed_output_does_not_stop_the_others(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    md = tmp_path / "r.md"
    with pytest.raises(OutputError) as info:
        write_outputs(Outputs(json="/dev/full", markdown=str(md)), DOC)
    assert str(info.value) == f"--json: cannot write /dev/full: No space left on device (written: {md})"
    assert md.read_text()
