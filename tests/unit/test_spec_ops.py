"""Spec ops in-process (docs/specs.md): reading duck-typed specs and refusing bad ones, seeding,
inputs that reproduce across processes, the user golden's checks, poison for every dtype, and
the builtin comparators on a bug and on a correct result."""
from __future__ import annotations

import json
import subprocess
import sys
import types
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from harness.case import PRESETS, Case, SeqLens, SlotMode, Tolerance
from harness.outcomes import Outcome
from harness.worker import comparators, spec_module
from harness.worker.launch import poison_mask, poisoned
from harness.worker.spec_check import check
from harness.worker.spec_inputs import SpecGolden, generate
from harness.worker.spec_module import SpecError
from helpers import ROOT

OUTSIDE = ROOT / "tests" / "outside_specs"


@dataclass
class TS:      # an outsider's own TensorSpec: only its attributes matter
    name: str
    shape: Any
    dtype: Any
    init_value: Any = None
    is_output: bool = False


def _module(name: str, build, golden=None) -> types.ModuleType:
    m = types.ModuleType(name)
    m.build_tensor_specs = build
    m.golden_x = golden or (lambda t: t["out"].copy_(t["a"] * 2))
    sys.modules[name] = m
    return m


@pytest.mark.parametrize("specs, message", [
    (lambda: "nope", "returned str, not a list of specs"),
    (lambda: [TS("a", [2], torch.float32), TS("a", [2], torch.float32, is_output=True)], "two specs are named 'a'"),
    (lambda: [TS("a", [2, -1], torch.float32, is_output=True)], "is not a list of non-negative ints"),
    (lambda: [TS("a", [2], "complex32", is_output=True)], "unknown dtype 'complex32'"),
    (lambda: [TS("a", [2], torch.float32, init_value=torch.zeros(3), is_output=True)], "init_value has shape [3]"),
    (lambda: [TS("a", [2], torch.float32, init_value="x", is_output=True)], "init_value is a str"),
    (lambda: [TS("a", [10**9], torch.float32, is_output=True)], "has 1000000000 elements"),
    (lambda: [TS("a", [2], torch.float32)], "no spec has is_output=True"),
    (lambda: [object()], "neither a tensor spec"),
])
def test_bad_specs_are_one_line_naming_module_and_spec(specs, message):
    m = _module("spec_bad", specs)
    with pytest.raises(SpecError, match=None) as err:
        spec_module.build(m, {})
    assert message in str(err.value) and "spec_bad" in str(err.value) and "\n" not in str(err.value)


def test_callable_init_of_the_wrong_shape_is_found_at_load():
    _module("spec_bad_init", lambda: [TS("a", [2], torch.float32, init_value=lambda: torch.zeros(5), is_output=True)])
    found = check({"module": "spec_bad_init", "golden": None, "params": [{}], "seed": 0, "compare": {}})
    assert "init_value has shape [5], the spec says [2]" in found["error"]["message"]


def _case(module: str, params=None, seed=0, compare=None) -> Case:
    found = check({"module": module, "golden": None, "params": [params or {}], "seed": seed, "compare": compare or {}})
    assert "error" not in found, found
    table = found["tables"][0]
    outputs = [r["name"] for r in table if r["role"] == "output"]
    return Case(case_id=f"{module}-{seed}", matrix="m", source="m.yaml:1", op=found["golden"].removeprefix("golden_"),
                kernel="k:f", geometry=PRESETS["tiny"], seq_lens=SeqLens("const", (1,)), slot_mode=SlotMode("arange"),
                seed=seed, tolerance={o: Tolerance(atol=1e-4, rtol=1e-4, max_error_ratio=0.0) for o in outputs},
                spec={"op": found["golden"].removeprefix("golden_"), "module": module, "golden": found["golden"],
                      "params": params or {}, "compare": compare or {}, "args": table})


@pytest.fixture
def outside_path(monkeypatch):
    monkeypatch.syspath_prepend(str(OUTSIDE))


def test_seeding_gives_the_same_bytes_in_another_process(outside_path):
    case = _case("mylib.quant_topk", {"rows": 3})
    ci = generate(case, torch.device("cpu"))
    from harness.worker.input_digest import digest_inputs
    here = digest_inputs(ci.op, {**ci.args, **ci.initial}).digest
    code = ("import sys, json, torch; from harness.case import Case; from harness.worker.spec_inputs import generate; "
            "from harness.worker.input_digest import digest_inputs; "
            "c = Case.from_wire(json.loads(sys.stdin.read())); ci = generate(c, torch.device('cpu')); "
            "print(digest_inputs(ci.op, {**ci.args, **ci.initial}).digest)")
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps(case.to_wire()), capture_output=True,
                          text=True, env={"PYTHONPATH": f"{OUTSIDE}:{ROOT}", "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.stdout.strip() == here, done.stderr
    other = generate(_case("mylib.quant_topk", {"rows": 3}, seed=1), torch.device("cpu"))
    assert digest_inputs(other.op, {**other.args, **other.initial}).digest != here


def test_on_a_host_without_accelerators_seeding_is_torchs_own_cpu_seeding(monkeypatch):
    """No device module: the CPU generator alone, the bytes torch.manual_seed gives, without its
    queued device seedings (1-2 ms a case).  A registered out-of-tree device is seeded as torch does."""
    from harness.worker import spec_module
    if not spec_module._no_builtin_accelerator():
        pytest.skip("this host has an accelerator: torch.manual_seed in full is the right seeding")
    torch.manual_seed(7)
    expected = torch.randn(5)
    monkeypatch.setattr(torch, "manual_seed", lambda seed: pytest.fail("torch.manual_seed called on a host-only box"))
    spec_module.seed_all(7)
    assert torch.equal(torch.randn(5), expected)
    monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: "npu_standin")
    monkeypatch.setattr(torch, "npu_standin", object(), raising=False)
    assert not spec_module._host_only()         # asked each time: a late torch_npu import is seen


def test_a_spec_drawing_from_an_unseeded_source_is_one_finding():
    state = {"n": 0}

    def drifting():
        state["n"] += 1
        return torch.full((2,), float(state["n"]))
    _module("spec_drift", lambda: [TS("a", [2], torch.float32, init_value=drifting),
                                   TS("out", [2], torch.float32, is_output=True)])
    golden = SpecGolden(_case("spec_drift"))
    with pytest.raises(SpecError, match=r"inputs differ between two creations with seed 0 \(a\)"):
        golden.make_inputs()


def test_user_golden_unwritten_output_and_input_write_are_spec_errors():
    build = lambda: [TS("a", [4], torch.float32, init_value=lambda: torch.randn(4)),  # noqa: E731
                     TS("out", [4], torch.float32, is_output=True)]
    _module("spec_g_ok", build)
    ok = SpecGolden(_case("spec_g_ok"))
    result = ok.compute(ok.make_inputs(), torch.float32)
    assert result["out"].shape == (4,)
    _module("spec_g_half", build, golden=lambda t: t["out"][:2].copy_(t["a"][:2]))
    half = SpecGolden(_case("spec_g_half"))
    with pytest.raises(SpecError, match="left 2 of 4 elements of output out unwritten"):
        half.compute(half.make_inputs(), torch.float32)
    _module("spec_g_writes", build, golden=lambda t: (t["a"].zero_(), t["out"].zero_()))
    writes = SpecGolden(_case("spec_g_writes"))
    with pytest.raises(SpecError, match="wrote into input a"):
        writes.compute(writes.make_inputs(), torch.float32)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool, torch.float64,
                                   torch.bfloat16, torch.float16, torch.float32,
                                   *[getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)]])
def test_every_dtype_is_poisoned_and_the_poison_is_found(dtype):
    t = poisoned((3, 2), dtype)
    assert poison_mask(t).all()
    t.view(torch.uint8).zero_()     # written (zeros): no longer poison
    assert not poison_mask(t).any()


class _Launched:
    def __init__(self, outputs):
        self.outputs = outputs


def _ctx(kind, arg, outputs, goldens, inputs=None):
    from harness.comparators import Comparator
    ci = types.SimpleNamespace(args=inputs or {})
    return comparators.Context(None, ci, _Launched(outputs), goldens, Comparator(kind, arg))


TOL = Tolerance(atol=1e-4, rtol=1e-4, max_error_ratio=0.0)


def test_argmax_near_tie_and_hard_flip():
    logits = torch.tensor([[1.0, 1.01, 0.0], [3.0, 0.0, 0.0]])
    golden = torch.tensor([1, 0])
    metrics = {"compare": {}}
    tie = _ctx("argmax", "logits", {"logits": logits, "best": torch.tensor([0, 0])}, {"logits": logits, "best": golden})
    found = tie.run("best", torch.tensor([0, 0]), golden, ("row",), TOL, metrics)
    assert [f.outcome for f in found] == [Outcome.NEAR_TIE] and "row 0 picked 0, golden 1" in found[0].message
    hard = tie.run("best", torch.tensor([1, 2]), golden, ("row",), TOL, metrics)
    assert [f.outcome for f in hard] == [Outcome.MISMATCH] and "row [1]" in hard[0].message
    assert tie.run("best", golden.clone(), golden, ("row",), TOL, metrics) == []


def test_ulp_on_bf16():
    g = torch.tensor([1.0, 2.0, 4.0]).to(torch.bfloat16)
    one_ulp = torch.tensor([1.0078125, 2.0, 4.0]).to(torch.bfloat16)
    ctx = _ctx("ulp", "1", {}, {})
    assert ctx.run("o", one_ulp, g, ("dim0",), TOL, {"compare": {}}) == []
    ctx2 = _ctx("ulp", "0", {}, {})
    bad = ctx2.run("o", one_ulp, g, ("dim0",), TOL, {"compare": {}})
    assert bad and "dim0 [0]" in bad[0].message


def test_topk_pairs_accepts_ties_and_refuses_a_wrong_pick():
    g_idx, g_val = torch.tensor([[0, 1]]), torch.tensor([[5.0, 3.0]])
    tie_idx, tie_val = torch.tensor([[0, 2]]), torch.tensor([[5.0, 3.0]])    # index 2 ties the k-th value
    ctx = _ctx("topk_pairs", "vals", {"vals": tie_val}, {"vals": g_val})
    assert ctx.run("idx", tie_idx, g_idx, ("row", "k"), TOL, {"compare": {}}) == []
    wrong = _ctx("topk_pairs", "vals", {"vals": torch.tensor([[5.0, 1.0]])}, {"vals": g_val})
    found = wrong.run("idx", torch.tensor([[0, 3]]), g_idx, ("row", "k"), TOL, {"compare": {}})
    assert found and "does not tie its k-th value" in found[0].message


def test_dequant_allows_one_code_and_refuses_more():
    scale = torch.tensor([[0.5]])
    golden = torch.tensor([[10, -4]], dtype=torch.int8)
    ctx = _ctx("dequant", "s", {"s": scale}, {"s": scale})
    assert ctx.run("q", torch.tensor([[11, -4]], dtype=torch.int8), golden, ("r", "c"), TOL, {"compare": {}}) == []
    found = ctx.run("q", torch.tensor([[10, -7]], dtype=torch.int8), golden, ("r", "c"), TOL, {"compare": {}})
    assert found and "c [1]" in found[0].message


def test_exact_on_bool_and_int():
    metrics = {"compare": {}}
    a = torch.tensor([[True, False], [True, True]])
    found = comparators.exact("m", a, torch.tensor([[True, False], [False, True]]), ("row", "col"),
                              torch.ones_like(a), metrics)
    assert found and "row [1], col [0]" in found[0].message
    assert comparators.exact("i", torch.arange(4), torch.arange(4), ("d",), torch.ones(4, dtype=torch.bool), metrics) == []


def test_latency_bytes_are_the_specs_inputs_read_and_outputs_written(outside_path):
    from harness.worker.work import work
    case = _case("mylib.quant_topk", {"rows": 3})
    ci = generate(case, torch.device("cpu"))
    expected = 0
    for row in case.spec["args"]:
        if row["role"] != "scalar":
            n = 1
            for d in row["shape"]:
                n *= d
            expected += n * spec_module.torch_dtype(row["dtype"], row["name"]).itemsize
    moved = work(ci)
    assert moved.bytes == expected and expected > 0 and moved.flops is None


def test_every_elementwise_comparator_maps_its_bad_elements_over_the_first_two_dims():
    metrics = {"compare": {}}
    golden = torch.zeros(6, 40, 3, dtype=torch.int32)
    actual = golden.clone()
    actual[4, :, 1] = 9                        # row 4 bad in every column, one of three inner elements
    comparators.exact("q", actual, golden, ("row", "col", "k"), torch.ones_like(actual, dtype=torch.bool), metrics)
    m = metrics["compare"]["q"]
    assert m["passed"] is False and m["bad_ratio"] == pytest.approx(40 / golden.numel())
    assert m["map"]["axes"] == ["row", "col"] and m["map"]["size"] == [6, 40]
    ratio = torch.tensor(m["map"]["ratio"], dtype=torch.float64)
    assert torch.allclose(ratio[4], torch.full((ratio.shape[1],), 1 / 3, dtype=torch.float64))
    assert float(ratio[[0, 1, 2, 3, 5]].abs().sum()) == 0
    ulp = _ctx("ulp", "0", {}, {})
    g = torch.ones(3, 5)
    a = g.clone()
    a[0, 2] = 1.5
    ulp.run("u", a, g, ("dim0", "dim1"), TOL, metrics)
    assert metrics["compare"]["u"]["map"]["ratio"][0][2] == 1.0 and metrics["compare"]["u"]["passed"] is False
    comparators.exact("ok", golden, golden, ("row", "col", "k"), torch.ones_like(golden, dtype=torch.bool), metrics)
    assert metrics["compare"]["ok"]["passed"] is True and "map" not in metrics["compare"]["ok"]
    from harness.reports.heatmap import panels_for
    panels = panels_for("q", m)
    assert panels is not None and panels.axes == ("row", "col") and panels.ratio.shape == (6, 40)


def test_created_tensors_are_copied_only_when_something_else_may_hold_them():
    held = torch.randn(4)
    returned = {}

    def fresh():
        t = torch.randn(4)
        returned["ptr"] = t.data_ptr()
        return t
    m = _module("spec_own", lambda: [TS("a", [4], torch.float32, init_value=fresh),
                                     TS("b", [4], torch.float32, init_value=lambda: held),
                                     TS("c", [2], torch.float32, init_value=lambda: held[:2]),
                                     TS("d", [4], torch.float32, init_value=held),
                                     TS("out", [4], torch.float32, is_output=True)])
    values = spec_module.create(spec_module.build(m, {}), 0)
    assert values["a"].data_ptr() == returned["ptr"]           # the callable's own new tensor: no copy
    for name in "bcd":                                          # the module keeps these: copies
        assert values[name].untyped_storage().data_ptr() != held.untyped_storage().data_ptr()
    values["b"].add_(1)
    assert not torch.equal(values["b"], held)


def test_a_golden_stored_in_bf16_admits_its_own_rounding_and_no_more():
    """A spec golden writes its output in bf16: a correct kernel may round a hair-away value to the
    neighbouring bf16 (one ulp off the golden), never two ulps."""
    from harness.worker.checks import _golden_rounding
    from harness.worker.ratio_allclose import ratio_allclose
    golden = torch.tensor([1.5, -1.25, 0.75, 3.0], dtype=torch.bfloat16)
    e = golden.float()
    ulp = torch.tensor([2.0 ** -7, 2.0 ** -7, 2.0 ** -8, 2.0 ** -6])

    def passes(actual):
        slack = _golden_rounding(e, torch.bfloat16, None)
        return ratio_allclose(actual.to(torch.bfloat16), e, atol=3e-3, rtol=3e-3, max_error_ratio=0.0,
                              slack=slack, stored=torch.bfloat16).passed
    one_off = e + ulp * torch.tensor([1.0, -1.0, 1.0, -1.0])
    assert torch.equal(one_off.to(torch.bfloat16).float(), one_off)      # each is a bf16 neighbour
    assert not ratio_allclose(one_off.to(torch.bfloat16), e, atol=3e-3, rtol=3e-3, max_error_ratio=0.0,
                              stored=torch.bfloat16).passed               # the false alarm it fixes
    assert passes(one_off)
    for i in range(4):                                                    # two ulps off: still bad
        two_off = e.clone()
        two_off[i] += 2 * ulp[i]
        assert not passes(two_off), i
