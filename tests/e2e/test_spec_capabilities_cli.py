"""Spec ops through the CLI with every capability the builtin ops have (docs/specs.md): the
intermediates an outsider's golden dumps compared with its kernels' (a one-bug kernel's first
bad intermediate named, live and offline with `harness dumps`), `harness audit` with the
generic operators around a spec op's kernel, `harness ops` on a spec case file, and the hints
that hold for any op.  The modules and kernels are tests/outside_specs' (nothing there imports
the harness).  One CLI run per command, shared by module-scoped fixtures."""
from __future__ import annotations

import json

import pytest

from helpers import ROOT, results_by_id, run_harness, write_case_file

pytestmark = pytest.mark.slow

OUTSIDE = ROOT / "tests" / "outside_specs"
KERNELS = "mylib.gated_mlp_cpu"
# case name -> the gated MLP kernel it runs (one case file each, all in one run)
GATED = {"gated-ok": "gated_mlp_fwd", "gated-gelu": "bug_act_gelu", "gated-files": "bug_up_row1_files",
         "gated-stores-x": "bug_stores_x", "gated-unscaled": "bug_store_unscaled"}
ROTARY = """\
name: rotary
spec: mylib.rotary
kernel: mylib.rotary:rotary_skipped
"""


def _gated(name: str, kernel: str, rows: str = "[4]") -> str:
    return (f"name: {name}\nspec: mylib.gated_mlp\nkernel: {KERNELS}:{kernel}\nparams: {{rows: {rows}}}\n"
            f"seeds: [0]\nrtol: 1.0e-4\natol: 1.0e-4\n")


@pytest.fixture(scope="module")
def goldens(tmp_path_factory):
    return tmp_path_factory.mktemp("spec-goldens")


@pytest.fixture(scope="module")
def run(tmp_path_factory, goldens):
    """Every gated MLP kernel and the rotary spec in one run (intermediates on failure, the default)."""
    base = tmp_path_factory.mktemp("spec-caps")
    files = [str(write_case_file(base / "cases", f"{name}.yaml", _gated(name, kernel))) for name, kernel in GATED.items()]
    files.append(str(write_case_file(base / "cases", "rotary.yaml", ROTARY)))
    out = base / "r.json"
    proc = run_harness("run", *files, "--kernel-path", str(OUTSIDE), "--no-store", "--no-progress",
                       "--golden-cache", str(goldens), "--log-dir", str(base / "logs"), "--json", str(out), cwd=base)
    assert out.exists(), proc.stdout + proc.stderr
    return results_by_id(out)


def test_a_correct_kernel_passes_and_its_dumps_are_not_rerun(run):
    ok = run["gated-ok"]
    assert ok["outcome"] == "PASS", ok["summary"]
    assert "intermediates" not in ok["metrics"]       # on-failure: a passing case is not relaunched


def test_the_first_bad_intermediate_of_a_one_bug_kernel_is_named(run):
    gelu = run["gated-gelu"]
    assert gelu["outcome"] == "MISMATCH"
    assert "; first bad intermediate act (gate, up bit-exact; act dim0: all 4 indices bad" in gelu["summary"]
    found = gelu["metrics"]["intermediates"]
    assert found["first_bad_intermediate"] == "act" and found["problems"] == []
    assert [(r["name"], r["verdict"]) for r in found["rows"]] == [("gate", "bit-exact"), ("up", "bit-exact"),
                                                                 ("act", "bad")]


def test_dump_files_from_a_kernel_that_cannot_call_back_are_read_the_same_way(run):
    files = run["gated-files"]
    assert files["outcome"] == "MISMATCH" and "in dim0 [1]" in files["summary"]
    found = files["metrics"]["intermediates"]
    assert found["first_bad_intermediate"] == "up"
    assert [r["verdict"] for r in found["rows"]] == ["bit-exact", "bad", "inherited"]    # act consumes up
    assert "up dim0: 1 of 4 bad: [1]" in files["summary"]


def test_an_output_stored_from_an_input_is_hinted_on_a_spec_op(run):
    stored = run["gated-stores-x"]
    assert stored["outcome"] == "MISMATCH" and stored["hint"] == "y holds input x as passed in"
    assert stored["summary"].endswith("; hint: y holds input x as passed in")


def test_an_output_off_by_one_factor_is_hinted_as_a_scale_on_a_spec_op(run):
    unscaled = run["gated-unscaled"]
    assert unscaled["outcome"] == "MISMATCH"
    assert unscaled["metrics"]["intermediates"]["first_bad_intermediate"] is None    # the error is after act
    assert unscaled["hint"] == "y is 0.125× the golden in every row: a scale or normalisation factor"
    assert not run["gated-gelu"].get("hint")        # wrong everywhere, but by no one factor


def test_no_builtin_rope_hint_fires_on_a_spec_op_named_like_one(run):
    rotary = run["rotary"]
    assert rotary["outcome"] == "MISMATCH"
    assert not rotary.get("hint") and "hint_error" not in rotary["metrics"], rotary["metrics"].get("hint_error")
    assert "hint" not in rotary["summary"]


@pytest.fixture(scope="module")
def offline(tmp_path_factory, goldens, run):
    """`harness dumps` on a folder holding the right gate and an up whose row 1 is zero."""
    import torch

    from harness.intermediates import files
    from harness.worker import spec_module

    base = tmp_path_factory.mktemp("spec-dumps")
    case_file = write_case_file(base, "g.yaml", _gated("gated-ok", "gated_mlp_fwd"))
    import sys
    sys.path.insert(0, str(OUTSIDE))
    try:
        _, _, v = spec_module.created("mylib.gated_mlp", {"rows": 4}, 0)
    finally:
        sys.path.remove(str(OUTSIDE))
    x = v["x"].float()
    up = x @ v["w_up"].float()
    up[1] = 0
    files.write(base / "dumps", "gate", x @ v["w_gate"].float(), ".npy")
    files.write(base / "dumps", "up", up, ".bin")
    torch.save(torch.zeros(2), base / "dumps" / "act.pt")    # the wrong shape: a CONTRACT line
    proc = run_harness("dumps", "gated-ok", str(base / "dumps"), "--cases", str(case_file), "--kernel-path",
                       str(OUTSIDE), "--golden-cache", str(goldens), "--json", str(base / "t.json"), cwd=base)
    return proc, json.loads((base / "t.json").read_text()) if (base / "t.json").exists() else None


def test_harness_dumps_compares_a_spec_ops_folder_offline(offline):
    proc, found = offline
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said, verdict = proc.stdout.split("\n", 1)     # first what the dumps were compared with
    assert said.startswith("compared with case gated-ok (seed 0, inputs digest ")
    assert verdict.startswith("first bad intermediate up (gate bit-exact; up dim0: 1 of 4 bad: [1]")
    assert "CONTRACT intermediate act: shape (2,), its golden dumped (4, 96)" in proc.stdout
    assert found["first_bad_intermediate"] == "up"


def test_harness_ops_prints_a_spec_ops_table(tmp_path):
    proc = run_harness("ops", str(OUTSIDE / "quant_topk.yaml"), str(tmp_path / "none.yaml"), cwd=tmp_path)
    assert proc.returncode == 2      # one case file at a time
    case_file = write_case_file(tmp_path, "g.yaml", _gated("gated", "gated_mlp_fwd", "[2, 4]"))
    proc = run_harness("ops", str(case_file), "--kernel-path", str(OUTSIDE), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "gated_mlp (mylib.gated_mlp; rows=2)"
    assert lines[1].split() == ["argument", "role", "shape", "dtype", "layout", "kernel", "writes", "returned"]
    assert lines[2].split() == ["x", "input", "[2,", "64]", "bfloat16", "dim0,", "dim1", "nothing", "no"]
    assert "gated_mlp (mylib.gated_mlp; rows=4)" in lines
    assert ("intermediates, in dataflow order: gate (consumes the inputs only), up (consumes the inputs only), "
            "act (consumes gate, up)") in lines
    assert any(line.startswith("memory plan: ") for line in lines)
    missing = run_harness("ops", str(tmp_path / "none.yaml"), cwd=tmp_path)
    assert missing.returncode == 2 and "none.yaml: no such case file" in missing.stderr


MUTANTS = "half_written,nan_element,head_perturbed,input_clobber,row_dropped,out_is_query"


@pytest.fixture(scope="module")
def audit(tmp_path_factory, goldens):
    """The generic operators around a one-row gated MLP and the outsider's quant_topk kernel."""
    base = tmp_path_factory.mktemp("spec-audit")
    one_row = write_case_file(base / "cases", "g.yaml", _gated("gated-one-row", "gated_mlp_fwd", "[1]"))
    proc = run_harness("audit", str(one_row), str(OUTSIDE / "quant_topk_builtin.yaml"), "--kernel-path",
                       str(OUTSIDE), "--no-store", "--golden-cache", str(goldens), "--log-dir", str(base / "logs"),
                       "--mutants", MUTANTS, "--delta", "0.5", "--json", str(base / "a.json"), cwd=base)
    return proc, json.loads((base / "a.json").read_text()) if (base / "a.json").exists() else None


def test_audit_runs_the_generic_operators_around_a_spec_ops_kernel(audit):
    proc, doc = audit
    assert proc.returncode == 0, proc.stdout + proc.stderr        # every applicable operator killed by some case
    mutants = {m["name"]: m for m in doc["mutants"]}
    assert set(doc["baseline"].values()) == {"PASS"}
    outcomes = {name: set(m["killing_outcomes"].values()) for name, m in mutants.items() if m["killed"]}
    assert outcomes == {"half_written": {"UNWRITTEN"}, "nan_element": {"NONFINITE"}, "head_perturbed": {"MISMATCH"},
                        "input_clobber": {"CONTRACT"}, "row_dropped": {"MISMATCH"}}
    assert set(mutants["half_written"]["killed_by"]) == {"gated-one-row", "quant-topk-pairs"}
    # the kill matrix says what each case can see: one row cannot show a dropped row
    assert mutants["row_dropped"]["killed_by"] == ["quant-topk-pairs"]
    assert mutants["row_dropped"]["outcomes"]["gated-one-row"] == "PASS"
    assert "  row_dropped    .K" in proc.stdout
    assert not mutants["out_is_query"]["applicable"]              # a builtin op's operator
    assert doc["coverage"] == []
    assert "coverage: no boundary condition applies" in proc.stdout


def test_harness_ops_prints_a_spec_modules_table_without_a_case_file(tmp_path):
    """`--spec MODULE --params K=V`: the same table as a case file holding those params gives."""
    case_file = write_case_file(tmp_path, "g.yaml", _gated("gated", "gated_mlp_fwd", "[2, 4]"))
    from_file = run_harness("ops", str(case_file), "--kernel-path", str(OUTSIDE), cwd=tmp_path)
    from_flags = run_harness("ops", "--spec", "mylib.gated_mlp", "--params", "rows=[2, 4]", "--kernel-path",
                             str(OUTSIDE), cwd=tmp_path)
    assert from_flags.returncode == 0, from_flags.stdout + from_flags.stderr
    assert from_flags.stdout == from_file.stdout
    # a bad value is named by its flag, one line, exit 2
    for argv, said in [(["--params", "rowz=2"], "--params: rowz: spec module mylib.gated_mlp: build_tensor_specs "
                                                "does not take parameter 'rowz'"),
                       (["--params", "rows"], "--params rows: expected NAME=VALUE"),
                       (["--golden", "golden_x"], "--golden: spec module mylib.gated_mlp: has no golden function"),
                       (["--params", "rows=-1"], "--params: spec module mylib.gated_mlp: spec 0 (x): shape [-1, 64] "
                                                 "is not a list of non-negative ints"),
                       # a value is read as a case file's: nesting and integer size refused, not a traceback
                       (["--params", "rows=" + "[" * 100_000], "--params rows:1:65: nested deeper than 64 levels"),
                       (["--params", "rows=" + "9" * 5000], "--params rows:1:1: an integer of 5000 digits")]:
        bad = run_harness("ops", "--spec", "mylib.gated_mlp", *argv, "--kernel-path", str(OUTSIDE), cwd=tmp_path)
        assert bad.returncode == 2 and bad.stderr.strip().startswith(f"harness: error: {said}"), (argv, bad.stderr)
        assert len(bad.stderr.strip().splitlines()) == 1
    nowhere = run_harness("ops", "--spec", "mylib.nope", "--kernel-path", str(OUTSIDE), cwd=tmp_path)
    assert nowhere.returncode == 2 and "--spec: spec module mylib.nope: does not import" in nowhere.stderr
    alone = run_harness("ops", "--params", "rows=2", cwd=tmp_path)
    assert alone.returncode == 2 and "--params: only with --spec MODULE" in alone.stderr
