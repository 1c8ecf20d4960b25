"""The `harness` CLI end to end, in subprocesses, on generated case files."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

from helpers import ROOT, results_by_id, run_harness, write_case_file

GOOD = """\
name: good
op: fused_rope_decode_attention
matrix:
  batch: [1, 4]
  seq_lens: [multi_block]
  slot_mode: [arange, "padded(0.5)"]
exclude:
  - {batch: 1, slot_mode: "padded(0.5)"}
"""

REQUIRED_RESULT_KEYS = {"case_id", "outcome", "code", "metrics", "duration_s", "repeat", "device", "log"}


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    """One `run` of GOOD on a fresh golden cache, read by the tests that each ran it before: a
    test that runs on from it works on copies of its directories, so it stays as this run left it."""
    root, goldens = tmp_path_factory.mktemp("good-run"), tmp_path_factory.mktemp("golden-cache")
    cases = write_case_file(root / "cases", "good.yaml", GOOD)
    out = root / "out.json"
    proc = run_harness("run", str(cases), "--device", "cpu", "--json", str(out),
                       "--golden-cache", str(goldens), "--log-dir", str(root / "logs"), cwd=root)
    return SimpleNamespace(root=root, goldens=goldens, cases=cases, out=out, proc=proc)


def _copy_of(src, dst):
    """A copy of a shared run's directory, for a test that writes into it."""
    shutil.copytree(src, dst)
    return dst


def test_run_passes_writes_json_and_exits_0(good_run, tmp_path):
    proc = good_run.proc
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(good_run.out.read_text())
    assert set(doc) >= {"results", "summary"}
    assert doc["summary"]["total"] == 3 and doc["summary"]["passed"] == 3
    for r in doc["results"]:
        assert REQUIRED_RESULT_KEYS <= set(r)
        assert r["outcome"] == "PASS" and r["device"] == "cpu" and r["repeat"] == 0
    assert "3 passed" in proc.stdout

    # the second run goes on in copies (its cwd with the store, the cache), as the first run left them
    work, goldens = _copy_of(good_run.root, tmp_path / "work"), _copy_of(good_run.goldens, tmp_path / "goldens")
    out = work / "out.json"
    again = run_harness("run", str(work / "cases" / "good.yaml"), "--json", str(out), "--golden-cache", str(goldens),
                        "--log-dir", str(work / "logs2"), cwd=work)
    assert again.returncode == 0
    assert json.loads(out.read_text())["summary"]["golden_cache"] == {"computed": 0, "hits": 3}


def test_failures_exit_1_and_keep_every_result(tmp_path, golden_cache_dir):
    cases = write_case_file(tmp_path / "cases", "mixed.yaml", """\
        name: mixed
        op: fused_rope_decode_attention
        seq_lens: multi_block
        matrix:
          kernel: [reference, returns_query, stale_kv]
        """)
    out = tmp_path / "out.json"
    proc = run_harness("run", str(cases), "--json", str(out), "--golden-cache", str(golden_cache_dir),
                       "--log-dir", str(tmp_path / "logs"), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    res = results_by_id(out)
    assert res["mixed[kernel=reference]"]["outcome"] == "PASS"
    assert res["mixed[kernel=returns_query]"]["outcome"] == "CONTRACT"
    assert res["mixed[kernel=stale_kv]"]["outcome"] == "MISMATCH"


@pytest.mark.parametrize("text, needle", [
    ("op: rope_kv_write\nmatrix:\n  batch: [1, 2\n", "bad.yaml:3"),
    ("op: rope_kv_write\nslot_mdoe: arange\n", "slot_mdoe"),
    ("op: no_such_op\n", "no_such_op"),
    ("op: rope_kv_write\nkernel: nosuchkernel\n", "nosuchkernel"),
    ("op: rope_kv_write\ngeometry: llama-9000\n", "llama-9000"),
    ("op: rope_kv_write\nbatch: two\n", "batch"),
    ("op: rope_kv_write\nmatrix:\n  seed: []\n", "seed"),
    ("op: rope_kv_write\nnum_heads: 5\nnum_kv_heads: 2\n", "num_heads"),
    ("op: rope_kv_write\nnum_pages: 8\nseq_lens: const(5000)\n", "seq_lens"),
    ("op: rope_kv_write\npage_size: 0\n", "page_size"),
])
def test_bad_case_files_give_one_line_and_exit_2(tmp_path, text, needle):
    path = write_case_file(tmp_path / "cases", "bad.yaml", text)
    proc = run_harness("run", str(path), cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "bad.yaml" in lines[0] and needle in lines[0]


@pytest.mark.parametrize("device", ["npu:x", "gpu", "cuda:-1", "cpu:0"])
def test_invalid_device_exits_2(tmp_path, device):
    cases = write_case_file(tmp_path / "cases", "good.yaml", GOOD)
    proc = run_harness("run", str(cases), "--device", device, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    assert "invalid device" in proc.stderr and proc.stderr.count("\n") == 1


def test_selection_that_matches_nothing_exits_2(tmp_path):
    cases = write_case_file(tmp_path / "cases", "good.yaml", GOOD)
    proc = run_harness("run", str(cases), "-k", "nothing_like_this", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "no cases matching" in proc.stderr


def test_absent_device_and_broken_kernel_module_are_per_case(tmp_path, golden_cache_dir):
    (tmp_path / "lib" / "brokenkern").mkdir(parents=True)
    (tmp_path / "lib" / "brokenkern" / "__init__.py").write_text("raise RuntimeError('half-built checkout')\n")
    cases = write_case_file(tmp_path / "cases", "k.yaml", """\
        name: k
        op: rope_kv_write
        matrix:
          kernel: [reference, "brokenkern:rope_kv_write", "missingkern.ops:rope_kv_write"]
        """)
    out = tmp_path / "out.json"
    proc = run_harness("run", str(cases), "--kernel-path", str(tmp_path / "lib"), "--json", str(out),
                       "--golden-cache", str(golden_cache_dir), "--log-dir", str(tmp_path / "logs"), cwd=tmp_path)
    assert proc.returncode == 1
    res = results_by_id(out)
    assert res["k[kernel=reference]"]["outcome"] == "PASS"
    assert res["k[kernel=brokenkern:rope_kv_write]"]["outcome"] == "BUILD_ERROR"
    assert "half-built checkout" in res["k[kernel=brokenkern:rope_kv_write]"]["summary"]
    assert res["k[kernel=missingkern.ops:rope_kv_write]"]["outcome"] == "BUILD_ERROR"

    npu = run_harness("run", str(cases), "-k", "reference", "--device", "npu:0", "--allow-absent-devices", "--json", str(out),
                      "--golden-cache", str(golden_cache_dir), "--log-dir", str(tmp_path / "logs3"), cwd=tmp_path)
    assert npu.returncode == 0
    (only,) = results_by_id(out).values()
    assert only["outcome"] == "SKIPPED" and "not present" in only["summary"]


def test_list_prints_ids(tmp_path):
    cases = write_case_file(tmp_path / "cases", "good.yaml", GOOD)
    proc = run_harness("list", str(cases), cwd=tmp_path, timeout=60)
    assert proc.returncode == 0
    ids = [line.split("\t")[0] for line in proc.stdout.splitlines()]
    assert ids == ["good[batch=1,slot_mode=arange]", "good[batch=4,slot_mode=arange]",
                   "good[batch=4,slot_mode=padded(0.5)]"]


def test_shipped_cases_load():
    proc = run_harness("list", str(ROOT / "cases"), cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) > 100


def test_user_rules_classify_and_bad_rules_exit_2(tmp_path, golden_cache_dir):
    (tmp_path / "lib" / "mylib").mkdir(parents=True)
    (tmp_path / "lib" / "mylib" / "__init__.py").write_text(
        "def rope_kv_write(**kw):\n    raise RuntimeError('MYLIB_FATAL ring=7: dma engine wedged')\n")
    cases = write_case_file(tmp_path / "cases", "u.yaml", "name: u\nop: rope_kv_write\nkernel: 'mylib:rope_kv_write'\n")
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "rules:\n"
        "  - name: mylib_dma\n"
        "    pattern: 'MYLIB_FATAL ring=(?P<ring>\\d+)'\n"
        "    outcome: DEVICE_FAULT\n"
        "    code: MYLIB_DMA\n"
        "    sticky: true\n"
        "    meaning: our DMA engine wedged\n"
        "    hint: reset the ring\n")
    out = tmp_path / "out.json"
    proc = run_harness("run", str(cases), "--kernel-path", str(tmp_path / "lib"), "--rules", str(rules),
                       "--json", str(out), "--golden-cache", str(golden_cache_dir),
                       "--log-dir", str(tmp_path / "logs"), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (r,) = results_by_id(out).values()
    assert (r["outcome"], r["label"], r["sticky"]) == ("DEVICE_FAULT", "FAIL_MYLIB_DMA", True)
    assert r["metrics"]["hint"] == "reset the ring"

    rules.write_text("rules:\n  - name: broken\n    pattern: '(unclosed'\n    outcome: DEVICE_FAULT\n"
                     "    sticky: true\n    meaning: x\n")
    bad = run_harness("run", str(cases), "--rules", str(rules), cwd=tmp_path, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "rules.yaml:3" in bad.stderr and "pattern" in bad.stderr


def test_kill_9_of_the_front_end_loses_nothing_and_resume_runs_only_the_rest(tmp_path, golden_cache_dir):
    import signal
    import sqlite3
    import time

    (tmp_path / "lib" / "slowkern").mkdir(parents=True)
    (tmp_path / "lib" / "slowkern" / "__init__.py").write_text(
        "import time\nfrom harness.kernels.reference import rope_kv_write as _ref\n"
        "def rope_kv_write(**kw):\n    time.sleep(0.4)\n    return _ref(**kw)\n")
    cases = write_case_file(tmp_path / "cases", "slow.yaml", """\
        name: slow
        op: rope_kv_write
        kernel: "slowkern:rope_kv_write"
        matrix:
          seed: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
        """)
    store = tmp_path / "results.sqlite"
    common = ["--kernel-path", str(tmp_path / "lib"), "--store", str(store), "--golden-cache", str(golden_cache_dir),
              "--no-progress"]
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", str(cases), *common,
                             "--log-dir", str(tmp_path / "logs1")], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    done = 0
    while time.time() < deadline and done < 3:
        time.sleep(0.1)
        if store.exists():
            try:
                with sqlite3.connect(store) as db:
                    done = db.execute("select count(*) from results").fetchone()[0]
            except sqlite3.Error:
                pass
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert 3 <= done < 10

    with sqlite3.connect(store) as db:
        assert db.execute("pragma integrity_check").fetchone()[0] == "ok"
        (run_id,) = db.execute("select run_id from runs").fetchone()
        kept = {r[0] for r in db.execute("select case_id from results where run_id = ?", (run_id,))}
    assert len(kept) >= done

    out = tmp_path / "rest.json"
    resumed = run_harness("run", "--resume", run_id, *common, "--json", str(out), "--log-dir",
                          str(tmp_path / "logs2"), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    rest = set(results_by_id(out))
    assert rest.isdisjoint(kept) and len(rest | kept) == 10
    again = run_harness("run", "--resume", run_id, *common, cwd=tmp_path, timeout=60)
    assert again.returncode == 0 and "nothing missing" in again.stdout


def test_unusable_store_is_refused_before_any_case(tmp_path):
    cases = write_case_file(tmp_path / "cases", "good.yaml", GOOD)
    proc = run_harness("run", str(cases), "--store", str(tmp_path / "no" / "such" / "dir" / "r.sqlite"),
                       cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "store" in proc.stderr
    assert not (tmp_path / "reports" / "logs").exists()


def test_fp64_goldens_on_request_have_their_own_cache_entries(good_run, tmp_path):
    # the shared run (fp32 goldens, the default) filled the cache for these cases; fp64 runs on a copy of it
    assert good_run.proc.returncode == 0, good_run.proc.stdout + good_run.proc.stderr
    assert json.loads(good_run.out.read_text())["summary"]["golden_cache"] == {"computed": 3, "hits": 0}
    golden_cache_dir = _copy_of(good_run.goldens, tmp_path / "goldens")
    out = tmp_path / "out.json"
    common = ["--golden-cache", str(golden_cache_dir), "--no-store", "--json", str(out)]
    fp64 = run_harness("run", str(good_run.cases), *common, "--golden-dtype", "fp64", "--log-dir", str(tmp_path / "l2"),
                       cwd=tmp_path)
    assert fp64.returncode == 0, fp64.stdout + fp64.stderr
    assert json.loads(out.read_text())["summary"]["golden_cache"] == {"computed": 3, "hits": 0}
