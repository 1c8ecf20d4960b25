"""The ``npu:N`` path end to end on the CPU stand-in for torch-npu (tests/npu_standin).

``harness run --device npu:...`` with the stand-in on PYTHONPATH: NpuBackend, one NPU per
worker, device log capture, the launch-blocking re-run and a device lost mid-run, all through
real worker processes.  The stand-in is test code: the harness never imports it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from helpers import KERNELS_UNDER_TEST, ROOT, results_by_id, run_harness, write_case_file

STANDIN = ROOT / "tests" / "npu_standin"


def standin_env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(STANDIN), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {"PYTHONPATH": path, **extra}


def case_file(tmp_path: Path, kernel: str, batch: str = "[4]", seeds: str = "[0]") -> Path:
    return write_case_file(tmp_path / "cases", "npu.yaml", f"""\
        name: npu
        op: rope_kv_write
        geometry: tiny
        kernel: {kernel}
        matrix:
          batch: {batch}
          seed: {seeds}
        """)


def run(tmp_path: Path, cases: Path, *flags: str, env: dict | None = None):
    out = tmp_path / "out.json"
    done = run_harness("run", str(cases), "--kernel-path", str(KERNELS_UNDER_TEST), "--no-store",
                       "--no-golden-cache", "--log-dir", str(tmp_path / "logs"), "--json", str(out), *flags,
                       cwd=tmp_path, env=standin_env(**(env or {})))
    return done, (results_by_id(out) if out.exists() else {})


def test_wrapper_only_fault_is_labelled_from_the_plog_and_rerun_blocking(tmp_path):
    done, results = run(tmp_path, case_file(tmp_path, "npu_faults.kernels:wrapper_only_507018"), "--device", "npu:0")
    assert done.returncode == 1, done.stderr
    (result,) = results.values()
    # the exception carried torch-npu's wrapper only: the code came from the worker's plog
    assert "ASCEND_LAUNCH_BLOCKING=1" in result["report"] and "507018" not in result["report"]
    assert (result["outcome"], result["label"]) == ("DEVICE_FAULT", "FAIL_507018")
    device_log = result["metrics"]["device_log"]
    assert device_log["files"] and all(f.startswith("debug/plog/plog-") for f in device_log["files"])
    assert "runtime result = 507018" in device_log["text"]
    assert device_log["text"].index("[ERROR]") < device_log["text"].index("[INFO]")     # error lines first
    assert Path(device_log["directory"]).is_relative_to(tmp_path / "logs")
    rerun = result["metrics"]["blocking_rerun"]
    assert rerun["env"] == "ASCEND_LAUNCH_BLOCKING=1" and rerun["reproduced"] and rerun["same_label"]
    assert any("npu_faults/kernels.py" in frame and "wrapper_only_507018" in frame for frame in rerun["where"])
    assert Path(rerun["log"]).name.endswith(".blocking.log")
    # the first attempt raised at the harness's synchronize (asynchronous); the re-run in the kernel
    assert "synchronize" in result["report"]


def test_no_blocking_rerun_and_print_to_stdout(tmp_path):
    """--no-blocking-rerun keeps one attempt; ASCEND_SLOG_PRINT_TO_STDOUT=1 sends the runtime's lines
    to the captured output instead of the plog, and the case is labelled from there."""
    done, results = run(tmp_path, case_file(tmp_path, "npu_faults.kernels:wrapper_only_507018"), "--device", "npu:0",
                        "--no-blocking-rerun", env={"ASCEND_SLOG_PRINT_TO_STDOUT": "1"})
    (result,) = results.values()
    assert (result["outcome"], result["label"]) == ("DEVICE_FAULT", "FAIL_507018"), done.stdout
    assert "blocking_rerun" not in result["metrics"]
    assert "device_log" not in result["metrics"]          # nothing was written to the log files
    assert "runtime result = 507018" in Path(result["log"]).read_text()


def test_user_log_path_is_honoured_and_other_processes_left_out(tmp_path):
    shared = tmp_path / "ascend-log"
    other = shared / "debug" / "plog" / "plog-1_20260101000000000000.log"
    other.parent.mkdir(parents=True)
    other.write_text("[ERROR] RUNTIME(1,python): another process's 507015 fault\n")
    done, results = run(tmp_path, case_file(tmp_path, "npu_faults.kernels:wrapper_only_507018"), "--device", "npu:0",
                        "--no-blocking-rerun", env={"ASCEND_PROCESS_LOG_PATH": str(shared)})
    (result,) = results.values()
    assert result["label"] == "FAIL_507018", done.stdout
    assert result["metrics"]["device_log"]["directory"] == str(shared)
    assert "another process" not in result["metrics"]["device_log"]["text"]
    with other.open("a") as fh:              # a file of another pid that grows during a case is left out too
        fh.write("more\n")


def test_one_npu_per_worker(tmp_path):
    """Two workers on npu:0-1, each kernel allocating on "npu:0" and on the current device: each
    worker touched one physical NPU, and not the other's."""
    trace = tmp_path / "trace"
    done, results = run(tmp_path, case_file(tmp_path, "npu_faults.kernels:allocates_on_device_zero", "[1, 2, 4, 8]",
                                            "[0, 1]"), "--devices", "npu:0-1", env={"HARNESS_STANDIN_TRACE": str(trace)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert {r["device"] for r in results.values()} == {"npu:0", "npu:1"}
    touched = {int(f.name): {int(x) for x in f.read_text().split()} for f in trace.iterdir()}
    worker_sets = list(touched.values())
    assert worker_sets and all(len(ids) == 1 for ids in worker_sets), touched
    assert {next(iter(ids)) for ids in worker_sets} == {0, 1}
    assert all(ids <= {0, 1} for ids in touched.values()), touched


def test_a_lost_device_hands_its_cases_to_the_others(tmp_path):
    lost = tmp_path / "lost"
    cases = case_file(tmp_path, "npu_faults.kernels:faults_and_loses_device", "[1, 2, 4, 8]", "[0, 1, 2]")
    done, results = run(tmp_path, cases, "--devices", "npu:0-1", "--no-blocking-rerun",
                        env={"HARNESS_STANDIN_LOST": str(lost), "FAULT_ON": "1"})
    assert (lost / "1").exists()
    outcomes = sorted(r["outcome"] for r in results.values())
    assert len(results) == 12 and outcomes.count("DEVICE_FAULT") == 1, outcomes
    assert outcomes.count("PASS") == 11                  # every other case ran, on npu:0
    faulted = next(r for r in results.values() if r["outcome"] == "DEVICE_FAULT")
    assert faulted["device"] == "npu:1"
    assert "npu:1 lost" in done.stdout + done.stderr


def test_every_device_lost_skips_what_is_left(tmp_path):
    lost = tmp_path / "lost"
    cases = case_file(tmp_path, "npu_faults.kernels:faults_and_loses_device", "[1, 2]", "[0, 1]")
    done, results = run(tmp_path, cases, "--device", "npu:1", "--no-blocking-rerun",
                        env={"HARNESS_STANDIN_LOST": str(lost), "FAULT_ON": "1"})
    outcomes = [r["outcome"] for r in results.values()]
    assert len(results) == 4 and outcomes.count("DEVICE_FAULT") == 1, outcomes
    skipped = [r for r in results.values() if r["outcome"] == "SKIPPED"]
    assert len(skipped) == 3 and all(r["summary"].startswith("device lost: npu:1") for r in skipped)


def test_shipped_rope_matrix_passes_on_npu0(tmp_path):
    """The shipped matrix on npu:0 (one file here; the whole matrix is in docs/ascend.md)."""
    out = tmp_path / "out.json"
    done = run_harness("run", str(ROOT / "cases" / "rope_kv_write.yaml"), "--device", "npu:0", "--no-store",
                       "--golden-cache", str(tmp_path / "goldens"),       # not the user's cache
                       "--log-dir", str(tmp_path / "logs"), "--json", str(out), cwd=tmp_path, env=standin_env())
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out.read_text())
    assert data["results"] and all(r["outcome"] == "PASS" and r["device"] == "npu:0" for r in data["results"])
