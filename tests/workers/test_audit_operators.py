"""The mutation operators in real device workers: each is killed by a matrix that can see its
bug class, wrapped around the reference kernel and around an outside kernel, and the
slot-minus-one operator survives a matrix without a slot < 0, with that reason."""
from __future__ import annotations

import pytest

from harness.audit.operators import OPERATORS, parse_mutants
from harness.audit.session import run_audit
from harness.casefiles import load_paths
from harness.devices import Device
from harness.run.engine import RunOptions
from harness.run.pool import WorkerOptions
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


def _audit(tmp_path, text, names=None, kernel_paths=()):
    cases = load_paths([str(write_case_file(tmp_path, "m.yaml", text))])
    worker = WorkerOptions(log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "goldens"),
                           kernel_paths=tuple(kernel_paths))
    options = RunOptions(devices=[Device("cpu")], worker=worker)
    return run_audit(cases, parse_mutants(names), options, MemoryStore())


def test_every_operator_is_killed_by_a_matrix_that_sees_it(tmp_path):
    audit = _audit(tmp_path, SEES)
    assert {r.label for r in audit.baseline} == {"PASS"}
    survivors = {v.name: v.reason for v in audit.verdicts if not v.killed}
    assert survivors == {}
    assert audit.score.value == 1.0 and audit.score.applicable == len(OPERATORS)  # off_by_one_page included
    labels = {v.name: v.killed_by[0].label for v in audit.verdicts}
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
