"""The sampling pack end to end (docs/sampling.md): ``harness run`` with real worker processes over
the shipped case file and the pack's kernels, each with the outcome it exists for."""
from __future__ import annotations

import json

import pytest

from helpers import ROOT, run_harness, write_case_file

# kernel -> (precision, expected outcome, what the summary names)
EXPECTED = {
    "reference": ("fp32-compute", "PASS", None),
    "topk_fp32_normed": ("fp32-compute", "PASS", None),
    "topk_ascending_ties": ("fp32-compute", "PASS", None),
    "topk_no_norm": ("fp32-compute", "MISMATCH", "first bad intermediate normed"),
    "topk_off_by_one": ("fp32-compute", "MISMATCH", "topk_indices"),
    "topk_bf16_logits": ("fp32-compute", "MISMATCH", "topk_values"),
    "topk_bf16_logits@bf16": ("bf16-compute", "PASS", None),
    "topk_borrowed_value": ("fp32-compute", "MISMATCH", "not their logit"),
}

MATRIX = """\
name: sampling
op: lm_head_topk
geometry: tiny
timeout_s: 30
include:
""" + "".join(f"  - {{name: {name.replace('@', '-')}, kernel: {name.split('@')[0]}, precision: {p}, batch: 16, seed: 2}}\n"
              for name, (p, _, _) in EXPECTED.items())


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sampling")
    cases = write_case_file(tmp / "cases", "sampling.yaml", MATRIX)
    proc = run_harness("run", str(cases), "--device", "cpu", "--json", "out.json", "--no-store", "--no-progress",
                       "--golden-cache", str(tmp / "goldens"), "--log-dir", str(tmp / "logs"), cwd=tmp)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads((tmp / "out.json").read_text())
    return {r["case_id"].split("[")[1].rstrip("]"): r for r in doc["results"]}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_kernel_gets_its_outcome(results, name):
    _, outcome, needle = EXPECTED[name]
    r = results[name.replace("@", "-")]
    assert r["outcome"] == outcome, f"{name}: {r['outcome']} {r['summary']}\n{r['report'][:2000]}"
    if needle:
        assert needle in r["summary"], r["summary"]


def test_the_shipped_case_file_passes_with_the_reference(tmp_path):
    proc = run_harness("run", str(ROOT / "cases" / "lm_head_topk.yaml"), "--device", "cpu", "--json", "out.json",
                       "--no-store", "--no-progress", "--golden-cache", str(tmp_path / "goldens"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["results"] and {r["outcome"] for r in doc["results"]} == {"PASS"}
