"""harness audit, in process: coverage from the matrix alone, the operator table, the kill
matrix's verdicts and survivor reasons, and the rendered document."""
from __future__ import annotations

from dataclasses import replace

import pytest

from harness.audit.coverage import coverage, has_negative_slot
from harness.audit.kill import score, verdict
from harness.audit.operators import (BY_NAME, KERNEL_VAR, MUTANT_VAR, OperatorError, WRAPPER, applicable, mutated,
                                     parse_mutants)
from harness.casefiles import load_paths
from harness.outcomes import Outcome, Result
from harness.reports.audit_text import kill_matrix, render_html, render_markdown, render_text

from helpers import AUDIT_BLIND as BLIND, AUDIT_SEES as SEES, ROOT, write_case_file




def _cases(tmp_path, text):
    return load_paths([str(write_case_file(tmp_path, "m.yaml", text))])


def _covered(cases) -> dict[str, bool]:
    return {c.name: c.covered for c in coverage(cases)}


def test_coverage_names_what_a_blind_matrix_misses_and_credits_what_it_has(tmp_path):
    blind = _covered(_cases(tmp_path, BLIND))
    assert not blind["slot_negative"] and not blind["warmup_const_minus_one"]
    assert not blind["seq_len_1"] and not blind["page_boundary_0"] and blind["partial_last_page"]
    assert blind["gqa_group"] and not blind["several_layers"]
    sees = _covered(_cases(tmp_path, SEES))
    assert sees["slot_negative"] and sees["warmup_const_minus_one"] and sees["seq_len_1"]


def test_padded_of_one_row_pads_nothing_and_is_no_negative_slot(tmp_path):
    cases = _cases(tmp_path, BLIND.replace("batch: [16]", "batch: [1, 16]").replace("[arange]", '["padded(0.25)"]'))
    assert {c.geometry.batch: has_negative_slot(c) for c in cases} == {1: False, 16: True}


def test_shipped_matrices_cover_the_page_boundaries_and_warmup():
    found = _covered(load_paths([str(ROOT / "cases")]))
    for name in ("slot_negative", "warmup_const_minus_one", "page_boundary_0", "page_boundary_1",
                 "page_boundary_p_minus_1", "seq_len_1", "largest_position", "several_layers",
                 "chunked_prefill_with_context", "random_page_order"):
        assert found[name], name


def test_mutants_flag_takes_known_names_in_order_and_rejects_others():
    assert [o.name for o in parse_mutants("nan_element,out_is_query")] == ["nan_element", "out_is_query"]
    assert len(parse_mutants(None)) == len(BY_NAME)
    with pytest.raises(OperatorError, match="--mutants.*no operator bogus"):
        parse_mutants("nan_element,bogus")


def test_a_mutated_case_keeps_its_id_and_carries_the_wrapped_kernel_in_its_env(tmp_path):
    case = _cases(tmp_path, BLIND)[0]
    m = mutated(case, BY_NAME["nan_element"])
    assert (m.case_id, m.kernel) == (case.case_id, WRAPPER)
    assert m.env[MUTANT_VAR] == "nan_element" and m.env[KERNEL_VAR] == "reference"


def test_internal_operators_apply_to_the_reference_kernel_only(tmp_path):
    case = _cases(tmp_path, BLIND)[0]
    assert applicable([case], BY_NAME["skip_rope"]) == [case]
    assert applicable([replace(case, kernel="pkg.mod:fn")], BY_NAME["skip_rope"]) == []
    assert applicable([case], BY_NAME["out_is_query"]) == []     # rope_kv_write has no attention output


def _result(case, outcome, code=None):
    return Result(case_id=case.case_id, outcome=outcome, op=case.op, code=code)


def test_a_mutant_is_killed_only_where_the_unmutated_kernel_passed(tmp_path):
    cases = _cases(tmp_path, SEES)
    op = BY_NAME["slot_minus_one_write"]
    base = {c.case_id: _result(c, Outcome.PASS) for c in cases}
    mutant = {c.case_id: _result(c, Outcome.OOB_WRITE if has_negative_slot(c) else Outcome.PASS) for c in cases}
    v = verdict(op, cases, base, mutant)
    assert v.killed and [k.case_id for k in v.killed_by] == [c.case_id for c in cases if has_negative_slot(c)]
    assert v.killed_by[0].label == "OOB_WRITE"
    already_failing = {**base, **{k.case_id: _result(cases[1], Outcome.MISMATCH) for k in v.killed_by}}
    v2 = verdict(op, cases, already_failing, mutant)
    assert not v2.killed and v2.reason == "no case has a slot < 0"


def test_survivor_reasons_name_the_blind_spot(tmp_path):
    cases = _cases(tmp_path, BLIND)
    base = {c.case_id: _result(c, Outcome.PASS) for c in cases}
    same = dict(base)
    assert verdict(BY_NAME["slot_minus_one_write"], cases, base, same).reason == "no case has a slot < 0"
    assert "the tolerance on `query` (atol 0.003" in verdict(BY_NAME["head_perturbed"], cases, base, same).reason
    failing = {c.case_id: _result(c, Outcome.MISMATCH) for c in cases}
    assert "already fails" in verdict(BY_NAME["nan_element"], cases, failing, same).reason
    none = verdict(BY_NAME["out_is_query"], [], base, {})
    assert not none.applicable and none.reason == ""


def test_score_counts_applicable_mutants_only(tmp_path):
    cases = _cases(tmp_path, SEES)
    base = {c.case_id: _result(c, Outcome.PASS) for c in cases}
    bad = {c.case_id: _result(c, Outcome.NONFINITE) for c in cases}
    verdicts = [verdict(BY_NAME["nan_element"], cases, base, bad),
                verdict(BY_NAME["skip_cache_write"], cases, base, base),
                verdict(BY_NAME["out_is_query"], [], base, {})]
    s = score(verdicts)
    assert (s.killed, s.applicable, s.value) == (1, 2, 0.5)


def test_rendered_audit_puts_survivors_first_with_reasons(tmp_path):
    cases = _cases(tmp_path, SEES)
    base = {c.case_id: _result(c, Outcome.PASS) for c in cases}
    bad = {c.case_id: _result(c, Outcome.NONFINITE) for c in cases}
    verdicts = [verdict(BY_NAME["nan_element"], cases, base, bad),
                verdict(BY_NAME["skip_cache_write"], cases, base, base)]
    doc = {"kind": "audit", "score": 0.5, "killed": 1, "applicable": 2, "mutants": [v.to_json() for v in verdicts],
           "baseline": {i: r.label for i, r in base.items()}, "coverage": [c.to_json() for c in coverage(cases)]}
    md = render_markdown(doc)
    assert md.index("### Survivors") < md.index("### Killed")
    assert "| `skip_cache_write` |" in md and "still pass with it" in md
    assert dict(kill_matrix(doc)) == {"nan_element": "KK", "skip_cache_write": ".."}
    assert "SURVIVED skip_cache_write" in render_text(doc)
    page = render_html(doc)
    assert page.index("skip_cache_write") < page.index("nan_element") and "SURVIVED" in page


def test_sensitivity_bisects_to_the_threshold_the_checks_have(tmp_path):
    from harness.audit.operators import DELTA_VAR, SHAPE_VAR
    from harness.audit.sensitivity import find_sensitivity
    cases = _cases(tmp_path, BLIND)
    base = {c.case_id: _result(c, Outcome.PASS) for c in cases}
    threshold = {"head": 0.008, "block": 2.0}     # a block error is never caught

    def run(mutants):
        return {m.case_id: _result(m, Outcome.MISMATCH if float(m.env[DELTA_VAR]) >= threshold[m.env[SHAPE_VAR]]
                                   else Outcome.PASS) for m in mutants}

    head, block = find_sensitivity(cases, base, run, steps=8)
    assert head.missed < 0.008 <= head.detected < 0.008 * 1.1
    assert "misses per-head errors below 0.8" in head.sentence and "`query`" in head.sentence
    assert block.detected is None and "up to 100%" in block.sentence


def test_a_harness_error_under_a_mutant_is_no_kill(tmp_path):
    cases = _cases(tmp_path, BLIND)
    base = {c.case_id: _result(c, Outcome.PASS) for c in cases}
    broke = {c.case_id: _result(c, Outcome.HARNESS_ERROR) for c in cases}
    v = verdict(BY_NAME["nan_element"], cases, base, broke)
    assert not v.killed and v.outcomes == {cases[0].case_id: "HARNESS_ERROR"}


def test_the_search_keeps_each_ops_results_at_its_smallest_detected_delta_and_drops_settled_ops(tmp_path):
    from harness.audit.operators import DELTA_VAR
    from harness.audit.sensitivity import HIGH, find_sensitivity
    cases = _cases(tmp_path, BLIND) + [replace(c, op="paged_decode_attention", case_id=c.case_id + "-admits")
                                      for c in _cases(tmp_path, BLIND)]
    base = {c.case_id: _result(c, Outcome.PASS) for c in cases}
    runs: list[dict[str, float]] = []

    def run(mutants):
        runs.append({m.case_id: float(m.env[DELTA_VAR]) for m in mutants})
        return {m.case_id: _result(m, Outcome.MISMATCH if m.op == "rope_kv_write" and float(m.env[DELTA_VAR]) >= 0.004
                                   else Outcome.PASS) for m in mutants}

    seen, admits = find_sensitivity(cases, base, run, steps=3, shapes=("head",))
    assert len(runs) == 4 and [len(r) for r in runs] == [2, 1, 1, 1]      # the admitting op ran at HIGH only
    assert admits.detected is None and admits.delta == HIGH and admits.results[cases[1].case_id].label == "PASS"
    assert seen.missed < 0.004 <= seen.detected and seen.delta == seen.detected
    tried = [r[cases[0].case_id] for r in runs]
    assert seen.detected == min(d for d in tried if d >= 0.004)
    assert seen.results[cases[0].case_id].label == "MISMATCH"     # the results of the run at `detected`



def test_sensitivity_covers_every_output_of_an_op(tmp_path):
    """--sensitivity bisects each output on its own (fused decode: out, then query); the search
    for head_perturbed's own delta needs the first output only."""
    from harness.audit.operators import DELTA_VAR, OUTPUT_VAR
    from harness.audit.sensitivity import find_sensitivity
    cases = _cases(tmp_path, SEES.replace("op: rope_kv_write", "op: fused_rope_decode_attention"))
    base = {c.case_id: _result(c, Outcome.PASS) for c in cases}
    threshold = {"out": 0.01, "query": 0.2}
    seen: list[str] = []

    def run(mutants):
        seen.extend(m.env.get(OUTPUT_VAR, "first") for m in mutants)
        return {m.case_id: _result(m, Outcome.MISMATCH if float(m.env[DELTA_VAR]) >= threshold[m.env.get(OUTPUT_VAR, "out")]
                                   else Outcome.PASS) for m in mutants}

    out, query = find_sensitivity(cases, base, run, steps=8, shapes=("head",), every_output=True)
    assert (out.output, query.output) == ("out", "query")
    assert out.missed < 0.01 <= out.detected < 0.011 and query.missed < 0.2 <= query.detected < 0.22
    assert "`query`" in query.sentence and set(seen) == {"first", "query"}
    seen.clear()
    (first,) = find_sensitivity(cases, base, run, steps=2, shapes=("head",))
    assert first.output == "out" and set(seen) == {"first"}


def test_head_perturbed_scales_the_output_it_is_given(tmp_path, monkeypatch):
    """In a worker's execute path: the second output of decode_layers perturbed, the first left alone."""
    from harness.devices import CpuBackend, Device
    from harness.goldens.cache import GoldenCache
    from harness.worker.execute import KernelLoader, execute_case
    case = replace(_cases(tmp_path, SEES.replace("op: rope_kv_write", "op: decode_layers"))[0])
    mutant = mutated(case, BY_NAME["head_perturbed"], 1.0, "head", "next_hidden")
    for name, value in mutant.env.items():
        monkeypatch.setenv(name, value)
    reply = execute_case(mutant, Device("cpu"), CpuBackend(), GoldenCache(tmp_path / "g"), KernelLoader())
    hidden, logits = reply.metrics["compare"]["next_hidden"], reply.metrics["compare"]["logits"]
    assert hidden["bad_count"] > 0 and logits["bad_count"] == 0
    assert hidden["localisation"]["batch"][0] > 0 and not any(hidden["localisation"]["batch"][1:])
    # a quarter of one row in 16 is within this tiny matrix's max_error_ratio (0.02) on next_hidden:
    # the blind spot --sensitivity now reports for that output
    assert reply.outcome is Outcome.PASS

def _doc_with(tmp_path, case_id: str, label: str, head_delta=None) -> dict:
    cases = [replace(c, case_id=case_id) for c in _cases(tmp_path, BLIND)]
    base = {c.case_id: _result(c, Outcome.PASS) for c in cases}
    bad = {c.case_id: Result(case_id=c.case_id, outcome=Outcome.DEVICE_FAULT, op=c.op, code=label) for c in cases}
    v = verdict(BY_NAME["nan_element"], cases, base, bad)
    return {"kind": "audit", "score": 1.0, "killed": 1, "applicable": 1, "mutants": [v.to_json()],
            "baseline": {i: r.label for i, r in base.items()}, "coverage": [c.to_json() for c in coverage(cases)],
            "head_perturbed_delta": head_delta}


def test_markdown_escapes_case_ids_and_labels(tmp_path):
    md = render_markdown(_doc_with(tmp_path, "m[x=|<b>`y`</b>|]", "E|<i>"))
    killed_row = next(line for line in md.splitlines() if line.startswith("| `nan_element`"))
    assert killed_row.count("|") - killed_row.count("\\|") == 4          # no cell split by the case id
    assert "<b>" not in md and "<i>" not in md
    assert "&lt;b&gt;" in killed_row and "FAIL\\_E\\|&lt;i&gt;" in killed_row


def test_the_delta_head_perturbed_ran_at_is_said_with_its_source(tmp_path):
    from harness.audit.session import HeadDelta
    searched = HeadDelta("sensitivity", {"rope_kv_write": 0.0031, "decode_layers": 1.0})
    assert searched.to_json() == {"source": "sensitivity", "delta": 1.0,
                                  "by_op": {"rope_kv_write": 0.0031, "decode_layers": 1.0}}
    doc = _doc_with(tmp_path, "c", "X", searched.to_json())
    for text in (render_text(doc), render_markdown(doc), render_html(doc)):
        assert "sensitivity search" in text and "rope_kv_write 0.3%" in text and "decode_layers 100%" in text
    given = _doc_with(tmp_path, "c", "X", HeadDelta("--delta", {"rope_kv_write": 0.05}).to_json())
    assert "1 + 5.0% (--delta)" in render_text(given)
    assert "head_perturbed" not in render_text(_doc_with(tmp_path, "c", "X", None))
