"""Launch (guard bands, poison, signature, returned buffer) and the checks, in process, on tiny cases."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch

from harness import goldens
from harness.worker import checks
from harness.case import PRESETS, Case, SeqLens, SlotMode, Tolerance
from harness.classify.matching import classify_exception, classify_exit
from harness.devices import DeviceError, parse_device, parse_device_list
from harness.worker.inputs import generate
from harness.worker.launch import ContractError, GuardedBuffer, launch, poison_mask, poisoned
from harness.outcomes import Outcome, Result, label
from harness.document import build_document
from harness.reports.json_report import write_document
from harness.kernels import reference

CPU = torch.device("cpu")


def case(op="rope_kv_write", **kw) -> Case:
    base = dict(case_id="t", matrix="t", source="t", op=op, kernel="reference",
                geometry=replace(PRESETS["tiny"], batch=4), seq_lens=SeqLens("multi_block"),
                slot_mode=SlotMode("padded", 0.5), seed=5)
    base.update(kw)
    return Case(**base)


def run(c: Case, kernel):
    ci = generate(c)
    launched = launch(kernel, ci, CPU, lambda: None)
    return checks.run_checks(c, ci, goldens.compute(c.op, ci.args), launched)


# -- devices ---------------------------------------------------------------------

def test_device_strings():
    assert str(parse_device("npu:6")) == "npu:6"
    assert str(parse_device("cuda")) == "cuda:0"
    assert [str(d) for d in parse_device_list("npu:0-2,cpu")] == ["npu:0", "npu:1", "npu:2", "cpu"]
    for bad in ("npu:x", "gpu", "cpu:1", "cuda:-1", ""):
        with pytest.raises(DeviceError, match="invalid device|no devices"):
            parse_device_list(bad) if not bad else parse_device_list(bad)


# -- launch ----------------------------------------------------------------------

def test_guard_band_records_writes_before_and_after():
    buf = GuardedBuffer.allocate("x", torch.zeros(4, 8, dtype=torch.bfloat16), CPU, guard_elems=16)
    assert buf.guard_damage() == ([], [])
    buf.storage[16 - 8:16] = 1.0          # one row before the start
    buf.storage[16 + 32] = 2.0            # first element past the end
    before, after = buf.guard_damage()
    assert before == list(range(-8, 0)) and after == [32]


def test_poison_is_told_apart_from_computed_nan():
    t = poisoned((3,), torch.bfloat16)
    assert poison_mask(t).all()
    t[0] = float("nan")
    assert poison_mask(t).tolist() == [False, True, True]
    assert poison_mask(poisoned((2,), torch.float32)).all()


def test_signature_that_does_not_fit_is_refused_before_launch():
    called = []

    def kernel(q_proj, k_proj):        # far too few parameters
        called.append(1)

    with pytest.raises(ContractError, match="does not fit op rope_kv_write"):
        launch(kernel, generate(case()), CPU, lambda: None)
    assert not called


def test_reference_passes_and_leaves_unmapped_rows_alone():
    found = run(case(), reference.rope_kv_write)
    assert found.outcome is Outcome.PASS, found.report


def test_write_to_an_unmapped_row_is_a_contract_finding():
    c = case(slot_mode=SlotMode("random"), seed=7)
    stray = min(set(range(64)) - set(generate(c).slots.tolist()))     # a canary row no slot maps to

    def writes_a_stray_row_too(**kw):
        reference.rope_kv_write(**kw)
        kw["k_cache"].view(-1, *kw["k_cache"].shape[-2:])[stray] = 0.0

    found = run(c, writes_a_stray_row_too)
    assert found.outcome is Outcome.CONTRACT
    P = c.geometry.page_size
    assert (f"k_cache: 1 rows outside the slot mapping changed: slot {stray} (page {stray // P}, "
            f"offset {stray % P})") in found.summary


def test_oob_write_takes_precedence_over_everything_it_causes():
    def scribbles_before_out(**kw):
        reference.paged_decode_attention(**kw)
        out = kw["out"]
        torch.as_strided(out, (4,), (1,), out.storage_offset() - 4).fill_(0)
        out[0] = 0.0

    found = run(case(op="paged_decode_attention"), scribbles_before_out)
    assert found.outcome is Outcome.OOB_WRITE
    assert [f.outcome for f in found.items] == [Outcome.OOB_WRITE, Outcome.MISMATCH]
    assert "out: guard band overwritten: 4 elements before the start (offsets -4..-1)" in found.report


@pytest.mark.parametrize("returned, expected", [
    (lambda kw: None, None),
    (lambda kw: kw["out"], None),
    (lambda kw: (kw["out"], kw["query"]), None),
    (lambda kw: [kw["out"], kw["query"]], None),
    (lambda kw: kw["query"], "returned the 'query' buffer instead of 'out'"),
    (lambda kw: kw["out"].clone(), "not the 'out' buffer"),
    (lambda kw: 3, "returned int; allowed: None, the 'out' buffer, or the tuple (out, query) of the buffers passed in"),
    (lambda kw: (kw["query"], kw["out"]), "returned a tuple whose element 0 is the 'query' buffer, not the 'out' buffer"),
    (lambda kw: (kw["out"], kw["query"].clone()),
     "element 1 is a tensor (4, 4, 32) torch.bfloat16 the harness did not pass in, not the 'query' buffer"),
    (lambda kw: (kw["out"],), "returned a tuple of 1 (the 'out' buffer); allowed: None, the 'out' buffer, or the tuple"),
])
def test_returned_buffer_check(returned, expected):
    def kernel(**kw):
        reference.fused_rope_decode_attention(**kw)
        return returned(kw)

    found = run(case(op="fused_rope_decode_attention"), kernel)
    if expected is None:
        assert found.outcome is Outcome.PASS, found.report
    else:
        assert found.outcome is Outcome.CONTRACT and expected in found.summary, found.summary
        assert found.summary.endswith("allowed: None, the 'out' buffer, or the tuple (out, query) of the buffers "
                                      "passed in")


def test_single_output_op_lists_what_it_may_return():
    def returns_a_pair(**kw):
        reference.rope_kv_write(**kw)
        return kw["query"], kw["query"]

    found = run(case(op="rope_kv_write"), returns_a_pair)
    assert found.outcome is Outcome.CONTRACT
    assert found.summary.endswith("returned a tuple of 2 (the 'query' buffer, the 'query' buffer); "
                                  "allowed: None, the 'query' buffer, or the tuple (query,) of the buffers passed in"), found.summary


# -- argmax near ties ---------------------------------------------------------------

def _layers_case(margin: float) -> Case:
    tol = Tolerance(atol=10.0, rtol=0.0, max_error_ratio=1.0, argmax_margin=margin)  # values never decide
    return case(op="decode_layers", slot_mode=SlotMode("arange"), tolerance={"logits": tol})


def _swap_top2(**kw):
    """Exchanges each row's two largest logits: an argmax flip whose size is the golden's top-2 gap."""
    reference.decode_layers(**kw)
    logits = kw["logits"]
    top = logits.topk(2, dim=-1).indices
    rows = torch.arange(logits.shape[0])
    a, b = logits[rows, top[:, 0]].clone(), logits[rows, top[:, 1]].clone()
    logits[rows, top[:, 0]], logits[rows, top[:, 1]] = b, a


def test_argmax_flip_within_the_margin_is_a_near_tie():
    found = run(_layers_case(margin=100.0), _swap_top2)
    assert found.outcome is Outcome.NEAR_TIE, found.report
    assert found.outcome.passed
    assert found.metrics["argmax"]["near_ties"] == 4


def test_argmax_flip_beyond_the_margin_is_a_mismatch():
    found = run(_layers_case(margin=0.0), _swap_top2)
    assert found.outcome is Outcome.MISMATCH
    assert "argmax differs in 4 rows beyond the near-tie margin" in found.summary


# -- outcomes, classification, JSON ----------------------------------------------------

def test_labels():
    assert label(Outcome.DEVICE_FAULT, 507018) == "FAIL_507018"
    assert label(Outcome.MISMATCH) == "MISMATCH"
    assert label(Outcome.CRASH, "SIGSEGV") == "CRASH"


def test_root_cause_printed_first_wins_and_the_cascade_is_kept():
    log = ("[ERROR] PTO2 orch_error_code=2 sched_error_code=0 runtime_status=-2\n"
           "RuntimeError: NPU function error: aclrtSynchronizeStream, error code is 507018\n")
    c = classify_exception("launch", "RuntimeError", "error code is 507018", "", log)
    assert (c.outcome, c.code, c.sticky) == (Outcome.ORCH_ERROR, 507018, True)   # the label: the printed code
    assert c.secondary == ("FAIL_507018",)


def test_exception_classes():
    assert classify_exception("import", "ModuleNotFoundError", "No module named 'x'", "").outcome is Outcome.BUILD_ERROR
    assert classify_exception("contract", "ContractError", "bad sig", "").outcome is Outcome.CONTRACT
    cuda = classify_exception("launch", "RuntimeError", "CUDA error: an illegal memory access was encountered", "")
    assert (cuda.outcome, cuda.code, cuda.sticky) == (Outcome.DEVICE_FAULT, 700, True)
    oom = classify_exception("launch", "OutOfMemoryError", "CUDA out of memory. Tried to allocate 2 GiB", "")
    assert (oom.outcome, oom.sticky) == (Outcome.OOM, False)
    plain = classify_exception("launch", "ValueError", "bad value", "")
    assert (plain.outcome, plain.sticky) == (Outcome.CRASH, False)


def test_exit_classes():
    assert (classify_exit(-11).outcome, classify_exit(-11).code) == (Outcome.CRASH, "SIGSEGV")
    assert classify_exit(3).code == 3


def test_json_is_strict(tmp_path):
    r = Result(case_id="x", outcome=Outcome.MISMATCH, metrics={"rel": math.inf, "loc": [math.nan, 0.5]})
    path = tmp_path / "o.json"
    write_document(path, build_document([r], started=0.0, devices=["cpu"], command=["harness"]))
    doc = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-strict constant {c}"))
    assert doc["results"][0]["metrics"] == {"rel": "Infinity", "loc": [None, 0.5]}
    assert doc["summary"]["failed"] == 1


def test_negative_slot_used_as_an_index_is_named():
    def wraps_negative_slots(**kw):
        reference.rope_kv_write(**kw)
        k = kw["k_cache"].view(-1, *kw["k_cache"].shape[-2:])
        for slot in kw["slot_mapping"].tolist():
            if slot < 0:
                k[slot] = 1.0                   # Python indexing: -1 is the last row

    found = run(case(slot_mode=SlotMode("padded", 0.5)), wraps_negative_slots)
    assert found.outcome is Outcome.CONTRACT
    assert "a write for slot < 0" in found.summary
