"""Intermediates (docs/intermediates.md): verdicts, metrics, dump files, goldens, and whole launches.

The launches run in this process through ``execute_case`` (no worker): kernels nobody here
wrote (``tests/outside_kernels/outside/dumping.py``), each with one bug in one intermediate,
and the shipped reference kernel and its mutants.
"""
from __future__ import annotations

import gc
import json
import math
import weakref
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from harness import goldens
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device, backend
from harness.goldens.cache import GoldenCache, GoldenStoreError
from harness.intermediates import files
from harness.worker.dumps_compare import Measurement, Verdict, first_bad, headline, measure, verdicts
from harness.intermediates.spec import intermediates
from harness.outcomes import Outcome, Result
from harness.worker import dumps
from harness.worker.execute import KernelLoader, execute_case
from harness.worker.inputs import generate, on_host
from helpers import outside_kernels_in_process

TINY = replace(PRESETS["tiny"], batch=4)


def case(kernel: str, op: str = "fused_rope_decode_attention", layers: int = 1, slots: str = "arange") -> Case:
    geo = replace(TINY, num_layers=layers)
    return Case(f"{op}[{kernel}]", "unit", "unit", op, kernel, geo, SeqLens("const", (9,)), SlotMode(slots), 0,
                chunk_size=8 if op == "prefill_attention" else None)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    with outside_kernels_in_process(tmp_path_factory.mktemp("goldens")) as run:   # one golden per distinct case
        yield lambda c, mode="always": run(c, intermediates=mode)


def verdict_of(reply) -> dict[str, str]:
    return {r["name"]: r["verdict"] for r in reply.metrics["intermediates"]["rows"]}


def first_bad_of(reply) -> str | None:
    return reply.metrics["intermediates"]["first_bad_intermediate"]


# -- verdicts, pure ----------------------------------------------------------------------------

def _m(name: str, passed: bool, exact: bool = False) -> Measurement:
    return Measurement(name, passed, exact, "bfloat16", {"bad_ratio": 0.0 if passed else 1.0})


def test_bad_downstream_of_a_bad_one_is_inherited_and_the_first_bad_is_in_dataflow_order():
    items = intermediates("fused_rope_decode_attention")
    # dumped in another order than the dataflow's: the order of the table is the dataflow's
    measured = {m.name: m for m in (_m("attn", False), _m("k_rope", False), _m("v", True, True), _m("q_rope", True),
                                    _m("q_norm", True), _m("k_norm", True))}
    rows = verdicts(items, measured)
    assert {r.name: r.verdict for r in rows} == {
        "q_norm": Verdict.OK, "k_norm": Verdict.OK, "q_rope": Verdict.OK, "k_rope": Verdict.BAD,
        "v": Verdict.BIT_EXACT, "attn": Verdict.INHERITED}
    assert first_bad(rows).name == "k_rope"
    assert headline(rows) == "first bad intermediate k_rope (v bit-exact; q_norm, k_norm, q_rope ok; k_rope 100.0% bad)"


def test_with_partial_dumps_a_bad_one_whose_upstream_was_not_dumped_is_bad_not_inherited():
    items = intermediates("fused_rope_decode_attention")
    rows = verdicts(items, {"q_norm": _m("q_norm", False), "attn": _m("attn", False)})
    got = {r.name: r.verdict for r in rows}
    assert got["q_rope"] is Verdict.MISSING and got["attn"] is Verdict.BAD    # q_rope, its link, not dumped
    assert first_bad(rows).name == "q_norm"


def test_every_dumped_one_ok_puts_the_error_after_the_last():
    rows = verdicts(intermediates("rope_kv_write"), {"q_norm": _m("q_norm", True), "k_rope": _m("k_rope", True)})
    assert first_bad(rows) is None
    assert "every dumped intermediate ok (last: k_rope): the error is after it" in headline(rows)


def test_decode_layers_names_per_layer_in_dataflow_order():
    names = [i.name for i in intermediates("decode_layers", 2)]
    assert names[:7] == [f"layers.0.{p}" for p in ("q_norm", "k_norm", "q_rope", "k_rope", "v", "attn", "hidden")]
    assert names[-1] == "final_norm" and len(names) == 15
    hidden1 = next(i for i in intermediates("decode_layers", 2) if i.name == "layers.1.hidden")
    assert set(hidden1.upstream) == {"layers.1.attn", "layers.0.hidden"}


# -- the metrics ------------------------------------------------------------------------------

def test_metrics_of_a_known_difference():
    item = intermediates("rope_kv_write")[4]            # v [rows, Hkv, D]
    golden = torch.ones(2, 2, 4)
    actual = golden.clone()
    actual[0, 0, 0] = 1.002                               # off by 2/1000: over 1/1000, not over 5/1000
    actual[1, 1, 3] = 1.01                                # over both
    m = measure(item, actual, golden, None, atol=1e-3, rtol=0.0, max_error_ratio=0.0)
    assert not m.passed and not m.bit_exact
    assert m.metrics["over_0.001"] == pytest.approx(2 / 16) and m.metrics["over_0.005"] == pytest.approx(1 / 16)
    assert m.metrics["max_abs"] == pytest.approx(0.01, rel=1e-5) and m.metrics["max_rel"] == pytest.approx(0.01, rel=1e-5)
    assert 0.9999 < m.metrics["cosine"] < 1.0
    assert m.localisation["row"] == (0.125, 0.125) and m.localisation["kv_head"] == (0.125, 0.125)


def test_metrics_count_nan_and_inf_pairs_over_every_threshold_and_skip_masked_rows():
    item = intermediates("rope_kv_write")[4]            # v [rows, Hkv, D]
    golden = torch.ones(3, 2, 4)
    golden[1, 1, 1] = golden[1, 1, 2] = 0.0
    actual = golden.clone()
    actual[0, 0, 0], actual[0, 0, 1] = math.nan, math.inf  # two non-finite pairs: over both thresholds
    actual[1, 0, 0] = 1.002                               # over 1/1000 only
    actual[1, 1, 2] = 0.5                                 # against a zero golden: relative error inf
    actual[2] = math.nan                                  # a padding row: not compared at all
    m = measure(item, actual, golden, None, atol=1e-3, rtol=0.0, max_error_ratio=0.0,
                rows=torch.tensor([True, True, False]))
    assert not m.passed and m.note == "2 NaN/Inf" and m.metrics["numel"] == 16
    assert m.metrics["over_0.001"] == 4 / 16 and m.metrics["over_0.005"] == 3 / 16
    assert m.metrics["max_abs"] == 0.5 and m.metrics["max_rel"] == math.inf
    finite = torch.isfinite(actual[:2]).flatten()
    a, e = actual[:2].flatten()[finite].double(), golden[:2].flatten()[finite].double()
    assert m.metrics["cosine"] == pytest.approx(float(a @ e / (a.norm() * e.norm())), rel=1e-6)


@pytest.mark.parametrize("scale, bit_exact", [(0.0, True), (1e-4, False), (3e-3, False), (1e-1, False)])
def test_metrics_skip_only_the_passes_an_earlier_figure_settles(scale, bit_exact):
    # relative errors up to ``scale``: none, all under 1/1000, some between, some over both; every
    # figure is what the whole computation gives, to the bit
    item = intermediates("rope_kv_write")[4]
    gen = torch.Generator().manual_seed(5)
    golden = torch.randn(4, 2, 8, generator=gen)
    actual = golden * (1 + scale * (2 * torch.rand(4, 2, 8, generator=gen) - 1))
    m = measure(item, actual, golden, None, atol=1.0, rtol=1.0, max_error_ratio=0.0)
    af, ef = actual.flatten(), golden.flatten()
    rel = (af - ef).abs() / ef.abs()
    na, ne = float(af.norm()), float(ef.norm())
    assert m.metrics["over_0.001"] == int((rel > 1e-3).sum()) / af.numel()
    assert m.metrics["over_0.005"] == int((rel > 5e-3).sum()) / af.numel()
    assert m.metrics["cosine"] == float((af @ ef) / (na * ne))
    assert m.passed and m.bit_exact is bit_exact
    if scale == 3e-3:
        assert 0 < m.metrics["over_0.001"] and m.metrics["over_0.005"] == 0


def test_an_equal_low_precision_dump_is_bit_exact():
    item = intermediates("rope_kv_write")[4]
    golden = torch.randn(2, 2, 4, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16).float()
    m = measure(item, golden.to(torch.bfloat16), golden, None, atol=1e-2, rtol=1e-2, max_error_ratio=0.0)
    assert m.bit_exact and m.metrics["max_abs"] == 0.0 and m.metrics["over_0.001"] == 0.0


def test_metrics_do_not_depend_on_torchs_thread_count():
    item = intermediates("fused_rope_decode_attention")[5]     # attn [rows, Hq, D]
    gen = torch.Generator().manual_seed(3)
    golden = torch.randn(64, 8, 128, generator=gen)
    actual = golden + 1e-3 * torch.randn(64, 8, 128, generator=gen)
    before = torch.get_num_threads()
    try:
        seen = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            seen.append(measure(item, actual, golden, None, atol=1e-2, rtol=1e-2, max_error_ratio=0.0).metrics)
            assert torch.get_num_threads() == threads             # the caller's setting is put back
    finally:
        torch.set_num_threads(before)
    assert seen[0] == seen[1]


def test_bit_exact_means_the_golden_rounded_to_the_dumps_dtype():
    item = intermediates("rope_kv_write")[4]
    golden = torch.randn(2, 2, 4, generator=torch.Generator().manual_seed(0))
    stored = golden.to(torch.bfloat16)
    assert measure(item, stored, golden, None, atol=1e-2, rtol=1e-2, max_error_ratio=0.0).bit_exact
    nudged = stored.clone()
    nudged.view(torch.int16)[0, 0, 0] += 1                # one bf16 ulp: still ok, no longer bit-exact
    m = measure(item, nudged, golden, None, atol=1e-2, rtol=1e-2, max_error_ratio=0.0)
    assert m.passed and not m.bit_exact


# -- dump files ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", [".pt", ".npy", ".bin"])
def test_each_format_reads_back_what_was_written(tmp_path, fmt):
    t = torch.randn(3, 2, 4)
    files.write(tmp_path, "layers.0.k_rope", t, fmt)
    found, problems = files.entries(tmp_path)
    assert problems == [] and list(found) == ["layers.0.k_rope"]
    assert torch.equal(files.read(found["layers.0.k_rope"], 8 * t.numel()), t)


def test_bf16_bin_reads_back(tmp_path):
    t = torch.randn(5, 3).bfloat16()
    files.write(tmp_path, "v", t, ".bin")
    assert torch.equal(files.read(tmp_path / "v.bin", 8 * t.numel()), t)


def test_bad_files_are_problems_naming_the_file(tmp_path):
    (tmp_path / "q_norm.pt").write_bytes(b"not a pickle")
    (tmp_path / "k_norm.bin").write_bytes(b"\0" * 8)                      # no manifest
    (tmp_path / "attn.json").write_text("{}")                              # a manifest without .bin
    (tmp_path / "notes.txt").write_text("hello")
    files.write(tmp_path, "v", torch.zeros(100_000), ".npy")               # far larger than its intermediate
    files.write(tmp_path, "q_rope", torch.zeros(4), ".pt")
    files.write(tmp_path, "q_rope", torch.zeros(4), ".npy")                # the same name twice
    got = {name or p.file: p for name, p in files.iterate(tmp_path, lambda name: 64)}
    assert "unreadable" in got["q_norm"].message
    assert "no manifest k_norm.json" in got["k_norm"].message
    assert "a manifest without its .bin" in got["attn.json"].message
    assert "not a dump" in got["notes.txt"].message
    assert "far more than its intermediate" in got["v"].message
    assert "q_rope dumped twice" in got["q_rope.pt"].message or "q_rope dumped twice" in got["q_rope.npy"].message


# -- goldens: the same computation ------------------------------------------------------------

@pytest.mark.parametrize("op", ["rope_kv_write", "fused_rope_decode_attention", "prefill_attention",
                                "paged_decode_attention", "decode_layers"])
def test_golden_intermediates_come_from_the_computation_of_the_outputs(op):
    c = case("reference", op, layers=2)
    ci = generate(c, torch.device("cpu"))
    recorded: dict[str, torch.Tensor] = {}
    outs = goldens.compute(op, ci.args, exact=True, intermediates=recorded)
    names = {i.name for i in intermediates(op, 2)}
    assert names <= set(recorded) and all(n.split("@")[0] in names for n in recorded)
    if op in ("rope_kv_write", "fused_rope_decode_attention", "prefill_attention"):
        assert torch.equal(recorded["k_rope"], outs["k_cache"]) and torch.equal(recorded["v"], outs["v_cache"])
    if op != "rope_kv_write" and op != "decode_layers":
        assert torch.equal(recorded["attn"], outs["out"])
        if "attn@exact" in recorded:
            assert torch.equal(recorded["attn@exact"], outs["out@exact"])
    if op == "decode_layers":
        assert torch.equal(recorded["layers.1.hidden"], outs["next_hidden"])
        assert torch.equal(recorded["layers.1.k_rope"], outs["k_cache"][1])


def test_golden_cache_keeps_them_beside_the_outputs_and_checks_each_digest(tmp_path):
    c = case("reference")
    ci = on_host(generate(c, torch.device("cpu")))
    cache = GoldenCache(tmp_path)
    path, key, hit = cache.ensure(c.op, ci.spec, lambda: ci.args)
    source = GoldenCache(None).intermediates(c.op, ci.spec, path)
    golden, exact = source.get("attn")
    assert golden.shape == (4, 4, 32) and exact is not None and source.get("nope") is None
    # a second ensure is a hit; a damaged intermediates file is recomputed
    assert cache.ensure(c.op, ci.spec, lambda: ci.args)[2]
    side = cache.intermediates_path(c.op, key)
    side.write_bytes(b"damaged")
    fresh = GoldenCache(tmp_path)
    assert not fresh.ensure(c.op, ci.spec, lambda: ci.args)[2]
    assert GoldenCache(None).intermediates(c.op, ci.spec, path).get("v") is not None


def test_a_tampered_intermediate_fails_its_digest(tmp_path):
    from safetensors.torch import load_file, save_file
    from safetensors import safe_open
    c = case("reference")
    ci = on_host(generate(c, torch.device("cpu")))
    cache = GoldenCache(tmp_path)
    path, key, _ = cache.ensure(c.op, ci.spec, lambda: ci.args)
    side = cache.intermediates_path(c.op, key)
    with safe_open(str(side), framework="pt") as f:
        metadata = f.metadata()
    tensors = load_file(str(side))
    tensors["v"] = tensors["v"] + 1
    save_file(tensors, str(side), metadata=metadata)
    with pytest.raises(GoldenStoreError, match="intermediate v does not match its digest"):
        GoldenCache(None).intermediates(c.op, ci.spec, path).get("v")


# -- kernels nobody here wrote: one bug, one intermediate ---------------------------------------

@pytest.mark.parametrize("fn, first, verdicts_expected", [
    ("bug_q_norm", "q_norm", {"q_rope": "inherited", "attn": "inherited", "k_rope": "ok"}),
    ("bug_k_rope", "k_rope", {"q_rope": "ok", "v": "ok", "attn": "inherited"}),
    ("bug_v", "v", {"k_rope": "ok", "attn": "inherited"}),
    ("bug_attn", "attn", {"q_rope": "ok", "k_rope": "ok", "v": "ok"}),
    ("partial_bug_attn", "attn", {"q_rope": "missing", "v": "ok"}),
    ("files_bug_k_rope", "k_rope", {"q_rope": "ok", "attn": "inherited"}),
])
def test_outside_kernel_with_one_bug_names_its_intermediate(run, fn, first, verdicts_expected):
    for mode in ("always", "on-failure") if fn == "bug_k_rope" else ("always",):
        reply = run(case(f"outside.dumping:{fn}"), mode)
        assert reply.outcome is Outcome.MISMATCH
        assert first_bad_of(reply) == first
        assert f"first bad intermediate {first} (" in reply.summary
        got = verdict_of(reply)
        assert got[first] == "bad" and {k: got[k] for k in verdicts_expected} == verdicts_expected


def test_outside_decode_layers_names_the_layer(run):
    reply = run(case("outside.dumping:bug_layer1_attn", "decode_layers", layers=2), "on-failure")
    assert reply.outcome is Outcome.MISMATCH and first_bad_of(reply) == "layers.1.attn"
    assert reply.metrics["intermediates"]["first_bad_layer"] == 1
    got = verdict_of(reply)
    assert all(v == "ok" for n, v in got.items() if n.startswith("layers.0."))
    assert got["layers.1.hidden"] == "inherited" and got["final_norm"] == "inherited"
    assert "first bad intermediate layers.1.attn in layer 1" in reply.summary


@pytest.mark.parametrize("kernel, op", [("outside.dumping:fused_rope_decode_attention", "fused_rope_decode_attention"),
                                        ("outside.dumping:files_fused_rope_decode_attention",
                                         "fused_rope_decode_attention"),
                                        ("outside.dumping:decode_layers", "decode_layers")])
def test_correct_outside_kernels_pass_with_every_intermediate_ok(run, kernel, op):
    reply = run(case(kernel, op, layers=2), "always")
    assert reply.outcome is Outcome.PASS, reply.summary
    got = verdict_of(reply)
    assert set(got.values()) <= {"ok", "bit-exact"} and len(got) == len(intermediates(op, 2))
    assert reply.metrics["intermediates"]["problems"] == []


def test_a_bug_after_the_last_intermediate_says_so(run):
    reply = run(case("outside.dumping:bug_store"))
    assert reply.outcome is Outcome.MISMATCH and first_bad_of(reply) is None
    assert ("every dumped intermediate ok (last: attn): the error is after it (the store, the cast, "
            "the buffer written)") in reply.summary


def test_a_wrong_intermediate_under_passing_outputs_is_a_note(run):
    reply = run(case("outside.dumping:cancels"))
    assert reply.outcome is Outcome.PASS and first_bad_of(reply) == "q_norm"
    assert any(n.startswith("outputs pass, but first bad intermediate q_norm") for n in
               reply.metrics["intermediates"]["notes"])


@pytest.mark.parametrize("fn, line", [
    ("bad_dump_unknown", "dump('k_rotated'): unknown intermediate for fused_rope_decode_attention; "
                         "valid: q_norm, k_norm, q_rope, k_rope, v, attn"),
    ("bad_dump_size", "intermediate k_rope: shape (4, 2, 31), the contract says (4, 2, 32)"),
    ("bad_dump_list", "dump('v'): got list, not a tensor"),
    ("bad_dump_twice", "intermediate v dumped twice"),
])
def test_a_dump_the_abi_refuses_is_named_but_never_changes_the_outcome(run, fn, line):
    """The outputs are what the contract judges: a refused dump is listed, the case still passes."""
    reply = run(case(f"outside.dumping:{fn}"))
    assert reply.outcome is Outcome.PASS and reply.summary == "all outputs, caches and guard bands match"
    data = reply.metrics["intermediates"]
    assert data["problems"] == [line]
    assert any(line in n for n in data["notes"]), data["notes"]


def test_a_dump_of_the_right_size_in_another_shape_is_compared_after_a_reshape(run):
    """k_rope dumped transposed has the contract's element count: reshaped, compared (and here
    wrong, since a transpose is not a reshape), the row saying how it was read."""
    reply = run(case("outside.dumping:bad_dump_shape"))
    row = next(r for r in reply.metrics["intermediates"]["rows"] if r["name"] == "k_rope")
    assert row["verdict"] == "bad" and "dumped as (2, 4, 32), compared as (4, 2, 32)" in row["metrics"]["note"]
    assert reply.outcome is Outcome.PASS and reply.metrics["intermediates"]["problems"] == []


def test_a_nan_intermediate_is_bad_with_its_count(run):
    reply = run(case("outside.dumping:bad_dump_nan"))
    rows = {r["name"]: r for r in reply.metrics["intermediates"]["rows"]}
    assert rows["q_norm"]["verdict"] == "bad" and rows["q_norm"]["metrics"]["note"] == "512 NaN/Inf"


def test_off_dumps_nothing_and_on_failure_only_reruns_a_failure(run):
    assert "intermediates" not in run(case("outside.dumping:bug_k_rope"), "off").metrics
    assert "intermediates" not in run(case("outside.dumping:fused_rope_decode_attention"), "on-failure").metrics
    rerun = run(case("outside.dumping:bug_k_rope"), "on-failure").metrics["intermediates"]["rerun"]
    assert rerun["outcome"] == "MISMATCH"


# -- the shipped kernels --------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["rope_kv_write", "fused_rope_decode_attention", "prefill_attention",
                                "paged_decode_attention", "decode_layers"])
def test_reference_kernel_dumps_every_intermediate_and_all_are_ok(run, op):
    reply = run(case("reference", op, layers=2))
    assert reply.outcome is Outcome.PASS, reply.summary
    got = verdict_of(reply)
    assert len(got) == len(intermediates(op, 2)) and set(got.values()) <= {"ok", "bit-exact"}, got
    if op != "decode_layers" and op != "paged_decode_attention":
        assert got["v"] == "bit-exact"


@pytest.mark.parametrize("kernel, op, first, also", [
    ("skip_rope", "fused_rope_decode_attention", "q_rope", {"q_norm": "bit-exact", "v": "bit-exact"}),
    ("harness.kernels.mutants.gptj_rope", "fused_rope_decode_attention", "q_rope", {"k_rope": "bad"}),
    ("skip_rope", "prefill_attention", "q_rope", {"k_rope": "bad", "attn": "inherited"}),
    ("stale_kv", "fused_rope_decode_attention", "attn", {"k_rope": "bit-exact", "v": "bit-exact"}),
    ("stale_kv", "decode_layers", "layers.0.attn", {"layers.0.k_rope": "ok", "layers.0.v": "ok"}),
    ("harness.kernels.mutants.off_by_one_page", "fused_rope_decode_attention", "attn", {"v": "bit-exact"}),
    ("returns_query", "fused_rope_decode_attention", None, {"v": "bit-exact", "attn": "missing"}),
])
def test_each_mutant_names_the_intermediate_its_bug_is_in(run, kernel, op, first, also):
    reply = run(case(kernel, op, slots="arange"), "on-failure")
    assert not reply.outcome.passed
    assert first_bad_of(reply) == first
    got = verdict_of(reply)
    assert {k: got[k] for k in also} == also
    if first is None:
        assert "the error is after it" in reply.summary


def test_result_json_carries_the_table():
    metrics = {"intermediates": {"first_bad_intermediate": "k_rope", "rows": [
        {"name": "k_rope", "verdict": "bad", "layer": None, "metrics": {"cosine": 0.5}}]}}
    data = Result("c", Outcome.MISMATCH, metrics=metrics).to_json()
    assert data["first_bad_intermediate"] == "k_rope"
    assert data["intermediates"] == [{"name": "k_rope", "verdict": "bad", "metrics": {"cosine": 0.5}}]
    plain = Result("c", Outcome.PASS).to_json()
    assert plain["first_bad_intermediate"] is None and plain["intermediates"] == []
    json.dumps(data)


# -- memory: compare and drop ------------------------------------------------------------------------

def test_the_collector_keeps_no_dumped_tensor():
    c = case("reference", "decode_layers", layers=1)
    ci = on_host(generate(c, torch.device("cpu")))
    recorded: dict[str, torch.Tensor] = {}
    goldens.compute(c.op, ci.args, exact=True, intermediates=recorded)
    from harness.goldens.cache import IntermediateGoldens
    collector = dumps.Collector(c, ci, IntermediateGoldens(recorded))
    t = recorded["layers.0.hidden"].clone()
    alive = weakref.ref(t)
    collector("layers.0.hidden", t)
    del t
    gc.collect()
    assert alive() is None and collector.measured["layers.0.hidden"].passed


def _open_paths() -> set[str]:
    fds = Path("/proc/self/fd")
    return {str(p.resolve()) for p in fds.iterdir() if p.resolve().is_file()} if fds.is_dir() else set()


def test_a_case_leaves_its_golden_intermediates_file_closed_and_unmapped(tmp_path):
    # read as the device worker reads it: the golden process's file, plain reads, closed at the end
    from harness.worker.protocol import GoldenRef
    c = case("reference", "decode_layers", layers=2)
    ci = generate(c, torch.device("cpu"))
    cache = GoldenCache(tmp_path)
    path, key, _ = cache.ensure(c.op, ci.spec, lambda: ci.args)
    side = str(cache.intermediates_path(c.op, key).resolve())
    source = GoldenCache(None).intermediates(c.op, ci.spec, path)
    assert source.get("layers.1.attn") is not None
    # open while the case runs, and nothing of it mapped (a mapping kept every page read resident)
    assert side in _open_paths() and side not in Path("/proc/self/maps").read_text()
    source.close()
    assert side not in _open_paths()
    device = Device("cpu")
    reply = execute_case(c, device, backend(device), GoldenCache(None), KernelLoader(),
                         golden=GoldenRef(str(path), key, True, 0.0, 0), intermediates="always")
    assert reply.outcome is Outcome.PASS and reply.metrics["intermediates"]["dumped"] == 15
    assert side not in _open_paths() and side not in Path("/proc/self/maps").read_text()


@pytest.mark.parametrize("kernel", ["torch-sdpa", "torch-flex"])
def test_adapted_kernels_dump_their_intermediates_as_files(run, kernel):
    reply = run(case(kernel), "always")
    assert reply.outcome is Outcome.PASS, reply.summary
    got = verdict_of(reply)
    assert set(got.values()) <= {"ok", "bit-exact"} and len(got) == 6, got


def test_a_rerun_that_passes_says_the_failure_did_not_repeat(run):
    reply = run(case("outside.dumping:flaky_first_call"), "on-failure")
    found = reply.metrics["intermediates"]
    assert reply.outcome is Outcome.MISMATCH and found["rerun"]["outcome"] == "PASS"
    assert "the rerun with dumps passed: the failure did not repeat (flaky)" in found["notes"]
    assert reply.summary.endswith("; the rerun with dumps passed (flaky)")
