"""The sampling pack (docs/sampling.md): a second pack through the op pack API, an op with an int
output judged by a declared comparator.  Cases run in this process as a worker runs them."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch

from harness import goldens, packs
from harness.case import PRESETS, Case, SeqLens, SlotMode, default_tolerance
from harness.devices import Device, backend
from harness.goldens.cache import GoldenCache
from harness.intermediates.spec import intermediates
from harness.memory_plan import plan
from harness.ops import OPS
from harness.packs.sampling import inputs as sampling_inputs
from harness.ops.registry import BUILTINS
from harness.worker.comparators import for_case
from harness.worker.execute import KernelLoader, execute_case
from harness.worker.inputs import generate, input_spec

OP = "lm_head_topk"
SHAPES = {"tiny": {}, "odd": {"vocab": 1000, "hidden": 96}}


def _case(kernel="reference", seed=0, batch=8, precision="fp32-compute", shape="tiny", dtype="bf16") -> Case:
    geo = dataclasses.replace(PRESETS["tiny"], batch=batch, **SHAPES[shape])
    return Case(case_id=f"{kernel}-{seed}", matrix="t", source="t", op=OP, kernel=kernel, geometry=geo,
                seq_lens=SeqLens("const", (1,)), slot_mode=SlotMode("arange"), seed=seed, precision=precision,
                dtype=dtype)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    device = Device("cpu")
    be, loader = backend(device), KernelLoader()
    cache = GoldenCache(tmp_path_factory.mktemp("goldens"))

    def go(case: Case, **kwargs):
        reply = execute_case(case, device, be, cache, loader, **kwargs)
        assert reply.failure is None, reply.failure
        return reply
    return go


# -- declarations ---------------------------------------------------------------

def test_the_pack_is_builtin_and_declares_its_op_kernels_and_comparator():
    pack = packs.pack_of(OP)
    assert pack.name == "sampling" and "harness.packs.sampling" in packs.BUILTIN_PACKS
    assert OPS[OP].arg("topk_indices").dtype == "int32" and OPS[OP].arg("topk_values").shape == ("B", "8")
    qwen3 = set(packs.pack_of("rope_kv_write").kernels)
    assert set(pack.kernels) - {"reference"} and not (set(pack.kernels) - {"reference"}) & qwen3
    for kernel in pack.kernels:
        assert BUILTINS[kernel][OP] == pack.kernels[kernel][OP]
    assert {n: (c.kind, c.arg) for n, c in for_case(_case()).items()} == {"topk_indices": ("topk_pairs", "topk_values")}
    assert default_tolerance(OP, "topk_values").rtol < default_tolerance(OP, "topk_values", "bf16-compute").rtol
    assert [i.name for i in intermediates(OP)] == ["normed", "logits"]


def test_a_comparator_for_no_output_is_refused():
    entry = packs.entry(OP)
    with pytest.raises(ValueError, match="not one of its outputs"):
        packs.Pack("bad", {OP: dataclasses.replace(entry, compare={"nope": "topk_pairs(topk_values)"})})
    with pytest.raises(ValueError, match="unknown comparator"):
        packs.Pack("bad", {OP: dataclasses.replace(entry, compare={"topk_indices": "sorted(x)"})})


def test_the_declaration_imports_no_torch():
    code = ("import sys, harness.packs as p; p.packs(); p.entry('lm_head_topk'); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_memory_plan_and_the_golden_names_come_from_the_contract():
    assert plan(_case()).outputs == 8 * 8 * (4 + 4)
    assert goldens.golden_names(OP) == ("topk_values", "topk_indices", "topk_values@exact")


# -- inputs ---------------------------------------------------------------------

def test_inputs_are_deterministic_keyed_and_plant_ties():
    a, b = generate(_case(seed=3)), generate(_case(seed=3))
    for name in ("hidden", "final_norm_weight", "lm_head"):
        assert torch.equal(a.args[name], b.args[name])
    assert not torch.equal(a.args["lm_head"], generate(_case(seed=4)).args["lm_head"])
    assert input_spec(_case(seed=3))["generator"] == sampling_inputs.GENERATOR_VERSION
    assert input_spec(_case(seed=3)) != input_spec(_case(seed=3, dtype="fp16"))
    twins, originals, near, near_originals = sampling_inputs.tie_rows(512)
    w = a.args["lm_head"]
    assert torch.equal(w[twins.start:twins.stop], w[originals.start:originals.stop])
    gap = w[near.start:near.stop, 0].float() - w[near_originals.start:near_originals.stop, 0].float()
    assert bool((gap != 0).all()) and torch.equal(w[near.start:near.stop, 1:], w[near_originals.start:near_originals.stop, 1:])
    rms = a.args["hidden"].float().pow(2).mean(-1).sqrt()
    scales = torch.tensor(sampling_inputs.row_scales(3, 8))
    assert bool(((rms / scales - 1).abs() < 0.25).all()) and len(set(scales.tolist())) > 3, (rms, scales)
    assert a.args["hidden"].dtype == torch.bfloat16 and generate(_case(dtype="fp16")).args["hidden"].dtype == torch.float16


def test_ties_reach_the_top_k_and_the_k_th_place():
    """The planted ties matter: some rows' golden top k hold a tie that another correct kernel orders
    otherwise, and some have one across the k-th place."""
    from harness.kernels import sampling as kernels
    swapped = across = 0
    for seed in range(4):
        ci = generate(_case(seed=seed, batch=16))
        g = goldens.compute(OP, ci.args, torch.float32)
        out = {n: torch.empty(s, dtype=d) for n, (s, d) in ci.outputs.items()}
        kernels.topk_ascending_ties(**ci.args, **out)
        swapped += int((out["topk_indices"].long() != g["topk_indices"].long()).any(-1).sum())
        out2 = {n: torch.empty(s, dtype=d) for n, (s, d) in ci.outputs.items()}
        kernels.lm_head_topk(**ci.args, **out2, dump=lambda name, t: out2.__setitem__(name, t))
        top = out2["logits"].sort(-1, descending=True).values
        across += int(((top[:, 7] - top[:, 8]).abs() < 2e-2).sum())
    assert swapped >= 4 and across >= 2, (swapped, across)


# -- outcomes -------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2, 5])
@pytest.mark.parametrize("kernel", ["reference", "topk_fp32_normed", "topk_ascending_ties"])
def test_correct_kernels_pass(run, kernel, seed):
    reply = run(_case(kernel, seed=seed, batch=16))
    assert reply.outcome.value == "PASS", reply.summary + reply.report


@pytest.mark.parametrize("shape", list(SHAPES))
def test_correct_kernels_pass_with_an_fp64_golden(run, shape):
    for kernel in ("reference", "topk_fp32_normed", "topk_ascending_ties"):
        reply = run(_case(kernel, seed=1, batch=16, shape=shape), golden_dtype="fp64")
        assert reply.outcome.value == "PASS", kernel + reply.summary + reply.report


def test_fp16_cases_pass(run):
    assert run(_case(dtype="fp16", batch=16)).outcome.value == "PASS"


def test_no_norm_is_a_mismatch_first_bad_at_normed(run):
    reply = run(_case("topk_no_norm"), intermediates="on-failure")
    assert reply.outcome.value == "MISMATCH", reply.summary
    assert "topk_values" in reply.summary
    assert "first bad intermediate normed" in reply.summary, reply.summary


def test_off_by_one_fails_the_indices_only(run):
    reply = run(_case("topk_off_by_one"))
    assert reply.outcome.value == "MISMATCH"
    compared = reply.metrics["compare"]
    assert compared["topk_values"]["passed"] and not compared["topk_indices"]["passed"]
    assert "pick indices their paired topk_values do not justify" in reply.summary
    assert compared["topk_indices"]["comparator"] == "topk_pairs(topk_values)"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bf16_logits_fail_fp32_compute_and_pass_bf16_compute(run, seed):
    strict = run(_case("topk_bf16_logits", seed=seed, batch=16))
    assert strict.outcome.value == "MISMATCH" and "topk_values" in strict.summary, strict.summary
    assert strict.metrics["compare"]["topk_indices"]["passed"]       # swaps within a bf16 ulp are ties
    loose = run(_case("topk_bf16_logits", seed=seed, batch=16, precision="bf16-compute"))
    assert loose.outcome.value == "PASS", loose.summary + loose.report


def test_harness_ops_prints_the_contract(capsys):
    from harness.cli import main
    assert main(["ops", OP, "--geometry", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "topk_indices" in out and "[4, 8]" in out and "int32" in out and "[512, 128]" in out


# -- the pack's own check (OpEntry.checks) ---------------------------------------

def test_a_borrowed_value_passes_topk_pairs_and_fails_the_pack_check(run):
    reply = run(_case("topk_borrowed_value", batch=16))
    assert reply.outcome.value == "MISMATCH", reply.summary
    assert reply.metrics["compare"]["topk_indices"]["passed"]          # the comparator alone is fooled
    assert reply.metrics["checks"]["token_logits"]["value_not_its_logit"] == 16
    assert "tokens paired with a value that is not their logit" in reply.summary


def test_the_pack_check_names_indices_outside_the_vocab():
    from harness.packs.sampling.checks import token_logits
    case = _case(batch=2)
    ci = generate(case)
    g = goldens.compute(OP, ci.args, torch.float32)
    outputs = {"topk_values": g["topk_values"].clone(), "topk_indices": g["topk_indices"].to(torch.int32)}
    launched = type("L", (), {"outputs": outputs})()
    metrics: dict = {}
    assert token_logits(case, ci, launched, g, metrics) == [] and metrics["checks"]["token_logits"]["pairs"] == 16
    outputs["topk_indices"][1, 3] = 512
    found = token_logits(case, ci, launched, g, metrics)
    assert len(found) == 1 and "1 indices outside the vocab [0, 512) in batch [1]; first at [1, 3]: 512" in found[0].message


# -- the generic audit operators wrap this pack's op too ---------------------------

@pytest.mark.parametrize("operator,outcome", [("half_written", "UNWRITTEN"), ("nan_element", "NONFINITE"),
                                              ("input_clobber", "CONTRACT")])
def test_generic_mutation_operators_wrap_the_op(run, monkeypatch, operator, outcome):
    monkeypatch.setenv("HARNESS_MUTANT", operator)
    monkeypatch.setenv("HARNESS_MUTANT_KERNEL", "reference")
    reply = run(_case("harness.kernels.mutants.operators:lm_head_topk"))
    assert reply.outcome.value == outcome, reply.summary
