"""The 2-D localisation map of ratio_allclose (``Comparison.map``).

A naive reference (the whole bad mask, reduced and summed in blocks) pins the
map on every chunking, stride and row mask; the localisation tests show that a
corrupted head, batch row or page stands out instead of looking uniform.
"""
from __future__ import annotations

import json
import math

import pytest
import torch

from harness.worker.ratio_allclose import MAP_CELLS, ratio_allclose

KW = dict(atol=1e-3, rtol=1e-3, max_error_ratio=0.01)


def naive_map(actual, expected, dims, rows=None, atol=1e-3, rtol=1e-3):
    a, e = actual.double(), expected.double()
    bad = ((a - e).abs() > atol + rtol * e.abs()) | ~torch.isfinite(a) | ~torch.isfinite(e)
    compared = torch.ones_like(bad, dtype=torch.float64)
    if rows is not None:
        shape = (-1,) + (1,) * (bad.dim() - 1)
        bad = bad & rows.view(shape)
        compared = compared * rows.view(shape)
    others = [d for d in range(bad.dim()) if d not in dims]
    bad2 = bad.double().sum(others) if others else bad.double()
    cmp2 = compared.sum(others) if others else compared

    def blocked(m):
        b0 = max(1, math.ceil(m.shape[0] / MAP_CELLS))
        b1 = max(1, math.ceil(m.shape[1] / MAP_CELLS))
        r, c = math.ceil(m.shape[0] / b0), math.ceil(m.shape[1] / b1)
        cells = (torch.arange(m.shape[0])[:, None] // b0) * c + torch.arange(m.shape[1])[None, :] // b1
        out = torch.zeros(r * c, dtype=torch.float64)
        return out.index_add_(0, cells.reshape(-1), m.reshape(-1).double()).view(r, c)

    return (blocked(bad2) / blocked(cmp2)).tolist()


def same(got, want):
    assert len(got) == len(want)
    for g_row, w_row in zip(got, want):
        assert len(g_row) == len(w_row)
        for g, w in zip(g_row, w_row):
            assert (math.isnan(g) and math.isnan(w)) or g == pytest.approx(w, abs=1e-12)


def _pair(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    expected = torch.randn(shape, generator=g)
    return expected.clone(), expected


def test_one_bad_head_is_one_column():
    actual, expected = _pair((16, 8, 32))
    actual[:, 3] += 1.0
    c = ratio_allclose(actual, expected, axes=("batch", "head", None), **KW)
    m = c.map
    assert m["axes"] == ["batch", "head"] and m["shape"] == [16, 8] and m["size"] == [16, 8]
    assert m["block"] == [1, 1]
    for row in m["ratio"]:
        assert row == [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    flat = [r for row in m["ratio"] for r in row]
    assert len(set(flat)) > 1                       # not uniform


def test_one_bad_batch_row_is_one_row():
    actual, expected = _pair((16, 8, 32))
    actual[5, :, ::2] += 1.0                          # half of row 5, every head
    c = ratio_allclose(actual, expected, axes=("batch", "head", None), **KW)
    for b, row in enumerate(c.map["ratio"]):
        assert row == ([0.5] * 8 if b == 5 else [0.0] * 8)


def test_one_bad_cell_among_many_blocks():
    # 200 x 130 indices -> blocks of 4 x 3 -> a 50 x 44 map; one (row, head) pair bad.
    actual, expected = _pair((200, 130, 4))
    actual[101, 77] += 1.0
    c = ratio_allclose(actual, expected, axes=("batch", "head", None), **KW)
    m = c.map
    assert m["block"] == [4, 3] and m["shape"] == [50, 44]
    assert max(m["shape"]) <= MAP_CELLS
    nonzero = [(i, j) for i, row in enumerate(m["ratio"]) for j, r in enumerate(row) if r > 0]
    assert nonzero == [(101 // 4, 77 // 3)]
    assert m["ratio"][25][25] == pytest.approx(4 / (4 * 3 * 4))
    same(m["ratio"], naive_map(actual, expected, (0, 1)))


def test_a_corrupted_page_stands_out_in_a_cache_comparison():
    # As checks.py compares a cache: [layer, row, kv_head, D] rows at valid slots,
    # grouped into pages; rows 8..11 live in page 2.
    P, rows, hkv, D = 4, 16, 2, 8
    actual, expected = _pair((1, rows, hkv, D))
    written = torch.arange(rows)
    actual[0, 8:12] += 1.0
    c = ratio_allclose(actual, expected, axes=("layer", "row", "kv_head", None),
                       groups={"page": (1, written // P)}, **KW)
    assert c.localisation["page"] == (0.0, 0.0, 1.0, 0.0)
    assert c.map["axes"] == ["row", "kv_head"]      # the size-1 layer axis is left out
    for r, ratios in enumerate(c.map["ratio"]):
        assert ratios == ([1.0, 1.0] if 8 <= r < 12 else [0.0, 0.0])


def test_layered_cache_maps_layer_by_row():
    actual, expected = _pair((3, 10, 2, 4))
    actual[2, 4] += 1.0
    c = ratio_allclose(actual, expected, axes=("layer", "row", "kv_head", None), **KW)
    assert c.map["axes"] == ["layer", "row"]
    assert [i for i, row in enumerate(c.map["ratio"]) if any(row)] == [2]
    assert c.map["ratio"][2][4] == 1.0


@pytest.mark.parametrize("chunk", [5, 64, 1000, 1 << 18])
@pytest.mark.parametrize("axes,dims", [
    (("a", "b", None), (0, 1)),
    (("a", None, "c"), (0, 2)),
    ((None, "b", "c"), (1, 2)),
    (("a", "b", "c"), (0, 1)),
])
@pytest.mark.parametrize("density", [0.02, 0.6])     # sparse and dense chunks
def test_map_matches_naive(chunk, axes, dims, density):
    g = torch.Generator().manual_seed(7)
    actual, expected = _pair((9, 70, 11))
    bad = torch.rand(actual.shape, generator=g) < density
    actual[bad] += 1.0
    actual[2, 3, 4] = math.nan
    c = ratio_allclose(actual, expected, axes=axes, chunk_elems=chunk, **KW)
    assert c.map["axes"] == [axes[d] for d in dims]
    same(c.map["ratio"], naive_map(actual, expected, dims))


@pytest.mark.parametrize("chunk", [5, 333, 1 << 18])
def test_map_with_rows_mask_and_strides(chunk):
    g = torch.Generator().manual_seed(3)
    actual, expected = _pair((12, 6, 80))
    actual[torch.rand(actual.shape, generator=g) < 0.3] += 1.0
    rows = torch.tensor([True, False] * 6)
    c = ratio_allclose(actual, expected, axes=("batch", "head", None), rows=rows,
                       chunk_elems=chunk, **KW)
    want = naive_map(actual, expected, (0, 1), rows=rows)
    same(c.map["ratio"], want)
    assert all(math.isnan(r) for r in c.map["ratio"][1])   # masked row: nothing compared
    # non-contiguous: a transposed view
    a, e = actual.transpose(0, 2), expected.transpose(0, 2)
    c = ratio_allclose(a, e, axes=("x", None, "z"), chunk_elems=chunk, **KW)
    same(c.map["ratio"], naive_map(a.contiguous(), e.contiguous(), (0, 2)))


def test_chunking_does_not_change_the_map():
    g = torch.Generator().manual_seed(1)
    actual, expected = _pair((3, 130, 10))
    actual[torch.rand(actual.shape, generator=g) < 0.1] += 1.0
    maps = [json.dumps(ratio_allclose(actual, expected, axes=("a", "b", "c"), chunk_elems=n,
                                      **KW).map) for n in (1, 66, 4000, 1 << 20)]
    assert all(m == maps[0] for m in maps)


def test_no_map_without_two_axes():
    actual, expected = _pair((4, 5))
    assert ratio_allclose(actual, expected, axes=("a", None), **KW).map is None
    assert ratio_allclose(actual, expected, **KW).map is None
    assert ratio_allclose(torch.tensor(1.0), torch.tensor(2.0), **KW).map is None


def test_batch_of_one_keeps_both_axes():
    actual, expected = _pair((1, 8, 4))
    actual[0, 6] += 1.0
    c = ratio_allclose(actual, expected, axes=("batch", "head", None), **KW)
    assert c.map["shape"] == [1, 8] and c.map["ratio"][0][6] == 1.0


def test_no_map_when_nothing_is_bad():
    actual, expected = _pair((4, 5, 3))
    assert ratio_allclose(actual, expected, axes=("a", "b", None), **KW).map is None
    actual, expected = _pair((0, 4, 3))
    assert ratio_allclose(actual, expected, axes=("a", "b", None), **KW).map is None
    actual, expected = _pair((4, 5, 3))
    actual[0, 0, 0] += 1.0                               # one bad element, still a pass
    c = ratio_allclose(actual, expected, axes=("a", "b", None), **KW)
    assert c.passed and c.map["ratio"][0][0] == pytest.approx(1 / 3)


def test_map_is_in_the_metrics_as_plain_json():
    actual, expected = _pair((4, 3, 2))
    actual[1, 2] += 1.0
    data = json.loads(json.dumps(ratio_allclose(actual, expected, axes=("b", "h", None),
                                                **KW).to_metrics()))
    assert data["map"]["ratio"][1] == [0.0, 0.0, 1.0]
    assert data["map"]["axes"] == ["b", "h"]


@pytest.mark.parametrize("chunk", [7, 100, 1 << 18])
@pytest.mark.parametrize("density", [0.01, 0.7])
def test_two_named_dims_and_nothing_else(chunk, density):
    # [token, vocab]-like: the map is the (blocked) mask itself.
    g = torch.Generator().manual_seed(11)
    actual, expected = _pair((70, 300))
    actual[torch.rand(actual.shape, generator=g) < density] += 1.0
    c = ratio_allclose(actual, expected, axes=("token", "vocab"), chunk_elems=chunk, **KW)
    assert c.map["block"] == [2, 5] and c.map["shape"] == [35, 60]
    same(c.map["ratio"], naive_map(actual, expected, (0, 1)))
