"""Device log capture (harness/devicelogs): what a case added, from the files alone."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness import devicelogs
from harness.classify.matching import classify_exception
from harness.devicelogs import capture

WRAPPER = ("The Inner error is reported as above. The process exits for this inner error, and the current working "
           "operator name is RopeKvWrite.\nSince the operator is called asynchronously, the stacktrace may be "
           "inaccurate. If you want to get the accurate stacktrace, please set the environment variable "
           "ASCEND_LAUNCH_BLOCKING=1.")
PLOG = ("[INFO] ASCENDCL(77,python):2026-03-14-09:21:05.101.220 [acl.cpp:226]77 aclInit: start to execute aclInit\n"
        "[ERROR] RUNTIME(77,python):2026-03-14-09:21:07.512.334 [device_error_proc.cc:1057]77 "
        "ProcessStarsCoreErrorInfo: The aicore execution is abnormal, device_id=6, stream_id=3, report_stream_id=3, "
        "task_id=12, flip_num=0, fault kernel_name=k_mix_aiv, fault kernel info ext=none, program id=41, hash=1.\n"
        "[ERROR] ASCENDCL(77,python):2026-03-14-09:21:07.513.002 [stream.cpp:112]77 "
        "aclrtSynchronizeStreamWithTimeout: synchronize stream with timeout failed, runtime result = 507018\n")


def plog(root: Path, pid: int, text: str, stamp: str = "20260314092105000000") -> Path:
    path = root / "debug" / "plog" / f"plog-{pid}_{stamp}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fh.write(text)
    return path


def test_only_what_the_case_appended_is_read(tmp_path):
    old = plog(tmp_path, 77, "[ERROR] an earlier case's fault, error code is 507015\n")
    start = devicelogs.mark(tmp_path)
    plog(tmp_path, 77, PLOG)                                    # the same file grows
    found = devicelogs.since(start, {77})
    assert found.files == (str(old.relative_to(tmp_path)),)
    assert "507015" not in found.text and "runtime result = 507018" in found.text
    assert found.text.splitlines()[0].startswith("[ERROR]")     # error lines first, then the rest
    assert found.text.splitlines()[-1].startswith("[INFO]")
    assert devicelogs.since(devicelogs.mark(tmp_path), {77}) is None      # nothing new: nothing read


def test_a_wrapper_only_exception_is_labelled_from_the_device_log(tmp_path):
    bare = classify_exception("launch", "RuntimeError", WRAPPER, WRAPPER)
    assert bare.code != 507018
    start = devicelogs.mark(tmp_path)
    plog(tmp_path, 77, PLOG)
    found = devicelogs.since(start, {77})
    labelled = classify_exception("launch", "RuntimeError", WRAPPER, WRAPPER, "\n" + found.text)
    assert (labelled.outcome.value, labelled.code) == ("DEVICE_FAULT", 507018)


def test_a_shared_directory_leaves_other_processes_out(tmp_path):
    start = devicelogs.mark(tmp_path, own=False)
    plog(tmp_path, 12345, "[ERROR] another process: error code is 507015\n")
    plog(tmp_path, 77, PLOG)
    (tmp_path / "notes.log").write_text("[ERROR] a file with no pid in its name is read\n")
    found = devicelogs.since(start, {77})
    assert "another process" not in found.text
    assert "runtime result = 507018" in found.text and "no pid in its name" in found.text
    # the harness's own directory is this worker's alone: children's files are read too
    assert "another process" in devicelogs.since(capture.Mark(start.directory, start.sizes, own=True), {77}).text


def test_rotated_file_is_read_from_its_start(tmp_path):
    path = plog(tmp_path, 77, "x" * 5000 + "\n")
    start = devicelogs.mark(tmp_path)
    path.unlink()                                              # rotation: a new file under the same name
    plog(tmp_path, 77, PLOG)
    assert "runtime result = 507018" in devicelogs.since(start, {77}).text


def test_binary_garbage_and_size_caps(tmp_path, monkeypatch):
    monkeypatch.setattr(capture, "READ_CAP", 4096)
    start = devicelogs.mark(tmp_path)
    plog(tmp_path, 77, "\x00\xff\x1b[31m" * 3000 + "\n")
    plog(tmp_path, 77, PLOG, stamp="20260314092106000000")
    found = devicelogs.since(start, {77})
    assert found.truncated and found.bytes_read <= 4096
    assert "runtime result = 507018" in found.text            # the newest file first within the cap
    assert "\x00" not in found.text and "\x1b" not in found.text
    text, cut = capture.excerpt("\n".join(f"[ERROR] line {i}" for i in range(10000)), cap=1000)
    assert cut and len(text) <= 1000


def test_special_files_links_and_unreadable_trees_never_fail(tmp_path):
    os.mkfifo(tmp_path / "plog-77_fifo.log")
    (tmp_path / "link.log").symlink_to("/dev/zero")
    start = devicelogs.mark(tmp_path)
    plog(tmp_path, 77, PLOG)
    found = devicelogs.since(start, {77})
    assert all(not f.endswith(("fifo.log", "link.log")) for f in found.files)
    assert devicelogs.mark(tmp_path / "missing").sizes == {}
    assert devicelogs.since(devicelogs.mark(tmp_path / "missing"), {77}) is None
    assert devicelogs.mark(None) is None and devicelogs.since(None, {77}) is None


def test_log_env_own_directory_or_the_users(tmp_path):
    env = devicelogs.log_env(tmp_path, "w1", "npu:6", {})
    assert env == {"ASCEND_PROCESS_LOG_PATH": str(tmp_path / "device-logs" / "w1-npu6")}
    assert devicelogs.log_env(tmp_path, "w1", "npu:6", {"ASCEND_PROCESS_LOG_PATH": "/x"}) == {}


def test_prune_keeps_the_newest(tmp_path):
    for i in range(5):
        path = plog(tmp_path, 77, "y" * 1000, stamp=f"2026031409210{i}000000")
        os.utime(path, (1000 + i, 1000 + i))
    removed = devicelogs.prune(tmp_path, keep_bytes=2500)
    assert len(removed) == 3 and all("0921000" in r or "0921010" in r or "0921020" in r for r in removed)


@pytest.mark.parametrize("listed, index, expected", [
    (None, 6, {"ASCEND_RT_VISIBLE_DEVICES": "6"}),
    ("4,5,6,7", 1, {"ASCEND_RT_VISIBLE_DEVICES": "5"}),
    ("4,5", 3, {}),                       # not in the user's list: left for the worker to find absent
])
def test_pinning_env(listed, index, expected):
    from harness.devices import Device, local_device, pinning_env
    env = pinning_env(Device("npu", index), {"ASCEND_RT_VISIBLE_DEVICES": listed} if listed else {})
    assert {k: v for k, v in env.items() if k == "ASCEND_RT_VISIBLE_DEVICES"} == expected
    assert env["HARNESS_DEVICE"] == f"npu:{index}"
    assert local_device(Device("npu", index), env) == (Device("npu", 0) if expected else Device("npu", index))
    assert pinning_env(Device("cuda", 2), {})["CUDA_VISIBLE_DEVICES"] == "2"
