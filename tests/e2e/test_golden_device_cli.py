"""``--golden-device`` through the CLI and the pytest plugin, in subprocesses.

Only the host can be the golden device here (no accelerator on this machine): a run with
``--golden-device cpu`` must be the run without it, and every other device is refused up front.
"""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from safetensors import safe_open

from harness.store import Store
from helpers import results_by_id, run_harness, write_case_file

MIXED = """\
name: mixed
op: fused_rope_decode_attention
seq_lens: multi_block
matrix:
  kernel: [reference, stale_kv]
  slot_mode: [arange, "padded(0.5)"]
"""


def _goldens(cache_dir) -> dict[str, dict[str, bytes]]:
    """Each cache file's tensors as bytes, by file name (its key); the metadata names the writer's pid."""
    found = {}
    for path in sorted(cache_dir.rglob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            found[path.relative_to(cache_dir).as_posix()] = {
                name: f.get_tensor(name).view(torch.uint8).numpy().tobytes() for name in f.keys()}
    return found


def test_a_host_golden_device_is_the_run_without_the_flag(tmp_path):
    cases = write_case_file(tmp_path / "cases", "mixed.yaml", MIXED)
    runs = {}
    for name, flag in (("default", []), ("cpu", ["--golden-device", "cpu"])):
        out, cache = tmp_path / f"{name}.json", tmp_path / f"goldens-{name}"
        proc = run_harness("run", str(cases), *flag, "--json", str(out), "--golden-cache", str(cache),
                           "--no-store", "--log-dir", str(tmp_path / f"logs-{name}"), cwd=tmp_path)
        assert proc.returncode == 1, proc.stdout + proc.stderr         # stale_kv fails, reference passes
        runs[name] = ({cid: (r["outcome"], r["code"], r["summary"]) for cid, r in results_by_id(out).items()},
                      _goldens(cache))
    assert runs["cpu"][0] == runs["default"][0]
    assert {o for o, _, _ in runs["cpu"][0].values()} == {"PASS", "MISMATCH"}
    assert runs["cpu"][1] == runs["default"][1] and len(runs["cpu"][1]) == 4     # same files (2 goldens, their intermediates), same bytes


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("command", ["run", "flake", "audit"])
@pytest.mark.parametrize("value, message", [
    ("cuda:0", "--golden-device cuda:0 not present"),
    ("gpu0", "--golden-device: invalid device 'gpu0'"),
    ("", "--golden-device is empty"),
])
def test_a_golden_device_that_is_not_there_is_one_line_and_exit_2(tmp_path, command, value, message):
    cases = write_case_file(tmp_path / "cases", "mixed.yaml", MIXED)
    out = tmp_path / "out.json"
    proc = run_harness(command, str(cases), "--golden-device", value, "--json", str(out), "--no-store",
                       "--log-dir", str(tmp_path / "logs"), cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr
    assert not out.exists() and not (tmp_path / "logs").exists()         # before any case ran


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_the_pytest_plugin_refuses_an_absent_golden_device(tmp_path):
    cases = write_case_file(tmp_path / "cases", "mixed.yaml", MIXED)
    proc = subprocess.run([sys.executable, "-m", "pytest", str(cases), "--golden-device", "npu:0", "--no-store",
                           "-p", "no:cacheprovider"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr             # pytest's usage error
    assert "--golden-device npu:0 not present" in proc.stderr


def test_a_run_records_its_golden_device_for_resume(tmp_path):
    cases = write_case_file(tmp_path / "cases", "mixed.yaml", MIXED)
    store = tmp_path / "r.sqlite"
    proc = run_harness("run", str(cases), "-k", "reference and arange", "--golden-device", "cpu", "--store",
                       str(store), "--no-golden-cache", "--log-dir", str(tmp_path / "logs"),
                       cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with Store(store) as s:
        (run,) = s.runs()
    assert run["extra"]["options"]["golden_device"] == "cpu"
