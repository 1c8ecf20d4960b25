"""Spec ops get what the builtin ops get, through the same code (docs/specs.md): INTERMEDIATES
read and checked, a golden's ``dump`` recorded and refused as the ABI says, the collector
comparing a spec op's dumps; the audit's generic operators applied to a spec op's own outputs
and inputs; the contract table of a spec op; no builtin-only hint on a spec op."""
from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from harness.ops.abi import contract_rows, spec_layouts
from harness.audit.kill import survivor_reason
from harness.audit.operators import (BY_NAME, INPUT_VAR, OUTPUT_VAR, SPEC_WRAPPER, applicable, mutated,
                                     value_outputs)
from harness.case import PRESETS, Case, SeqLens, SlotMode, Tolerance
from harness.goldens.cache import IntermediateGoldens
from harness.outcomes import Outcome, Result
from harness.worker import spec_module
from harness.worker.dumps import Collector
from harness.worker.spec_check import check
from harness.worker.spec_inputs import SpecGolden, generate
from harness.worker.spec_module import SpecError


@dataclass
class TS:      # an outsider's own TensorSpec
    name: str
    shape: Any
    dtype: Any
    init_value: Any = None
    is_output: bool = False


def _build(rows=3):
    return [TS("x", [rows, 8], torch.float32, init_value=lambda: torch.randn(rows, 8)),
            TS("mask", [rows], torch.bool, init_value=True),
            TS("y", [rows, 8], torch.float32, is_output=True),
            TS("n", [rows], torch.int32, is_output=True)]


def _golden(t, dump=None):
    h = t["x"] * 2
    if dump:
        dump("h", h)
        dump("g", h + 1)
    t["y"][:] = h + 1
    t["n"][:] = 3


def _module(name: str, golden=_golden, intermediates: Any = ("h", "g"), build=_build) -> None:
    m = types.ModuleType(name)
    m.build_tensor_specs = build
    m.golden_y = golden
    if intermediates is not None:
        m.INTERMEDIATES = list(intermediates)
    sys.modules[name] = m


def _case(module: str, params=None) -> Case:
    found = check({"module": module, "golden": None, "params": [params or {}], "seed": 0, "compare": {}})
    assert "error" not in found, found
    table = found["tables"][0]
    outputs = [r["name"] for r in table if r["role"] == "output"]
    return Case(case_id=f"{module}[rows={(params or {}).get('rows', 3)}]", matrix="m", source="m.yaml:1", op="y",
                kernel="lib.k:f", geometry=PRESETS["tiny"], seq_lens=SeqLens("const", (1,)),
                slot_mode=SlotMode("arange"), seed=0,
                tolerance={o: Tolerance(atol=1e-4, rtol=1e-4, max_error_ratio=0.0) for o in outputs},
                spec={"op": "y", "module": module, "golden": found["golden"], "params": params or {}, "compare": {},
                      "args": table, "intermediates": found["intermediates"]})


# -- INTERMEDIATES ---------------------------------------------------------------------------------

def test_intermediates_are_a_chain_unless_an_entry_names_what_it_consumes():
    m = types.SimpleNamespace(__name__="lib", INTERMEDIATES=["a", "b", ("c", []), ("d", ["a", "c"])])
    assert spec_module.declared_intermediates(m) == [["a", []], ["b", ["a"]], ["c", []], ["d", ["a", "c"]]]
    assert spec_module.declared_intermediates(types.SimpleNamespace(__name__="lib")) == []


@pytest.mark.parametrize("listed, message", [
    (["a", "a"], "'a' is listed twice"),
    (["a", ("b", ["c"])], "'b' consumes 'c', which is not listed before it"),
    ([3], "INTERMEDIATES[0] is 3; expected a name or (name, [names it consumes])"),
    (["bad name"], "'bad name' is not a name"),
    ("abc", "INTERMEDIATES is a str"),
])
def test_bad_intermediates_are_one_line(listed, message):
    with pytest.raises(SpecError) as err:
        spec_module.declared_intermediates(types.SimpleNamespace(__name__="lib", INTERMEDIATES=listed))
    assert message in str(err.value) and "spec module lib" in str(err.value)


def test_load_refuses_intermediates_without_a_golden_that_dumps():
    _module("spec_im_nodump", golden=lambda t: _golden(t))
    found = check({"module": "spec_im_nodump", "golden": None, "params": [{}], "seed": 0, "compare": {}})
    assert found["error"]["field"] == "spec"
    assert "lists INTERMEDIATES but golden_y takes no `dump` parameter" in found["error"]["message"]


def test_golden_dumps_are_recorded_in_the_golden_dtype_and_only_once():
    _module("spec_im_ok")
    golden = SpecGolden(_case("spec_im_ok"))
    recorded: dict[str, torch.Tensor] = {}
    ci = golden.make_inputs()
    out = golden.compute(ci, torch.float64, intermediates=recorded)
    assert set(recorded) == {"h", "g"} and recorded["h"].dtype == torch.float64
    assert torch.equal(recorded["g"].float(), out["y"])


@pytest.mark.parametrize("dumps, message", [
    (lambda d, h: d("k", h), "dumped 'k': not one of INTERMEDIATES (h, g)"),
    (lambda d, h: (d("h", h), d("h", h)), "dumped intermediate h twice"),
    (lambda d, h: d("h", h.int()), "dumped h as a torch.int32 tensor; intermediates are float tensors"),
])
def test_a_golden_dump_the_abi_refuses_is_the_spec_modules_error(dumps, message):
    def golden(t, dump=None):
        dumps(dump, t["x"] * 2)
        t["y"][:] = 0
        t["n"][:] = 0
    _module("spec_im_bad", golden=golden)
    g = SpecGolden(_case("spec_im_bad"))
    with pytest.raises(SpecError, match=None) as err:
        g.compute(g.make_inputs(), torch.float32, intermediates={})
    assert message in str(err.value) and "golden spec_im_bad.golden_y" in str(err.value)


def test_the_collector_checks_a_spec_ops_dumps_against_its_goldens_shapes():
    _module("spec_im_collect")
    case = _case("spec_im_collect")
    golden = SpecGolden(case)
    ci = generate(case, torch.device("cpu"))
    recorded: dict[str, torch.Tensor] = {}
    golden.compute(golden.make_inputs(), torch.float32, intermediates=recorded)
    collector = Collector(case, ci, IntermediateGoldens(recorded))
    collector("h", recorded["h"].clone())
    collector("g", torch.zeros(3, 4))
    collector("k", recorded["h"])
    data = collector.to_metrics()
    assert data["problems"] == ["intermediate g: shape (3, 4), its golden dumped (3, 8)",
                                "dump('k'): unknown intermediate for y; valid: h, g"]
    assert [(r["name"], r["verdict"]) for r in data["rows"]] == [("h", "bit-exact"), ("g", "refused")]
    wrong = Collector(case, ci, IntermediateGoldens(recorded))
    wrong("h", recorded["h"] + 1)
    wrong("g", recorded["g"] + 1)
    assert wrong.to_metrics()["first_bad_intermediate"] == "h"      # g consumes h: inherited
    assert [r["verdict"] for r in wrong.to_metrics()["rows"]] == ["bad", "inherited"]


# -- audit operators -------------------------------------------------------------------------------

def test_generic_operators_apply_to_a_spec_op_and_name_its_own_tensors():
    _module("spec_audit", intermediates=None)
    case = _case("spec_audit")
    names = {o.name for o in BY_NAME.values() if o.applies_to(case)}
    assert names == {"half_written", "nan_element", "head_perturbed", "input_clobber", "row_dropped"}
    assert value_outputs(case) == ("y",)             # n is int32: nothing to scale or make NaN
    nan = mutated(case, BY_NAME["nan_element"])
    assert nan.kernel == SPEC_WRAPPER and nan.env[OUTPUT_VAR] == "y" and INPUT_VAR not in nan.env
    assert mutated(case, BY_NAME["input_clobber"]).env[INPUT_VAR] == "x"
    assert mutated(case, BY_NAME["head_perturbed"], 0.5).env[OUTPUT_VAR] == "y"


def test_a_spec_op_without_a_float_output_has_no_value_operators():
    _module("spec_audit_int", golden=lambda t: t["n"].fill_(1), intermediates=None,
            build=lambda rows=3: [TS("x", [rows, 8], torch.float32), TS("n", [rows], torch.int32, is_output=True)])
    case = _case("spec_audit_int")
    assert not applicable([case], BY_NAME["nan_element"]) and not applicable([case], BY_NAME["head_perturbed"])
    assert mutated(case, BY_NAME["half_written"]).env[OUTPUT_VAR] == "n"


def test_row_dropped_on_one_row_outputs_survives_for_that_reason():
    _module("spec_audit_rows", intermediates=None)
    case = _case("spec_audit_rows", {"rows": 1})
    passed = {case.case_id: Result(case.case_id, Outcome.PASS)}
    assert survivor_reason(BY_NAME["row_dropped"], [case], passed) == "no case's `y` has more than one row"


# -- harness ops ------------------------------------------------------------------------------------

def test_a_spec_ops_contract_table_is_its_own():
    _module("spec_table", intermediates=None)
    case = _case("spec_table")
    rows = contract_rows(case.op_spec, None, spec_layouts(case.spec["args"]))
    assert [(r.argument, r.role, r.shape, r.dtype, r.layout, r.writes, r.returned) for r in rows] == [
        ("x", "input", "[3, 8]", "float32", "dim0, dim1", "nothing", "no"),
        ("mask", "input", "[3]", "bool", "dim0", "nothing", "no"),
        ("y", "output", "[3, 8]", "float32", "dim0, dim1", "every element", "first output"),
        ("n", "output", "[3]", "int32", "dim0", "every element", "in the tuple or dict only")]
