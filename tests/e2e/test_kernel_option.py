"""``--kernel`` end to end: the shipped matrices run against another kernel without touching
a case file, ids unchanged; ops it lacks are left out in one line; a kernel that cannot run
anything is exit 2 in one line before any case runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import KERNELS_UNDER_TEST, ROOT, run_harness, write_case_file

OUTSIDE = ROOT / "tests" / "outside_kernels"
# One case or more of every op of the shipped tiny matrices (44 cases).
SELECT = ("--tier", "ci", "-k", "batch=1,")


@pytest.fixture(scope="module")
def listed(tmp_path_factory) -> tuple[str, ...]:
    """The selected case ids as ``harness list`` prints them: one run for the module (the listing
    depends on the shipped case files only), a tuple so no test can change it for another."""
    proc = run_harness("list", str(ROOT / "cases"), *SELECT, cwd=tmp_path_factory.mktemp("list"))
    assert proc.returncode == 0, proc.stderr
    return tuple(line.split("\t")[0] for line in proc.stdout.splitlines())


def _run(tmp_path, cache, *args: str, command: str = "run") -> tuple[subprocess.CompletedProcess, list[dict]]:
    out = tmp_path / "out.json"
    out.unlink(missing_ok=True)
    proc = run_harness(command, str(ROOT / "cases"), *SELECT, "--no-progress", "--no-store", "--json", str(out),
                       "--golden-cache", str(cache), "--log-dir", str(tmp_path / "logs"), *args, cwd=tmp_path)
    return proc, json.loads(out.read_text())["results"] if out.exists() else []


def test_shipped_matrices_under_kernel_reference_keep_their_ids_and_pass(tmp_path, golden_cache_dir, listed):
    proc, results = _run(tmp_path, golden_cache_dir, "--kernel", "reference")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == "kernel: reference"
    assert [r["case_id"] for r in results] == list(listed)
    assert {(r["outcome"], r["kernel"]) for r in results} == {("PASS", "reference")}


def test_kernel_stale_kv_fails_the_ops_it_has_and_leaves_out_the_others(tmp_path, golden_cache_dir, listed):
    proc, results = _run(tmp_path, golden_cache_dir, "--kernel", "stale_kv")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for op, name in (("rope_kv_write", "rope-kv-write"), ("paged_decode_attention", "paged-decode")):
        count = sum(i.startswith(name + "[") for i in listed)
        assert f"kernel stale_kv has no {op}: {count} cases not run" in proc.stdout
    assert {r["kernel"] for r in results} == {"stale_kv"}
    assert {r["op"] for r in results} == {"fused_rope_decode_attention", "prefill_attention", "decode_layers"}
    assert set(r["case_id"] for r in results) < set(listed)
    assert any(r["outcome"] == "MISMATCH" for r in results)


def test_a_module_from_the_kernel_path_gives_one_function_per_op(tmp_path, golden_cache_dir, listed):
    markdown = tmp_path / "report.md"
    proc, results = _run(tmp_path, golden_cache_dir, "--kernel-path", str(OUTSIDE), "--kernel", "outside.torch_sdpa",
                         "--markdown", str(markdown))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "- **kernel**: outside\\.torch\\_sdpa\n" in markdown.read_text()
    decode_layers = sum(i.startswith("decode-layers[") for i in listed)
    assert f"kernel outside.torch_sdpa has no decode_layers: {decode_layers} cases not run" in proc.stdout
    assert {(r["outcome"], r["kernel"]) for r in results} == {("PASS", "outside.torch_sdpa")}


def test_a_kernel_that_does_not_import_is_exit_2_in_one_line_before_any_case(tmp_path, golden_cache_dir):
    proc, results = _run(tmp_path, golden_cache_dir, "--kernel", "nosuch.mod:fn")
    assert proc.returncode == 2 and not results
    assert proc.stderr == ("harness: error: --kernel nosuch.mod:fn: module nosuch.mod does not import: "
                           "ModuleNotFoundError: No module named 'nosuch'\n")


def test_a_signature_no_op_can_bind_is_exit_2_naming_the_op_and_the_argument(tmp_path, golden_cache_dir):
    proc, results = _run(tmp_path, golden_cache_dir, "--kernel-path", str(KERNELS_UNDER_TEST),
                         "--kernel", "classic_bugs.kernels:wrong_signature", "-k", "paged-decode")
    assert proc.returncode == 2 and not results
    (line,) = proc.stderr.splitlines()
    assert "--kernel classic_bugs.kernels:wrong_signature" in line and "op paged_decode_attention" in line
    assert "scale" in line


def test_a_kernel_lacking_every_selected_op_is_exit_2(tmp_path, golden_cache_dir):
    proc, _ = _run(tmp_path, golden_cache_dir, "--kernel", "triton", "-k", "prefill")
    assert proc.returncode == 2
    assert proc.stderr == "harness: error: --kernel triton has none of the ops of the selected cases: " \
                          "prefill_attention\n"


def test_flake_takes_kernel(tmp_path, golden_cache_dir):
    proc, results = _run(tmp_path, golden_cache_dir, "--kernel", "stale_kv", "-k", "fused-decode and multi_block",
                         "--repeat", "2", command="flake")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert results and {r["kernel"] for r in results} == {"stale_kv"}


def test_pytest_harness_kernel_replaces_and_deselects(tmp_path):
    for op in ("fused_rope_decode_attention", "rope_kv_write"):
        write_case_file(tmp_path / "cases", f"{op}.yaml", f"op: {op}\nseq_lens: multi_block\n")
    env = {**os.environ, "PYTEST_ADDOPTS": ""}
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "cases", "--no-store",
                           "--no-golden-cache", "--harness-kernel", "stale_kv", "-q"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "kernel stale_kv has no rope_kv_write: 1 case not run" in proc.stdout
    assert "1 failed" in proc.stdout and "1 deselected" in proc.stdout


def test_ops_whose_arguments_do_not_bind_run_as_contract_when_others_bind(tmp_path, golden_cache_dir):
    proc, results = _run(tmp_path, golden_cache_dir, "--kernel-path", str(KERNELS_UNDER_TEST),
                         "--kernel", "classic_bugs.kernels:off_by_one_page", "-k", "paged-decode or rope-kv-write")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    note = next(line for line in proc.stdout.splitlines() if "does not fit op rope_kv_write" in line)
    assert note.endswith("will be CONTRACT")
    assert {r["outcome"] for r in results if r["op"] == "rope_kv_write"} == {"CONTRACT"}
    assert {r["op"] for r in results} == {"rope_kv_write", "paged_decode_attention"}


def test_compare_takes_kernel_from_each_refs_own_code(tmp_path, golden_cache_dir):
    from gitrepo import make_kernel_repo
    info = make_kernel_repo(tmp_path / "kpkg", n_commits=3, culprit=2, fail_p=1.0)
    case = write_case_file(tmp_path, "case.yaml", info.case_yaml.replace(info.kernel, "reference"))
    out = tmp_path / "compare.json"
    # kpkg is on no path of the front end's: it imports only in each ref's workers.
    proc = run_harness("compare", str(case), "--repo", str(info.path), "--ref", f"good={info.shas[0]}",
                       "--ref", f"bad={info.shas[2]}", "--repeat", "1", "--kernel", info.kernel,
                       "--env", "PYTHONPATH={worktree}/python:{PYTHONPATH}", "--worktree-cache", str(tmp_path / "wt"),
                       "--golden-cache", str(golden_cache_dir), "--no-store", "--log-dir", str(tmp_path / "logs"),
                       "--json", str(out), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (row,) = json.loads(out.read_text())["compare"]
    assert row["case_id"] == "kpkg-rope" and row["cells"]["good"] == "1/1 PASS"
    assert "1/1 PASS" not in row["cells"]["bad"]
    assert {r["kernel"] for r in json.loads(out.read_text())["results"]} == {info.kernel}
