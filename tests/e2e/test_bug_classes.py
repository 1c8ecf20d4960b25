"""Every checker fails on the bug it exists for: shipped mutants and classic-bug kernels, one run.

One ``harness run`` over a generated matrix (real worker processes), then one
assertion per case: the expected outcome, and the reference passing the same
inputs.
"""
from __future__ import annotations

import json

import pytest

from helpers import KERNELS_UNDER_TEST, ROOT, results_by_id, run_harness, write_case_file

BUGS = (ROOT / "ci" / "bug-classes.yaml").read_text()

EXPECTED = {
    "ref-rope": ("PASS", None),
    "ref-fused": ("PASS", None),
    "ref-prefill": ("PASS", None),
    "ref-layers": ("PASS", None),
    "ref-paged": ("PASS", None),
    "ref-warmup": ("PASS", None),
    "unguarded-rope": ("OOB_WRITE", "guard band overwritten: rows"),
    "unguarded-fused": ("OOB_WRITE", "guard band overwritten: rows"),
    "unguarded-warmup": ("OOB_WRITE", "guard band overwritten: rows"),
    "unguarded-layers": ("OOB_WRITE", "guard band overwritten: rows"),
    "returns-query": ("CONTRACT", "returned the 'query' buffer"),
    "skip-rope": ("MISMATCH", "query"),
    "skip-rope-layers": ("MISMATCH", None),
    "stale-kv": ("MISMATCH", "out"),
    "stale-kv-prefill": ("MISMATCH", "out"),
    "racy-head": ("MISMATCH", "out"),
    "racy-head-never": ("PASS", None),
    "hang": ("HANG", "timeout_s=2"),
    "segfault": ("CRASH", "SIGSEGV"),
    "gptj-rope": ("MISMATCH", "query"),
    "off-by-one-page": ("MISMATCH", "out"),
    "half-written": ("UNWRITTEN", "never written"),
    "nan-head": ("NONFINITE", "head [1]"),
    "wrong-signature": ("CONTRACT", "scale"),
    "returns-new-tensor": ("CONTRACT", "not the 'out' buffer"),
    "npu-fault": ("DEVICE_FAULT", "AI Core"),
    "zeroes-q-proj": ("CONTRACT", "the kernel wrote into input q_proj"),
    "zeroes-positions": ("CONTRACT", "the kernel wrote into input positions"),
    "normalises-q-proj": ("CONTRACT", "the kernel wrote into input q_proj"),
    "clobbers-rope-cos": ("CONTRACT", "the kernel wrote into input rope_cos"),
    "ref-topk": ("PASS", None),
    "topk-ascending-ties": ("PASS", None),
    "topk-no-norm": ("MISMATCH", "first bad intermediate normed"),
    "topk-off-by-one": ("MISMATCH", "topk_indices"),
    "topk-borrowed-value": ("MISMATCH", "not their logit"),
}


@pytest.fixture(scope="module")
def bug_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bugs")
    cases = write_case_file(tmp / "cases", "bugs.yaml", BUGS)
    out = tmp / "out.json"
    proc = run_harness("run", str(cases), "--device", "cpu", "--kernel-path", str(KERNELS_UNDER_TEST),
                       "--json", str(out), "--no-golden-cache", "--log-dir", str(tmp / "logs"), cwd=tmp)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return {cid.split("[")[1].rstrip("]"): r for cid, r in results_by_id(out).items()}, json.loads(out.read_text())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bug_gets_its_outcome(bug_results, name):
    results, _ = bug_results
    outcome, needle = EXPECTED[name]
    r = results[name]
    assert r["outcome"] == outcome, f"{name}: {r['outcome']} {r['summary']}\n{r['report'][:2000]}"
    if needle:
        assert needle in r["summary"] + r["report"] + str(r["code"]), r["summary"]


def test_every_case_has_exactly_one_result(bug_results):
    results, doc = bug_results
    assert len(doc["results"]) == len(EXPECTED) == len(results)


def test_mismatch_report_localises_the_corrupted_head(bug_results):
    results, _ = bug_results
    report = results["racy-head"]["report"]
    assert "head: 1 of 4 bad" in report, report


def test_root_cause_names_the_device_fault_and_keeps_the_cascade(bug_results):
    results, _ = bug_results
    fault = results["npu-fault"]
    assert fault["label"] == "FAIL_507018"            # the code printed; the AICore exception is the cause
    assert "FAIL_507018" in fault["metrics"]["secondary"]


def test_outcomes_and_labels_are_those_before_the_op_packs(bug_results):
    """Issue 36: moving the five ops into a pack changed no outcome and no label.  The record is
    this matrix run at 700c223, before the move (tests/e2e/data/outcomes_before_packs.json)."""
    results, doc = bug_results
    before = json.loads((ROOT / "tests" / "e2e" / "data" / "outcomes_before_packs.json").read_text())["bugs"]
    now = {r["case_id"]: [r["outcome"], r["label"]] for r in doc["results"]}
    assert {cid: now.get(cid) for cid in before} == before
