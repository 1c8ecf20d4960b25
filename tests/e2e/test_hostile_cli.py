"""Hostile case files, flags and paths through the real CLI (issue 13, items 8-12): exit 2 with
one line on stderr and no traceback, within seconds; a subprocess timeout turns a hang into a failure."""
from __future__ import annotations

import json
import os
import sqlite3

import pytest

from helpers import run_harness, write_case_file

FAST = 20      # seconds: these are refused before anything heavy runs

OK = "op: rope_kv_write\n"


def _refused(proc, *fragments):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err
    assert "PASS" not in proc.stdout, proc.stdout        # refused before any case ran


def test_alias_bomb_is_refused_quickly(tmp_path):
    lines = ["a0: &a0 [1, 2, 3, 4, 5, 6, 7, 8, 9]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    path = write_case_file(tmp_path, "bomb.yaml", "".join(f"{ln}\n" for ln in lines) + OK)
    _refused(run_harness("list", str(path), cwd=tmp_path, timeout=FAST), "bomb.yaml:", "expands to more than")


def test_deep_nesting_is_refused_without_a_traceback(tmp_path):
    path = write_case_file(tmp_path, "deep.yaml", "op: " + "[" * 500 + "]" * 500 + "\n")
    _refused(run_harness("list", str(path), cwd=tmp_path, timeout=FAST), "deep.yaml:1:", "nested deeper than")


def test_matrix_past_the_cap(tmp_path):
    axes = "".join(f"  {k}: [{', '.join(str(v) for v in range(1, 11))}]\n"
                   for k in ("seed", "batch", "page_size", "hidden", "vocab", "intermediate", "num_layers"))
    path = write_case_file(tmp_path, "big.yaml", "op: rope_kv_write\nmatrix:\n" + axes)
    _refused(run_harness("run", str(path), "--no-store", cwd=tmp_path, timeout=FAST),
             "big.yaml:2:1: matrix: expands to 10000000 cases, more than the cap of 100000 (--max-cases)")


@pytest.mark.parametrize("line, fragment", [
    ("batch: 1000000000", "the case needs"),
    ("seq_lens: const(1000000000000)", "seq_lens: sequence lengths must be <="),
    ("seed: 1e23", "seed: expected an integer"),
    ("timeout_s: 1e308", "timeout_s: must be <= 604800"),
])
def test_sizes_that_cannot_fit(tmp_path, line, fragment):
    path = write_case_file(tmp_path, "f.yaml", f"op: fused_rope_decode_attention\n{line}\n")
    _refused(run_harness("run", str(path), "--no-store", cwd=tmp_path, timeout=FAST), "f.yaml:2:", fragment)


@pytest.mark.parametrize("argv, fragment", [
    (["run", "--shard", "3/1000000000"], "at most 10000 shards"),
    (["flake", "--repeat", "1000000000"], "--repeat must be at most 100000"),
    (["run", "--seed", "1e20"], "--seed takes a whole number"),
    (["run", "--device", ""], "--device is empty"),
    (["run", "--devices", "cuda:0-1000000000"], "more than 1024 devices"),
])
def test_hostile_flags(tmp_path, argv, fragment):
    path = write_case_file(tmp_path, "ok.yaml", OK)
    _refused(run_harness(*argv, str(path), "--no-store", cwd=tmp_path, timeout=FAST), fragment)


# -- output paths (item 9) ------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--json", "--junit", "--markdown", "--html"])
def test_a_directory_as_output_is_refused_before_any_case(tmp_path, flag):
    path = write_case_file(tmp_path, "ok.yaml", OK)
    (tmp_path / "out").mkdir()
    _refused(run_harness("run", str(path), "--no-store", flag, str(tmp_path / "out"), cwd=tmp_path, timeout=FAST),
             f"{flag} {tmp_path / 'out'}: is a directory")


@pytest.mark.parametrize("command", [["run"], ["flake", "--repeat", "2"], ["compare", "--ref", "a=HEAD"],
                                     ["report"], ["flake", "--compare", "A", "B"]])
def test_an_unwritable_output_is_refused_for_every_command(tmp_path, command):
    """A path under a regular file cannot be created, as root too (permission bits would not stop root)."""
    path = write_case_file(tmp_path, "ok.yaml", OK)
    (tmp_path / "file").write_text("")
    where = [] if command[0] == "report" or "--compare" in command else [str(path)]
    proc = run_harness(*command, *where, "--json", str(tmp_path / "file" / "r.json"),
                       cwd=tmp_path, timeout=FAST)
    _refused(proc, f"--json {tmp_path / 'file' / 'r.json'}: {tmp_path / 'file'} is not a directory")


def test_dev_null_as_every_output_works(tmp_path, golden_cache_dir):
    path = write_case_file(tmp_path, "ok.yaml", OK)
    proc = run_harness("run", str(path), "--no-store", "--json", "/dev/null", "--junit", "/dev/null",
                       "--markdown", "/dev/null", "--html", "/dev/null", "--golden-cache", str(golden_cache_dir),
                       "--log-dir", str(tmp_path / "logs"), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_a_full_disk_keeps_the_results_in_the_store(tmp_path, golden_cache_dir):
    path = write_case_file(tmp_path, "ok.yaml", OK)
    store = tmp_path / "results.sqlite"
    md = tmp_path / "r.md"
    proc = run_harness("run", str(path), "--store", str(store), "--json", "/dev/full", "--markdown", str(md),
                       "--golden-cache", str(golden_cache_dir), "--log-dir", str(tmp_path / "logs"),
                       cwd=tmp_path, timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (f"harness: error: --json: cannot write /dev/full: No space left on device "
                                   f"(written: {md})")
    with sqlite3.connect(store) as conn:
        assert conn.execute("SELECT outcome FROM results").fetchall() == [("PASS",)]
        assert conn.execute("SELECT finished IS NOT NULL FROM runs").fetchall() == [(1,)]
    assert "PASS" in md.read_text()


# -- absent accelerators (item 11) --------------------------------------------------

def _cuda_present() -> bool:
    import torch
    return torch.cuda.is_available()


@pytest.mark.skipif(_cuda_present(), reason="CUDA is present here")
def test_an_absent_accelerator_is_exit_2_not_a_green_run(tmp_path, golden_cache_dir):
    path = write_case_file(tmp_path, "ok.yaml", OK)
    out = tmp_path / "r.json"
    _refused(run_harness("run", str(path), "--no-store", "--device", "cuda:0", "--json", str(out),
                         cwd=tmp_path, timeout=120), "harness: error: cuda:0 not present")
    assert not out.exists()
    allowed = run_harness("run", str(path), "--no-store", "--device", "cuda:0", "--allow-absent-devices",
                          "--json", str(out), "--golden-cache", str(golden_cache_dir),
                          "--log-dir", str(tmp_path / "logs"), cwd=tmp_path, timeout=120)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert [r["outcome"] for r in json.loads(out.read_text())["results"]] == ["SKIPPED"]


@pytest.mark.skipif(_cuda_present(), reason="CUDA is present here")
def test_the_pytest_plugin_refuses_an_absent_accelerator_too(tmp_path):
    import subprocess
    import sys
    write_case_file(tmp_path / "cases", "ok.yaml", OK)
    base = [sys.executable, "-m", "pytest", "cases", "-p", "no:cacheprovider", "--no-store", "--device", "cuda:0", "-q"]
    refused = subprocess.run(base, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 4 and "cuda:0 not present" in refused.stdout + refused.stderr
    assert "--harness-allow-absent-devices runs anyway" in refused.stdout + refused.stderr
    allowed = subprocess.run([*base, "--harness-allow-absent-devices"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=120)
    assert allowed.returncode == 0 and "1 skipped" in allowed.stdout, allowed.stdout + allowed.stderr


# -- special files and NUL bytes (issue 23, item 3) ------------------------------------

def test_a_nul_byte_in_a_case_file_is_refused_at_its_place(tmp_path):
    path = tmp_path / "nul.yaml"
    path.write_bytes(b"op: rope_kv_write\nseed: 1\x00\n")
    _refused(run_harness("list", str(path), cwd=tmp_path, timeout=FAST), "nul.yaml:2:8: a NUL byte")


@pytest.mark.parametrize("env, fragment", [
    ('  A: "x\\0y"', "env.A: environment values cannot hold a NUL byte"),
    ('  "A\\0": x', "is not a valid environment variable name"),
])
def test_a_nul_in_env_is_refused_by_list_and_run(tmp_path, env, fragment):
    path = write_case_file(tmp_path, "env.yaml", f"op: rope_kv_write\nenv:\n{env}\n")
    for command in (["list"], ["run", "--no-store"]):
        _refused(run_harness(*command, str(path), cwd=tmp_path, timeout=FAST), "env.yaml:3:", fragment)


def _special(tmp_path, kind):
    """A FIFO, or a symlink to /dev/zero (a device that reads forever)."""
    if kind == "fifo":
        os.mkfifo(tmp_path / "special")
        return tmp_path / "special", "is a FIFO"
    return "/dev/zero", "is a device"


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_special_file_inside_a_case_directory_is_never_opened(tmp_path, kind):
    cases = tmp_path / "cases"
    write_case_file(cases, "a.yaml", OK)
    target, what = _special(tmp_path, kind)
    os.symlink(target, cases / "b.yaml") if kind == "device" else os.mkfifo(cases / "b.yaml")
    _refused(run_harness("list", str(cases), cwd=tmp_path, timeout=FAST), f"b.yaml: {what}", "not a case file")


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_special_file_as_a_case_argument_says_what_it_is(tmp_path, kind):
    target, what = _special(tmp_path, kind)
    _refused(run_harness("list", str(target), cwd=tmp_path, timeout=FAST), what)


def test_a_case_file_past_the_read_bound_is_refused(tmp_path):
    from harness.casefiles.loader import MAX_CASE_FILE_BYTES
    path = tmp_path / "huge.yaml"
    path.write_bytes(OK.encode() + b"#" * MAX_CASE_FILE_BYTES)
    _refused(run_harness("list", str(path), cwd=tmp_path, timeout=FAST), "huge.yaml: larger than 4 MiB")


@pytest.mark.parametrize("flag, value, fragment", [
    ("--log-dir", "/dev/null", "--log-dir /dev/null: is a device, expected a directory"),
    ("--log-dir", "fifo", "is a FIFO, expected a directory"),
    ("--log-dir", "plain", "is a regular file, expected a directory"),
    ("--golden-cache", "plain", "is a regular file, expected a directory"),
    ("--golden-cache", "/dev/null", "--golden-cache /dev/null: is a device, expected a directory"),
    ("--store", "/dev/null", "store /dev/null: is a device, not a database file"),
    ("--store", "fifo", "store fifo: is a FIFO, not a database file"),
    ("--json", "fifo", "--json fifo: is a FIFO that nothing reads"),
    ("--html", "fifo", "--html fifo: is a FIFO that nothing reads"),
])
def test_special_files_given_to_path_flags_are_refused_before_any_case(tmp_path, flag, value, fragment):
    path = write_case_file(tmp_path, "ok.yaml", OK)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "plain").write_text("")
    store = [] if flag == "--store" else ["--no-store"]
    _refused(run_harness("run", str(path), *store, flag, value, cwd=tmp_path, timeout=FAST), fragment)


def _kinds(tmp_path):
    """A FIFO, a bound UNIX socket and a symlink loop in ``tmp_path`` (a device: /dev/zero)."""
    import socket
    os.mkfifo(tmp_path / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    os.symlink("loop2", tmp_path / "loop1")
    os.symlink("loop1", tmp_path / "loop2")
    return sock


@pytest.mark.parametrize("argv, fragment", [
    (["run", "ok.yaml", "--no-store", "--kernel-path", "fifo"], "--kernel-path fifo: is a FIFO"),
    (["list", "ok.yaml", "--kernel-path", "sock"], "--kernel-path sock: is a socket"),
    (["run", "ok.yaml", "--no-store", "--kernel-path", "/dev/zero"], "--kernel-path /dev/zero: is a device"),
    (["run", "ok.yaml", "--no-store", "--kernel-path", "loop1"], "--kernel-path loop1: is a symlink loop"),
    (["run", "ok.yaml", "--no-store", "--rules", "fifo"], "--rules fifo: is a FIFO"),
    (["report", "fifo"], "report fifo: is a FIFO"),
    (["list", "cases"], "b.yaml: is a symlink loop (it never reaches a file), not a case file"),
    (["list", "big_seed.yaml"], "big_seed.yaml:2:7: seed: an integer of 5000 digits"),
])
def test_path_flags_naming_a_fifo_socket_device_or_loop_and_huge_integers_exit_2(tmp_path, argv, fragment):
    """Issue 37, item 6: --kernel-path a FIFO hung with no output; a symlink loop in a case
    directory and a seed of 5000 digits were exit 3 (RuntimeError, ValueError)."""
    write_case_file(tmp_path, "ok.yaml", OK)
    write_case_file(tmp_path, "big_seed.yaml", OK + "seed: " + "9" * 5000 + "\n")
    write_case_file(tmp_path / "cases", "a.yaml", OK)
    os.symlink("c.yaml", tmp_path / "cases" / "b.yaml")
    os.symlink("b.yaml", tmp_path / "cases" / "c.yaml")
    sock = _kinds(tmp_path)
    try:
        _refused(run_harness(*argv, cwd=tmp_path, timeout=FAST), fragment)
    finally:
        sock.close()
