"""Spec ops through the CLI (docs/specs.md): TensorSpec modules nobody here wrote
(tests/outside_specs: their own golden package, int8 weights with fp32 scales, int32 top-k
indices with ties, bool and int64 outputs, bf16 and fp32 tensors, a custom compare_fn), and
the shipped RMSNorm spec op.  Correct kernels pass every case; each one-bug kernel fails
naming the bug's output and row.  One CLI run per kernel, shared by module-scoped fixtures."""
from __future__ import annotations

import pytest

from helpers import ROOT, results_by_id, run_harness, write_case_file

pytestmark = pytest.mark.slow

OUTSIDE = ROOT / "tests" / "outside_specs"
FILES = [str(OUTSIDE / "quant_topk.yaml"), str(OUTSIDE / "quant_topk_builtin.yaml")]


@pytest.fixture(scope="module")
def goldens(tmp_path_factory):
    return tmp_path_factory.mktemp("spec-goldens")


def _run(tmp_path_factory, goldens, *extra: str, files=FILES) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("spec-run") / "r.json"
    proc = run_harness("run", *files, "--kernel-path", str(OUTSIDE), "--no-store", "--no-progress",
                       "--golden-cache", str(goldens), "--json", str(out), *extra, cwd=ROOT)
    assert out.exists(), proc.stdout + proc.stderr
    return results_by_id(out)


@pytest.fixture(scope="module")
def correct(tmp_path_factory, goldens):
    return _run(tmp_path_factory, goldens)


BUGS = {   # kernel -> (outcome, the output and row the first finding must name)
    "bug_h_row2_unscaled": ("MISMATCH", "h: ", "dim0 [2]"),
    "bug_topk_wrong_row1": ("MISMATCH", "topk_values: ", "dim0 [1]"),
    "bug_mask_row0": ("MISMATCH", "mask: ", "dim0 [0]"),
    "bug_quant_row3": ("MISMATCH", "q_out: ", "dim0 [3]"),
    "bug_writes_scores": ("CONTRACT", "input scores", "dim0 [0]"),
}


@pytest.fixture(scope="module", params=sorted(BUGS))
def buggy(request, tmp_path_factory, goldens):
    return request.param, _run(tmp_path_factory, goldens, "--kernel", f"mylib.quant_topk_cpu:{request.param}")


def test_outsider_correct_kernel_passes_every_case(correct):
    assert len(correct) == 5
    assert {r["outcome"] for r in correct.values()} == {"PASS"}, {k: r["summary"] for k, r in correct.items()}
    for r in correct.values():     # every comparator ran on its output
        compare = r["metrics"]["compare"]
        assert set(compare) == {"h", "topk_values", "topk_indices", "best", "mask", "q_out", "q_scale"}
    pairs = correct["quant-topk-pairs"]["metrics"]["compare"]
    assert pairs["topk_indices"]["comparator"] == "topk_pairs(topk_values)"
    assert pairs["q_out"]["comparator"] == "dequant(q_scale)" and pairs["h"]["comparator"] == "ulp(64)"
    assert correct["quant-topk[rows=4,seed=0]"]["metrics"]["compare"]["topk_indices"]["message"] == \
        "topk indices select the golden's scores"      # the user's message, as it returned it


def test_outsider_one_bug_kernels_fail_naming_output_and_row(buggy):
    kernel, results = buggy
    outcome, output, row = BUGS[kernel]
    assert len(results) == 5
    for case_id, r in results.items():
        assert r["outcome"] == outcome, (case_id, r["summary"])
        assert output in r["summary"] and row in r["summary"], (case_id, r["summary"])


def test_user_comparator_message_becomes_the_result(buggy):
    kernel, results = buggy
    if kernel != "bug_topk_wrong_row1":
        pytest.skip("the top-k bug is the one the user's compare_fn judges")
    report = results["quant-topk[rows=4,seed=0]"]["report"]
    assert "topk_indices: topk indices pick other scores in rows [1]" in report
    pairs = results["quant-topk-pairs"]["report"]
    assert "topk_indices: 1 / 5 rows pick indices their paired topk_values do not justify in dim0 [1]" in pairs


def test_inputs_reproduce_across_processes(correct, tmp_path_factory, goldens):
    again = _run(tmp_path_factory, goldens, "-k", "rows=4")
    for case_id, r in again.items():
        assert r["metrics"]["inputs_digest"] == correct[case_id]["metrics"]["inputs_digest"]
        assert r["metrics"]["golden_cache_hit"] is True


def test_shipped_rmsnorm_spec_op(tmp_path_factory, goldens):
    files = [str(ROOT / "cases" / "rmsnorm_spec.yaml")]
    # Seeds 70 and 113 hold an element where the correct kernel's fp32 value and the golden's
    # fp64 one round to neighbouring bf16 values: one ulp apart, both correct roundings.
    shipped = (ROOT / "cases" / "rmsnorm_spec.yaml").read_text()
    assert "seeds: [0, 1]" in shipped
    more = tmp_path_factory.mktemp("rms") / "rmsnorm_spec.yaml"
    more.write_text(shipped.replace("seeds: [0, 1]", "seeds: [0, 1, 70, 113]"))
    good = _run(tmp_path_factory, goldens, files=[str(more)])
    assert len(good) == 8 and {r["outcome"] for r in good.values()} == {"PASS"}, \
        {k: r["summary"] for k, r in good.items()}
    bad = _run(tmp_path_factory, goldens, "--kernel", "harness.kernels.specs.rmsnorm_kernels:rmsnorm_last_row_unscaled",
               files=files)
    assert bad["rmsnorm_spec[rows=8,seed=0]"]["outcome"] == "MISMATCH"
    assert "y: " in bad["rmsnorm_spec[rows=8,seed=0]"]["summary"]
    assert "dim0 [7]" in bad["rmsnorm_spec[rows=8,seed=0]"]["summary"]
    assert bad["rmsnorm_spec[rows=1,seed=0]"]["outcome"] == "MISMATCH"


GOLDEN_BUGS = {
    "raises": "    raise ValueError('boom')\n",
    "unwritten": "    tensors['out'][:-1] = tensors['a'][:-1] * 2\n",
    "writes_input": "    tensors['a'].zero_()\n    tensors['out'][:] = 0\n",
}
SPEC_MODULE = """\
import torch
from golden import TensorSpec

def build_tensor_specs(n=4):
    return [TensorSpec("a", [n, 3], torch.float32, init_value=lambda: torch.randn(n, 3)),
            TensorSpec("out", [n, 3], torch.float32, is_output=True)]

def golden_twice(tensors):
{body}"""
KERNEL = "def twice(a, out):\n    out.copy_(a * 2)\n"


def test_golden_errors_are_their_own_outcome(tmp_path, goldens):
    lib = tmp_path / "lib"
    for name, body in GOLDEN_BUGS.items():
        write_case_file(lib, f"g_{name}.py", SPEC_MODULE.format(body=body))
        write_case_file(tmp_path / "cases", f"{name}.yaml",
                        f"name: {name}\nspec: g_{name}\nkernel: k_twice:twice\n")
    write_case_file(lib, "k_twice.py", KERNEL)
    out = tmp_path / "r.json"
    proc = run_harness("run", str(tmp_path / "cases"), "--kernel-path", str(lib), "--kernel-path", str(OUTSIDE),
                       "--no-store", "--no-progress", "--golden-cache", str(goldens), "--json", str(out), cwd=tmp_path)
    results = results_by_id(out)
    assert {k: r["outcome"] for k, r in results.items()} == dict.fromkeys(GOLDEN_BUGS, "GOLDEN_ERROR"), proc.stdout
    assert "raised ValueError: boom" in results["raises"]["summary"]
    assert "left 3 of 12 elements of output out unwritten" in results["unwritten"]["summary"]
    assert "wrote into input a" in results["writes_input"]["summary"]
    assert proc.returncode == 1


def test_spec_case_file_errors_are_one_located_line(tmp_path):
    lib = tmp_path / "lib"
    write_case_file(lib, "g_ok.py", SPEC_MODULE.format(body="    tensors['out'][:] = tensors['a'] * 2\n"))
    cases = {
        "nomod.yaml": ("spec: no_such_module\nkernel: k:f\n", ":1:7: spec: spec module no_such_module: does not import"),
        "param.yaml": ("spec: g_ok\nkernel: k:f\nparams: {m: [1]}\n",
                       ":3:10: params.m: spec module g_ok: build_tensor_specs does not take parameter 'm'"),
        "cmp.yaml": ("spec: g_ok\nkernel: k:f\ncompare: {nope: 'ulp(2)'}\n",
                     ":3:11: compare.nope: the spec has no output 'nope'"),
        "cmpfn.yaml": ("spec: g_ok\nkernel: k:f\ncompare: {out: 'g_ok:missing'}\n",
                       ":3:16: compare.out: comparator for out 'g_ok:missing': g_ok has no function 'missing'"),
        "badcmp.yaml": ("spec: g_ok\nkernel: k:f\ncompare: {out: 'topk(3)'}\n",
                        ":3:16: compare.out: unknown comparator 'topk'"),
        "kernel.yaml": ("spec: g_ok\nkernel: notapath\n", ":2:9: kernel: 'notapath' is not package.module:function"),
    }
    for name, (text, expected) in cases.items():
        path = write_case_file(tmp_path / "cases", name, text)
        proc = run_harness("list", str(path), "--kernel-path", str(lib), "--kernel-path", str(OUTSIDE), cwd=tmp_path,
                           timeout=120)
        assert proc.returncode == 2, (name, proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and f"{path}{expected}" in lines[0], (name, proc.stderr)


def test_harness_list_ids_and_k(tmp_path):
    proc = run_harness("list", *FILES, "--kernel-path", str(OUTSIDE), "-k", "rows=6 and seed=1", cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [line.split("\t")[0] for line in proc.stdout.strip().splitlines()] == ["quant-topk[rows=6,seed=1]"]

