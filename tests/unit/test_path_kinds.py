"""What a path is, by stat alone (issue 23, item 3): FIFOs and devices are refused where a case
file, a directory or a store belongs, and a report FIFO is refused only when nothing reads it."""
from __future__ import annotations

import os
import threading

import pytest

from harness.errors import UsageError
from harness.files import unwritable
from harness.path_kinds import require_directory, special_kind, what_is


def test_kinds(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_text("")
    os.symlink("/dev/zero", tmp_path / "zero")
    assert special_kind(tmp_path / "fifo") == "a FIFO"
    assert special_kind(tmp_path / "zero") == "a device"
    assert special_kind(tmp_path / "zero", follow=False) is None
    assert special_kind(tmp_path / "file") is None and special_kind(tmp_path / "absent") is None
    assert what_is(tmp_path / "file") == "a regular file" and what_is(tmp_path) == "a directory"


def test_a_directory_flag(tmp_path):
    require_directory(tmp_path, "--log-dir")
    require_directory(tmp_path / "new" / "deeper", "--log-dir")          # made later
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="is a regular file, expected a directory"):
        require_directory(tmp_path / "file", "--log-dir")
    with pytest.raises(UsageError, match="file is a regular file, expected a directory"):
        require_directory(tmp_path / "file" / "sub", "--log-dir")


def test_a_report_fifo_is_fine_while_something_reads_it(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "nothing reads" in unwritable(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
    reader.start()
    for _ in range(200):                        # the reader's open is what makes the probe succeed
        if unwritable(fifo) is None:
            break
        threading.Event().wait(0.01)
    assert unwritable(fifo) is None
    assert unwritable("/dev/null") is None
    assert reader.is_alive()                    # the probe did not hand the reader its end of file
