"""ratio_allclose: semantics at the boundary, the chunked walk against a naive
reference, localisation, and the pinned report format."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from harness.worker.ratio_allclose import Comparison, ratio_allclose

NAN, INF = float("nan"), float("inf")


# --------------------------------------------------------------------------
# A naive whole-tensor reference, written the obvious way
# --------------------------------------------------------------------------

def naive(actual, expected, *, atol, rtol, max_error_ratio, rows=None, axes=None):
    ct = torch.float64 if torch.float64 in (actual.dtype, expected.dtype) else torch.float32
    a, e = actual.to(ct), expected.to(ct)
    sel = torch.ones(a.shape, dtype=torch.bool)
    if rows is not None:
        sel[~rows] = False
    fin = torch.isfinite(a) & torch.isfinite(e)
    d = (a - e).abs()
    bad = ((d > atol + rtol * e.abs()) | ~fin) & sel
    numel = int(sel.sum())

    def unravel(q):
        return tuple(int(i) for i in torch.unravel_index(torch.tensor(q), a.shape))

    pair = (sel & fin).flatten()
    out = {"numel": numel, "bad_count": int(bad.sum())}
    out["nonfinite_actual"] = int((~torch.isfinite(a) & sel).sum())
    out["nonfinite_expected"] = int((~torch.isfinite(e) & sel).sum())
    out["allowed_bad"] = round(max_error_ratio * numel)
    out["passed"] = (out["nonfinite_actual"] + out["nonfinite_expected"] == 0
                     and out["bad_count"] <= out["allowed_bad"])
    if pair.any():
        dm = torch.where(pair, d.flatten(), -1.0)
        q = int(torch.argmax(dm))
        out["max_abs"] = (unravel(q), float(dm[q]))
        rel = d.flatten() / e.abs().flatten()
        rel = torch.where(torch.isnan(rel), 0.0, rel)
        rel = torch.where(pair, rel, -1.0)
        q = int(torch.argmax(rel))
        out["max_rel"] = (unravel(q), float(rel[q]))
    else:
        out["max_abs"] = out["max_rel"] = ((), NAN)
    flat_bad = bad.flatten().nonzero().flatten().tolist()
    out["first_bad"] = tuple(unravel(q) for q in flat_bad[:5])
    key = torch.where(torch.isnan(d), INF, d).flatten()
    ranked = sorted(flat_bad, key=lambda q: (-float(key[q]), q))[:5]
    out["worst"] = tuple((unravel(q), float(a.flatten()[q]), float(e.flatten()[q]),
                          float(d.flatten()[q])) for q in ranked)
    loc = {}
    for dim, name in enumerate(axes or ()):
        if name is None:
            continue
        others = [i for i in range(a.dim()) if i != dim]
        nb = bad.sum(others).double() if others else bad.double()
        nc = sel.sum(others).double() if others else sel.double()
        loc[name] = tuple((nb / nc).tolist())
    out["localisation"] = loc
    return out


def same_floats(x, y):
    return len(x) == len(y) and all((math.isnan(p) and math.isnan(q)) or p == q
                                    for p, q in zip(x, y))


def same_value(p, q):
    return (math.isnan(p) and math.isnan(q)) or p == q


def assert_matches_naive(c: Comparison, ref: dict):
    for field in ("numel", "bad_count", "allowed_bad", "passed",
                  "nonfinite_actual", "nonfinite_expected", "first_bad"):
        assert getattr(c, field) == ref[field], field
    assert c.max_abs_index == ref["max_abs"][0]
    assert same_value(c.max_abs_error, ref["max_abs"][1])
    assert c.max_rel_index == ref["max_rel"][0]
    assert same_value(c.max_rel_error, ref["max_rel"][1])
    assert len(c.worst) == len(ref["worst"])
    for got, want in zip(c.worst, ref["worst"]):
        assert got[0] == want[0]
        assert all(same_value(p, q) for p, q in zip(got[1:], want[1:]))
    assert c.localisation.keys() == ref["localisation"].keys()
    for name, ratios in ref["localisation"].items():
        assert same_floats(c.localisation[name], ratios), name


# --------------------------------------------------------------------------
# Boundary semantics
# --------------------------------------------------------------------------

def _up(x):
    return torch.nextafter(torch.tensor(x), torch.tensor(INF)).item()


def _down(x):
    return torch.nextafter(torch.tensor(x), torch.tensor(-INF)).item()


def test_bad_iff_strictly_above_atol_plus_rtol_times_expected():
    # atol 0.5 + rtol 0.125 * |4| = 1.0; every difference below is exact in fp32.
    expected = torch.full((6,), 4.0)
    actual = torch.tensor([3.0, 5.0, _up(3.0), _down(5.0), _down(3.0), _up(5.0)])
    c = ratio_allclose(actual, expected, atol=0.5, rtol=0.125, max_error_ratio=0.0)
    assert c.bad_count == 2
    assert c.first_bad == ((4,), (5,))
    assert not c.passed


def test_tolerance_scales_with_expected_not_actual():
    # |e| = 0 gives tolerance atol only, whatever |a| is.
    c = ratio_allclose(torch.tensor([0.75]), torch.tensor([0.0]),
                       atol=0.5, rtol=1.0, max_error_ratio=0.0)
    assert c.bad_count == 1
    c = ratio_allclose(torch.tensor([0.0]), torch.tensor([0.75]),
                       atol=0.5, rtol=1.0, max_error_ratio=0.0)
    assert c.bad_count == 0


@pytest.mark.parametrize("ratio, bad, passed", [
    (0.375, 2, True),    # round(1.5) == 2: floor would fail this
    (0.375, 3, False),
    (0.625, 2, True),    # round(2.5) == 2: Python rounds half to even
    (0.625, 3, False),
    (0.0, 0, True),
    (0.0, 1, False),
    (1.0, 4, True),
])
def test_pass_iff_bad_at_most_round_ratio_times_numel(ratio, bad, passed):
    expected = torch.zeros(4)
    actual = torch.zeros(4)
    actual[:bad] = 1.0
    c = ratio_allclose(actual, expected, atol=0.0, rtol=0.0, max_error_ratio=ratio)
    assert c.bad_count == bad
    assert c.allowed_bad == round(ratio * 4)
    assert c.passed is passed
    assert c.bad_ratio == bad / 4


@pytest.mark.parametrize("side", ["actual", "expected"])
@pytest.mark.parametrize("value", [NAN, INF, -INF])
def test_nonfinite_on_either_side_fails_even_with_ratio_one(side, value):
    actual, expected = torch.ones(2, 8), torch.ones(2, 8)
    (actual if side == "actual" else expected)[1, 3] = value
    c = ratio_allclose(actual, expected, atol=1e9, rtol=1e9, max_error_ratio=1.0)
    assert not c.passed
    assert c.outcome.value == "NONFINITE"
    assert c.bad_count == 1
    assert c.first_bad == ((1, 3),)
    assert (c.nonfinite_actual, c.nonfinite_expected) == ((1, 0) if side == "actual" else (0, 1))
    # The greatest differences are over finite pairs only.
    assert c.max_abs_error == 0.0 and c.max_abs_index == (0, 0)
    assert c.worst[0][0] == (1, 3)


def test_matching_infinities_are_still_nonfinite():
    t = torch.tensor([INF, 1.0])
    c = ratio_allclose(t, t.clone(), atol=0.0, rtol=0.0, max_error_ratio=1.0)
    assert not c.passed and c.nonfinite_actual == 1 and c.nonfinite_expected == 1


def test_nan_outranks_finite_differences_in_worst():
    actual = torch.tensor([0.0, 5.0, NAN, 9.0])
    c = ratio_allclose(actual, torch.zeros(4), atol=0.0, rtol=0.0, max_error_ratio=1.0)
    assert [w[0] for w in c.worst] == [(2,), (3,), (1,)]
    assert math.isnan(c.worst[0][3])
    assert c.max_abs_error == 9.0 and c.max_abs_index == (3,)


def test_relative_error_conventions():
    actual = torch.tensor([0.0, 1.0, 3.0])
    expected = torch.tensor([0.0, 0.0, 2.0])
    c = ratio_allclose(actual, expected, atol=10.0, rtol=0.0, max_error_ratio=0.0)
    assert c.passed                                 # relative error decides nothing
    assert c.max_rel_error == INF and c.max_rel_index == (1,)
    c = ratio_allclose(actual[[0, 2]], expected[[0, 2]], atol=10.0, rtol=0.0,
                       max_error_ratio=0.0)
    assert c.max_rel_error == 0.5 and c.max_rel_index == (1,)


def test_identical_inputs():
    t = torch.zeros(3, 5)
    c = ratio_allclose(t, t.clone(), atol=0.0, rtol=0.0, max_error_ratio=0.0, axes=("a", "b"))
    assert c.passed and c.bad_count == 0 and c.worst == () and c.first_bad == ()
    assert c.max_abs_error == 0.0 and c.max_abs_index == (0, 0)
    assert c.max_rel_error == 0.0 and c.max_rel_index == (0, 0)
    assert c.localisation == {"a": (0.0,) * 3, "b": (0.0,) * 5}


# --------------------------------------------------------------------------
# rows=
# --------------------------------------------------------------------------

def test_ignored_rows_are_not_compared_at_all():
    expected = torch.zeros(6, 4)
    actual = torch.zeros(6, 4)
    actual[1] = NAN                   # ignored
    actual[4] = 1.0                   # ignored
    actual[2, 3] = 1.0                # compared, bad
    rows = torch.tensor([True, False, True, True, False, True])
    c = ratio_allclose(actual, expected, atol=0.0, rtol=0.0, max_error_ratio=0.25,
                       rows=rows, axes=("tok", None))
    assert c.passed
    assert (c.numel, c.bad_count, c.allowed_bad) == (16, 1, 4)
    assert c.nonfinite_actual == 0
    assert c.first_bad == ((2, 3),)   # the full tensor's index
    assert c.max_abs_index == (2, 3)
    assert same_floats(c.localisation["tok"], (0.0, NAN, 0.25, 0.0, NAN, 0.0))
    assert "    tok: 1 of 4 bad: [2] 25.0%; 2 not compared" in c.report()


def test_rows_with_nothing_selected():
    c = ratio_allclose(torch.full((3, 2), NAN), torch.zeros(3, 2), atol=0.0, rtol=0.0,
                       max_error_ratio=0.0, rows=torch.zeros(3, dtype=torch.bool))
    assert c.passed and c.numel == 0 and math.isnan(c.max_abs_error)


def test_rows_must_be_a_bool_mask():
    with pytest.raises(ValueError, match="bool mask"):
        ratio_allclose(torch.zeros(3, 2), torch.zeros(3, 2), atol=0.0, rtol=0.0,
                       max_error_ratio=0.0, rows=torch.tensor([0, 2]))
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        ratio_allclose(torch.zeros(3, 2), torch.zeros(3, 2), atol=0.0, rtol=0.0,
                       max_error_ratio=0.0, rows=torch.tensor([True, False]))


# --------------------------------------------------------------------------
# Localisation
# --------------------------------------------------------------------------

AXES = ("batch", "head", None)


def test_one_corrupted_head_is_localised():
    expected = torch.randn(4, 8, 16, generator=torch.Generator().manual_seed(1))
    actual = expected.clone()
    actual[:, 5] += 1.0
    c = ratio_allclose(actual, expected, atol=1e-3, rtol=1e-3, max_error_ratio=0.01,
                       name="out", axes=AXES, chunk_elems=64)
    assert c.localisation["head"] == (0.0,) * 5 + (1.0,) + (0.0,) * 2
    assert c.localisation["batch"] == (0.125,) * 4
    text = c.report().splitlines()
    assert text[-2:] == ["    batch: all 4 indices bad (min 12.5%, max 12.5%)",
                         "    head: 1 of 8 bad: [5] 100.0%"]


def test_everything_corrupted_reads_as_all_bad():
    expected = torch.zeros(4, 8, 16)
    c = ratio_allclose(expected + 1.0, expected, atol=1e-3, rtol=1e-3, max_error_ratio=0.01,
                       name="out", axes=AXES, chunk_elems=100)
    assert c.localisation == {"batch": (1.0,) * 4, "head": (1.0,) * 8}
    assert c.report().splitlines()[-2:] == [
        "    batch: all 4 indices bad (min 100.0%, max 100.0%)",
        "    head: all 8 indices bad (min 100.0%, max 100.0%)"]


def test_one_page_through_groups():
    # A cache as [pages * page_size, kv_heads, head_dim]; only the last page is wrong.
    page_size, pages = 4, 5
    expected = torch.randn(pages * page_size, 2, 8, generator=torch.Generator().manual_seed(2))
    actual = expected.clone()
    actual[16:20] = 0.0
    labels = torch.arange(pages * page_size) // page_size
    c = ratio_allclose(actual, expected, atol=1e-3, rtol=1e-3, max_error_ratio=0.0,
                       name="k_cache rows", axes=(None, "kv_head", None),
                       groups={"page": (0, labels)}, chunk_elems=24)
    assert c.localisation["page"] == (0.0, 0.0, 0.0, 0.0, 1.0)
    assert c.report().splitlines()[-1] == "    page: 1 of 5 bad: [4] 100.0%"


def test_groups_with_unlabelled_indices_and_rows():
    expected = torch.zeros(6, 3)
    actual = expected.clone()
    actual[5] = 1.0
    labels = [0, 0, 1, 1, -1, 2]     # index 4 in no group
    rows = torch.tensor([True, True, False, False, True, True])
    c = ratio_allclose(actual, expected, atol=0.0, rtol=0.0, max_error_ratio=0.0,
                       groups={"seq": (0, labels), "col": (-1, [1, 0, 1])}, rows=rows)
    assert same_floats(c.localisation["seq"], (0.0, NAN, 1.0))
    assert c.localisation["col"] == (0.25, 0.25)


def test_group_and_axis_names_must_not_clash():
    with pytest.raises(ValueError, match="already used"):
        ratio_allclose(torch.zeros(2, 2), torch.zeros(2, 2), atol=0.0, rtol=0.0,
                       max_error_ratio=0.0, axes=("a", None), groups={"a": (1, [0, 1])})


@pytest.mark.parametrize("axes, message", [
    (("a",), "axes has 1 entries"),
    (("a", "a"), "used twice"),
    (("a", 3), "non-empty str"),
])
def test_bad_axes_are_rejected(axes, message):
    with pytest.raises(ValueError, match=message):
        ratio_allclose(torch.zeros(2, 2), torch.zeros(2, 2), atol=0.0, rtol=0.0,
                       max_error_ratio=0.0, axes=axes)


def test_bad_group_labels_are_rejected():
    with pytest.raises(ValueError, match=r"groups\['p'\]: labels must have shape \(2,\)"):
        ratio_allclose(torch.zeros(2, 2), torch.zeros(2, 2), atol=0.0, rtol=0.0,
                       max_error_ratio=0.0, groups={"p": (0, [0, 1, 2])})


# --------------------------------------------------------------------------
# Dtypes
# --------------------------------------------------------------------------

def test_bf16_actual_against_fp32_expected():
    expected = torch.randn(8, 33, generator=torch.Generator().manual_seed(3))
    actual = expected.to(torch.bfloat16)
    c = ratio_allclose(actual, expected, atol=2.0 ** -8, rtol=2.0 ** -8, max_error_ratio=0.0)
    assert c.passed and c.bad_count == 0
    # bf16 keeps 8 significant bits: the rounding error is below 2^-8 * |e|.
    assert c.max_rel_error <= 2.0 ** -8
    c = ratio_allclose(actual, expected, atol=0.0, rtol=2.0 ** -12, max_error_ratio=0.0,
                       chunk_elems=50)
    assert_matches_naive(c, naive(actual, expected, atol=0.0, rtol=2.0 ** -12,
                                  max_error_ratio=0.0))
    # Reported values are the exact widened bf16 values.
    i = c.worst[0][0]
    assert c.worst[0][1] == actual[i].float().item()
    assert c.worst[0][2] == expected[i].item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_on_both_sides(dtype):
    g = torch.Generator().manual_seed(4)
    expected = torch.randn(5, 40, generator=g).to(dtype)
    actual = (expected.float() + 0.01 * torch.randn(5, 40, generator=g)).to(dtype)
    kw = dict(atol=1e-2, rtol=1e-2, max_error_ratio=0.05)
    c = ratio_allclose(actual, expected, chunk_elems=37, **kw)
    assert_matches_naive(c, naive(actual, expected, **kw))


def test_fp64_path_sees_what_fp32_cannot():
    expected = torch.ones(4, dtype=torch.float64)
    actual = expected + torch.tensor([0.0, 1e-12, 0.0, 0.0], dtype=torch.float64)
    c = ratio_allclose(actual, expected, atol=0.0, rtol=0.0, max_error_ratio=0.0)
    assert c.bad_count == 1 and c.first_bad == ((1,),)
    assert c.max_abs_error == pytest.approx(1e-12, rel=1e-3)
    # Mixed: an fp64 golden widens the fp32 actual, it does not narrow the golden.
    c = ratio_allclose(torch.ones(4), actual, atol=0.0, rtol=0.0, max_error_ratio=0.0)
    assert c.bad_count == 1
    c = ratio_allclose(torch.ones(4), actual.float(), atol=0.0, rtol=0.0, max_error_ratio=0.0)
    assert c.bad_count == 0


# --------------------------------------------------------------------------
# The chunked walk against the naive reference
# --------------------------------------------------------------------------

SHAPES = [(7,), (5, 13), (3, 4, 11), (2, 3, 5, 7)]
CHUNKS = [1, 6, 13, 60, 1 << 18]


def _corrupt(shape, seed, density):
    g = torch.Generator().manual_seed(seed)
    expected = torch.randn(shape, generator=g)
    actual = expected + 1e-4 * torch.randn(shape, generator=g)
    hit = torch.rand(shape, generator=g) < density
    actual[hit] += torch.randn(shape, generator=g)[hit]
    flat = actual.view(-1)
    if flat.numel() > 8:
        flat[3] = 2.0 + expected.view(-1)[3]         # ties in |diff| with index 5
        flat[5] = 2.0 + expected.view(-1)[5]
        if seed % 3 == 0:
            flat[-2] = NAN
        if seed % 3 == 1:
            expected.view(-1)[1] = -INF
    return actual, expected


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("density", [0.02, 0.6])
def test_chunked_walk_matches_naive(shape, chunk, density):
    seed = len(shape) * 7 + chunk % 5
    actual, expected = _corrupt(shape, seed, density)
    axes = tuple(f"d{i}" for i in range(len(shape)))
    rows = (torch.arange(shape[0]) % 3 != 1) if shape[0] > 2 else None
    kw = dict(atol=1e-3, rtol=1e-3, max_error_ratio=0.1)
    c = ratio_allclose(actual, expected, axes=axes, rows=rows, chunk_elems=chunk, **kw)
    assert_matches_naive(c, naive(actual, expected, rows=rows, axes=axes, **kw))


@pytest.mark.parametrize("chunk", [1, 10, 77, 1 << 18])
def test_non_contiguous_inputs(chunk):
    actual, expected = _corrupt((6, 5, 9), 11, 0.1)
    actual[1, 2, 3] = NAN
    expected[4, 0, 8] = INF
    a, e = actual.transpose(0, 2), expected.transpose(0, 2)
    axes = ("x", None, "z")
    kw = dict(atol=1e-3, rtol=1e-3, max_error_ratio=0.1)
    c = ratio_allclose(a, e, axes=axes, chunk_elems=chunk, **kw)
    assert_matches_naive(c, naive(a.contiguous(), e.contiguous(), axes=axes, **kw))
    c = ratio_allclose(a[::2], e[::2], axes=axes, chunk_elems=chunk, **kw)
    assert_matches_naive(c, naive(a[::2].contiguous(), e[::2].contiguous(), axes=axes, **kw))


def test_chunking_does_not_change_the_result():
    actual, expected = _corrupt((4, 6, 10), 5, 0.3)
    kw = dict(atol=1e-3, rtol=1e-3, max_error_ratio=0.1, axes=("a", "b", "c"),
              groups={"g": (1, [0, 1, 1, 2, 2, 2])})
    results = [ratio_allclose(actual, expected, chunk_elems=n, **kw) for n in (1, 9, 10, 239)]
    metrics = [json.dumps(c.to_metrics()) for c in results]
    assert all(m == metrics[0] for m in metrics)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("chunk", [1, 13, 1 << 18])
def test_a_clean_comparison_matches_naive(shape, chunk):
    # nothing bad: no counter is made, the localisation is 0.0 where compared, NaN where not
    g = torch.Generator().manual_seed(len(shape))
    expected = torch.randn(shape, generator=g)
    actual = expected + 1e-5 * torch.randn(shape, generator=g)
    axes = tuple(f"d{i}" for i in range(len(shape)))
    rows = (torch.arange(shape[0]) % 3 != 1) if shape[0] > 2 else None
    kw = dict(atol=1e-3, rtol=1e-3, max_error_ratio=0.0)
    c = ratio_allclose(actual, expected, axes=axes, rows=rows, chunk_elems=chunk, **kw)
    assert c.passed and c.bad_count == 0 and c.map is None
    assert_matches_naive(c, naive(actual, expected, rows=rows, axes=axes, **kw))


def test_a_clean_comparison_localises_groups_and_unselected_rows():
    t = torch.zeros(6, 3)
    rows = torch.tensor([True, True, False, False, True, True])
    c = ratio_allclose(t, t.clone(), atol=0.0, rtol=0.0, max_error_ratio=0.0, axes=("tok", None), rows=rows,
                       groups={"seq": (0, [0, 0, 1, 1, -1, 2]), "col": (-1, [1, 0, 1])})
    assert same_floats(c.localisation["tok"], (0.0, 0.0, NAN, NAN, 0.0, 0.0))
    assert same_floats(c.localisation["seq"], (0.0, NAN, 0.0))
    assert c.localisation["col"] == (0.0, 0.0)


@pytest.mark.parametrize("where", [(3, 5, 4), (0, 0, 0)])
def test_counters_first_made_in_any_chunk_count_the_same(where):
    # the counters are made by the first chunk with a bad element: the first chunk or the last
    expected = torch.zeros(4, 6, 5)
    actual = expected.clone()
    actual[where] = 1.0
    actual[2, 1, 3] = NAN
    kw = dict(atol=1e-3, rtol=1e-3, max_error_ratio=0.1, axes=("a", "b", "c"),
              groups={"g": (1, [0, 0, 1, 1, 2, 2])})
    results = [ratio_allclose(actual, expected, chunk_elems=n, **kw) for n in (1, 7, 30, 1 << 18)]
    metrics = [json.dumps(c.to_metrics()) for c in results]
    assert all(m == metrics[0] for m in metrics)
    c = results[0]
    assert c.bad_count == 2 and c.map is not None
    groups = [0.0, 0.0, 0.0]
    groups[0] += 1 / 40                          # the NaN at head 1
    groups[where[1] // 2] += 1 / 40
    assert c.localisation["g"] == tuple(groups)
    assert c.localisation["a"][where[0]] == 1 / 30 and c.localisation["a"][2] == 1 / 30


def test_inputs_that_require_grad():
    actual = torch.zeros(3, requires_grad=True)
    c = ratio_allclose(actual, torch.ones(3), atol=0.0, rtol=0.0, max_error_ratio=0.0)
    assert c.bad_count == 3


def test_caller_thread_setting_is_restored():
    before = torch.get_num_threads()
    ratio_allclose(torch.zeros(3), torch.ones(3), atol=0.0, rtol=0.0, max_error_ratio=0.0)
    assert torch.get_num_threads() == before


def test_zero_dim_and_empty_tensors():
    c = ratio_allclose(torch.tensor(1.0), torch.tensor(2.0), atol=0.0, rtol=0.0,
                       max_error_ratio=0.0)
    assert (c.bad_count, c.first_bad, c.max_abs_index) == (1, ((),), ())
    assert c.worst == (((), 1.0, 2.0, 1.0),)
    c = ratio_allclose(torch.zeros(0, 3), torch.zeros(0, 3), atol=0.0, rtol=0.0,
                       max_error_ratio=0.0, axes=("a", "b"))
    assert c.passed and c.numel == 0 and c.bad_ratio == 0.0
    assert "none (no finite pairs compared)" in c.report()
    c = ratio_allclose(torch.zeros(2, 0), torch.zeros(2, 0), atol=0.0, rtol=0.0,
                       max_error_ratio=0.0, axes=("a", "b"))
    assert c.localisation["b"] == ()
    assert same_floats(c.localisation["a"], (NAN, NAN))      # nothing compared there


# --------------------------------------------------------------------------
# Input errors and result shape
# --------------------------------------------------------------------------

def test_shape_mismatch_is_not_my_input():
    with pytest.raises(ValueError, match=r"actual \(2, 3\) vs expected \(3, 2\)"):
        ratio_allclose(torch.zeros(2, 3), torch.zeros(3, 2), atol=0.0, rtol=0.0,
                       max_error_ratio=0.0)


@pytest.mark.parametrize("kw, message", [
    (dict(atol=-1.0), "atol must be finite and >= 0"),
    (dict(rtol=NAN), "rtol must be finite and >= 0"),
    (dict(max_error_ratio=1.5), r"max_error_ratio must be in \[0, 1\]"),
    (dict(chunk_elems=0), "chunk_elems"),
])
def test_bad_tolerances_are_rejected(kw, message):
    args = dict(atol=0.0, rtol=0.0, max_error_ratio=0.0) | kw
    with pytest.raises(ValueError, match=message):
        ratio_allclose(torch.zeros(2), torch.zeros(2), **args)


def test_integer_tensors_are_rejected():
    with pytest.raises(ValueError, match="floating dtype"):
        ratio_allclose(torch.zeros(2, dtype=torch.int32), torch.zeros(2), atol=0.0, rtol=0.0,
                       max_error_ratio=0.0)


def test_indices_are_int_tuples_of_the_full_tensor():
    expected = torch.zeros(3, 4, 5)
    actual = expected.clone()
    actual[2, 3, 4] = 1.0
    rows = torch.tensor([False, False, True])
    c = ratio_allclose(actual, expected, atol=0.0, rtol=0.0, max_error_ratio=0.0,
                       rows=rows, chunk_elems=7)
    for index in (c.max_abs_index, c.max_rel_index, c.first_bad[0], c.worst[0][0]):
        assert index == (2, 3, 4)
        assert type(index) is tuple and all(type(i) is int for i in index)


def test_metrics_are_plain_json():
    actual = torch.tensor([[1.0, NAN], [0.0, 2.0]])
    c = ratio_allclose(actual, torch.zeros(2, 2), atol=0.0, rtol=0.0, max_error_ratio=0.5,
                       axes=("r", "c"))
    data = json.loads(json.dumps(c.to_metrics()))
    assert data["bad_count"] == 3 and data["first_bad"] == [[0, 0], [0, 1], [1, 1]]
    assert data["outcome"] == "NONFINITE" and data["localisation"]["r"] == [1.0, 0.5]
    assert {f.name for f in dataclasses.fields(Comparison)} <= data.keys()


# --------------------------------------------------------------------------
# The report format, pinned
# --------------------------------------------------------------------------

def _handmade(max_error_ratio):
    expected = torch.tensor([[1.0, 2.0, 4.0], [0.5, 0.0, -2.0]])
    actual = torch.tensor([[1.0, 2.5, 4.0], [0.5, 0.25, -2.0]])
    return ratio_allclose(actual, expected, atol=0.125, rtol=0.0625,
                          max_error_ratio=max_error_ratio, name="out", axes=("row", "col"))


def test_report_mismatch_exact():
    assert _handmade(0.125).report() == "\n".join([
        "out: MISMATCH 2 / 6 elements bad (33.3%), allowed 1 (max_error_ratio 0.125)"
        " with atol 0.125, rtol 0.0625",
        "  greatest absolute difference: 0.5 at index (0, 1) (up to 0.25 allowed)",
        "  greatest relative difference: inf at index (1, 1)",
        "  worst elements: (0, 1) actual 2.5 expected 2 |diff| 0.5;"
        " (1, 1) actual 0.25 expected 0 |diff| 0.25",
        "  non-finite: actual 0, expected 0",
        "  localisation:",
        "    row: all 2 indices bad (min 33.3%, max 33.3%)",
        "    col: 1 of 3 bad: [1] 100.0%",
    ])


def test_report_pass_first_line():
    c = _handmade(0.375)                                    # round(2.25) == 2
    assert c.passed
    assert c.report().splitlines()[0] == (
        "out: PASS 2 / 6 elements bad (33.3%), allowed 2 (max_error_ratio 0.375)"
        " with atol 0.125, rtol 0.0625")


def test_report_nonfinite_without_finite_pairs():
    c = ratio_allclose(torch.tensor([NAN, INF]), torch.tensor([1.0, 1.0]), atol=0.0, rtol=0.0,
                       max_error_ratio=1.0, name="lse")
    assert c.report() == "\n".join([
        "lse: NONFINITE 2 / 2 elements bad (100.0%), allowed 2 (max_error_ratio 1)"
        " with atol 0, rtol 0",
        "  greatest absolute difference: none (no finite pairs compared)",
        "  greatest relative difference: none (no finite pairs compared)",
        "  worst elements: (0,) actual nan expected 1 |diff| nan;"
        " (1,) actual inf expected 1 |diff| inf",
        "  non-finite: actual 2, expected 0",
    ])


def test_report_no_bad_elements():
    t = torch.ones(2, 2)
    lines = ratio_allclose(t, t.clone(), atol=0.0, rtol=0.0, max_error_ratio=0.0, name="o",
                           axes=("a", None)).report().splitlines()
    assert lines[0] == ("o: PASS 0 / 4 elements bad (0.0%), allowed 0 (max_error_ratio 0)"
                        " with atol 0, rtol 0")
    assert lines[3:] == ["  worst elements: none", "  non-finite: actual 0, expected 0",
                         "  localisation:", "    a: none of 2 indices bad"]


@pytest.mark.parametrize("ratios, line", [
    ((0.0,) * 20 + (0.5,), "x: 1 of 21 bad: [20] 50.0%"),
    ((0.0001, 1.0) + (0.0,) * 3, "x: 2 of 5 bad: [0] <0.1%, [1] 100.0%"),
    ((0.9999, 0.5), "x: all 2 indices bad (min 50.0%, max >99.9%)"),
    ((0.1,) * 9 + (0.0,) * 9,
     "x: 9 of 18 bad (min 10.0%, max 10.0%): [0] 10.0%, [1] 10.0%, [2] 10.0%, [3] 10.0%,"
     " [4] 10.0%, [5] 10.0%, [6] 10.0%, [7] 10.0%, ..."),
    ((0.2,) * 10 + (0.0, 0.4, 0.0),
     "x: 11 of 13 bad (min 20.0%, max 40.0%); clean: [10], [12]"),
    ((NAN, 0.0, NAN), "x: none of 1 indices bad; 2 not compared"),
    ((NAN, 0.5, 0.25), "x: all 2 indices bad (min 25.0%, max 50.0%); 1 not compared"),
])
def test_localisation_summary_lines(ratios, line):
    c = dataclasses.replace(_handmade(0.125), localisation={"x": ratios})
    assert c.report().splitlines()[-1] == "    " + line
