"""``--kernel``: the names it takes, and the one function that replaces every case's kernel."""
from __future__ import annotations

import dataclasses

import pytest

from harness.casefiles import load_paths
from harness.cli.parser import build_parser
from harness.errors import UsageError
from harness.ops.registry import BUILTINS, is_kernel_name, target
from harness.run.options import KernelError, KernelState, registry_states, with_kernel
from helpers import ROOT

OK, ABSENT = KernelState("ok"), KernelState("absent")


@pytest.fixture(scope="module")
def shipped():
    return load_paths([str(ROOT / "cases" / "rope_kv_write.yaml"), str(ROOT / "cases" / "prefill_attention.yaml")])


def test_a_module_gives_one_function_per_op_and_a_callable_serves_every_op():
    assert target("outside.torch_sdpa", "prefill_attention") == "outside.torch_sdpa:prefill_attention"
    assert target("pkg.mod:fn", "rope_kv_write") == target("pkg.mod:fn", "decode_layers") == "pkg.mod:fn"
    assert target("stale_kv", "prefill_attention") == BUILTINS["stale_kv"]["prefill_attention"]
    with pytest.raises(KeyError):
        target("stale_kv", "rope_kv_write")
    assert all(map(is_kernel_name, ("reference", "pkg.mod:fn", "pkg.mod", "mod")))
    assert not any(map(is_kernel_name, ("", "a b", "pkg.mod:", "pkg..mod", "pkg.mod:fn:x")))


def test_every_case_runs_the_kernel_and_keeps_its_id(shipped):
    chosen = with_kernel(shipped, "outside.torch_sdpa", {"rope_kv_write": OK, "prefill_attention": OK})
    assert [c.case_id for c in chosen.cases] == [c.case_id for c in shipped]
    assert {c.kernel for c in chosen.cases} == {"outside.torch_sdpa"} and chosen.notes == ()


def test_a_kernel_given_in_the_case_is_replaced_in_its_params_too(shipped):
    case = dataclasses.replace(shipped[0], kernel="stale_kv", params={**shipped[0].params, "kernel": "stale_kv"})
    (chosen,) = with_kernel([case], "reference", {case.op: OK}).cases
    assert chosen.kernel == chosen.params["kernel"] == "reference"


def test_cases_of_ops_the_kernel_lacks_are_left_out_with_one_line_each(shipped):
    chosen = with_kernel(shipped, "stale_kv", registry_states("stale_kv", ["rope_kv_write", "prefill_attention"]))
    assert {c.op for c in chosen.cases} == {"prefill_attention"}
    missing = sum(c.op == "rope_kv_write" for c in shipped)
    assert chosen.notes == (f"kernel stale_kv has no rope_kv_write: {missing} cases not run",)


def test_a_kernel_with_none_of_the_ops_is_a_usage_error(shipped):
    with pytest.raises(KernelError, match="stale_kv has none of the ops of the selected cases: rope_kv_write"):
        with_kernel([c for c in shipped if c.op == "rope_kv_write"], "stale_kv",
                    registry_states("stale_kv", ["rope_kv_write"]))
    assert issubclass(KernelError, UsageError)


def test_a_kernel_that_does_not_import_is_a_usage_error_with_a_suggestion(shipped):
    broken = KernelState("import", "module refrence does not import: ModuleNotFoundError: No module named\n'refrence'")
    with pytest.raises(KernelError) as exc:
        with_kernel(shipped, "refrence", {"rope_kv_write": broken, "prefill_attention": broken})
    assert str(exc.value) == ("--kernel refrence: module refrence does not import: ModuleNotFoundError: "
                              "No module named 'refrence'; did you mean 'reference'?")


def test_signatures_no_op_binds_exit_2_while_some_that_bind_run_the_rest_as_contract(shipped):
    bad = KernelState("signature", "kernel signature (q) does not fit op rope_kv_write: missing 'q_proj'")
    with pytest.raises(KernelError, match="does not fit op rope_kv_write"):
        with_kernel(shipped, "pkg.mod:fn", {"rope_kv_write": bad, "prefill_attention": bad})
    chosen = with_kernel(shipped, "pkg.mod:fn", {"rope_kv_write": bad, "prefill_attention": OK})
    assert len(chosen.cases) == len(shipped)
    assert chosen.notes[0].startswith("kernel pkg.mod:fn: kernel signature (q) does not fit op rope_kv_write")
    assert chosen.notes[0].endswith("cases will be CONTRACT")


def test_registry_states_know_builtins_and_refuse_bad_names():
    assert registry_states("triton", ["rope_kv_write", "prefill_attention"]) == {
        "rope_kv_write": OK, "prefill_attention": ABSENT}
    assert registry_states("pkg.mod", ["decode_layers"]) == {"decode_layers": OK}
    with pytest.raises(KernelError, match="not a builtin; did you mean 'reference'"):
        registry_states("referenc e", ["decode_layers"])


@pytest.mark.parametrize("command", ["run", "flake", "compare", "bisect", "bisect-run"])
def test_every_executing_command_takes_kernel(command):
    assert build_parser().parse_args([command, "--kernel", "stale_kv"]).kernel == "stale_kv"


def test_every_report_header_names_the_kernels_the_results_ran():
    from harness.document.sections import provenance_items
    doc = {"results": [{"kernel": "outside.torch_sdpa"}, {"kernel": "reference"}, {"kernel": "outside.torch_sdpa"}]}
    assert ("kernel", "outside.torch_sdpa, reference") in provenance_items(doc)
    assert not [k for k, _ in provenance_items({"results": []}) if k == "kernel"]


def test_the_check_tells_absent_ops_missing_callables_bad_signatures_and_failed_imports(tmp_path, monkeypatch):
    from harness.worker.kernel_check import check
    pkg = tmp_path / "kc_pkg"
    pkg.mkdir()
    (pkg / "ops.py").write_text("def paged_decode_attention(*, query, block_table, seq_lens, scale, k_cache,"
                                " v_cache, out):\n    return out\n\n"
                                "def rope_kv_write(q_proj, k_proj):\n    pass\n")
    (pkg / "broken.py").write_text("raise RuntimeError('no device library')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert check("kc_pkg.ops", "paged_decode_attention") == {"state": "ok", "detail": ""}
    assert check("kc_pkg.ops", "prefill_attention")["state"] == "absent"
    assert check("kc_pkg.ops:prefill_attention", "prefill_attention")["state"] == "import"
    bad = check("kc_pkg.ops", "rope_kv_write")
    assert bad["state"] == "signature" and "v_proj" in bad["detail"] and "rope_kv_write" in bad["detail"]
    broken = check("kc_pkg.broken:fn", "decode_layers")
    assert broken == {"state": "import", "detail": "module kc_pkg.broken does not import: "
                                                   "RuntimeError: no device library"}
    assert check("stale_kv", "rope_kv_write")["state"] == "absent"
