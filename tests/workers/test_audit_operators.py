"""The mutation operators in real device workers: each is killed by a matrix that can see its
bug class, wrapped around the reference kernel and around an outside kernel, and the
slot-minus-one operator survives a matrix without a slot < 0, with that reason."""
from __future__ import annotations

import pytest

from harness.audit.operators import OPERATORS, parse_mutants
from harness.audit.sensitivity import HIGH, LOW, QUICK_STEPS
from harness.audit.session import run_audit
from harness.casefiles import load_paths
from harness.devices import Device
from harness.run.engine import RunOptions
from harness.run.spawn import WorkerOptions
from harness.store import MemoryStore

from helpers import ROOT, write_case_file

SEES = """\
name: sees
op: fused_rope_decode_attention
geometry: tiny
matrix:
  batch: [1, 16]
  seq_lens: ["const(5)"]
  slot_mode: ["padded(0.25)"]
  seed: [0]
"""

BLIND = SEES.replace('"padded(0.25)"', "arange")


def _audit(tmp_path, text, names=None, kernel_paths=(), **kwargs):
    cases = load_paths([str(write_case_file(tmp_path, "m.yaml", text))])
    worker = WorkerOptions(log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "goldens"),
                           kernel_paths=tuple(kernel_paths))
    options = RunOptions(devices=[Device("cpu")], worker=worker)
    return run_audit(cases, parse_mutants(names), options, MemoryStore(), **kwargs)


def test_every_operator_is_killed_by_a_matrix_that_sees_it(tmp_path):
    audit = _audit(tmp_path, SEES)
    assert {r.label for r in audit.baseline} == {"PASS"}
    survivors = {v.name: v.reason for v in audit.verdicts if v.applicable and not v.killed}
    assert survivors == {}
    builtin = [o for o in OPERATORS if o.ops is None or o.ops]   # row_dropped is the spec ops' alone
    assert audit.score.value == 1.0 and audit.score.applicable == len(builtin)  # off_by_one_page included
    labels = {v.name: v.killed_by[0].label for v in audit.verdicts if v.killed}
    assert labels["slot_minus_one_write"] == "OOB_WRITE"
    assert labels["nan_element"] == "NONFINITE"
    assert labels["half_written"] == "UNWRITTEN"
    assert labels["input_clobber"] == "CONTRACT"
    assert labels["neighbor_slot_write"] == "CONTRACT" or labels["neighbor_slot_write"] == "MISMATCH"


def test_slot_minus_one_survives_a_matrix_without_negative_slots(tmp_path):
    audit = _audit(tmp_path, BLIND, "slot_minus_one_write,out_is_query")
    by_name = {v.name: v for v in audit.verdicts}
    assert not by_name["slot_minus_one_write"].killed
    assert by_name["slot_minus_one_write"].reason == "no case has a slot < 0"
    assert by_name["out_is_query"].killed
    assert audit.score.value == 0.5


def test_operators_wrap_an_outside_kernel(tmp_path):
    outside = ROOT / "tests" / "outside_kernels"
    text = SEES.replace("geometry: tiny", "geometry: tiny\nkernel: outside.torch_sdpa:fused_rope_decode_attention")
    audit = _audit(tmp_path, text, "out_is_query,slot_minus_one_write,skip_rope", kernel_paths=[str(outside)])
    by_name = {v.name: v for v in audit.verdicts}
    assert {r.label for r in audit.baseline} == {"PASS"}
    assert by_name["out_is_query"].killed and by_name["slot_minus_one_write"].killed
    assert not by_name["skip_rope"].applicable      # inside the computation: the reference kernel only


OP = "fused_rope_decode_attention"


def test_head_perturbed_is_killed_at_the_delta_the_search_found_and_reports(tmp_path):
    runs = []
    audit = _audit(tmp_path, SEES, "head_perturbed", on_run=lambda name, n: runs.append(name))
    head = audit.verdicts[0]
    doc = audit.document()["head_perturbed_delta"]
    assert head.killed and head.killed_by[0].label == "MISMATCH"
    assert doc["source"] == "sensitivity" and set(doc["by_op"]) == {OP} and doc["delta"] == doc["by_op"][OP]
    assert LOW < doc["delta"] < HIGH
    # The search's runs are the operator's: no run of its own, and no more than the quick search's.
    assert runs[0] == "unmutated" and 1 < len(runs) - 1 <= QUICK_STEPS + 1
    assert all("sensitivity" in name for name in runs[1:])
    # The delta it reports is one that is detected, and a tenth of it is not (--delta honoured).
    again = _audit(tmp_path, SEES, "head_perturbed", delta=doc["delta"])
    assert again.verdicts[0].killed and again.document()["head_perturbed_delta"] == {
        "source": "--delta", "delta": doc["delta"], "by_op": {OP: doc["delta"]}}
    below = _audit(tmp_path, SEES, "head_perturbed", delta=doc["delta"] / 10)
    assert not below.verdicts[0].killed and "the tolerance on `out`" in below.verdicts[0].reason


def test_a_tolerance_that_admits_every_searched_delta_lets_head_perturbed_survive_with_it(tmp_path):
    loose = SEES + "tolerance: {out: {atol: 100}}\n"
    runs = []
    audit = _audit(tmp_path, loose, "head_perturbed", on_run=lambda name, n: runs.append(name))
    head = audit.verdicts[0]
    assert {r.label for r in audit.baseline} == {"PASS"}
    assert not head.killed and head.reason.startswith("the tolerance on `out` (atol 100,") and "admits it" in head.reason
    assert audit.document()["head_perturbed_delta"] == {"source": "sensitivity", "delta": HIGH, "by_op": {OP: HIGH}}
    assert runs == ["unmutated", "head_perturbed (sensitivity step)"]     # nothing to bisect below HIGH
