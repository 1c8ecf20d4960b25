"""Bitwise comparison across identical runs: localised, NaN-payload exact, baselines shared via a file."""
from __future__ import annotations

import torch

from harness.worker import determinism
from harness.ops import OPS


def _query():
    g = torch.Generator().manual_seed(0)
    return torch.randn((4, 4, 16), generator=g).to(torch.bfloat16)


def test_identical_bits_have_no_diff_even_with_nan_payloads():
    a = _query()
    a[0, 0, 0] = float("nan")
    assert determinism.bit_diff("query", a, a.clone(), ("batch", "head", None)) is None


def test_one_ulp_is_a_difference_and_is_localised_to_its_head():
    a = _query()
    b = a.clone()
    bits = b.view(torch.int16)
    bits[:, 2, :3] += 1                                  # head 2, three elements per row: last bit only
    d = determinism.bit_diff("query", b, a, ("batch", "head", None))
    assert d["count"] == 12 and d["numel"] == 256
    assert d["first"] == [0, 2, 0]
    assert d["localisation"]["head"] == [0.0, 0.0, 12 / 64, 0.0]
    assert all(r > 0 for r in d["localisation"]["batch"])
    assert 0 < d["max_abs_diff"] < 0.05                  # values close: the bits moved, not the numbers
    text = determinism.render([d], 0)
    assert "query: 12 / 256 elements" in text and "differ bitwise from iteration 0" in text
    assert "head: 1 of 4 bad: [2]" in text


def test_different_nan_payloads_differ():
    a = torch.full((2, 2), float("nan"), dtype=torch.float32)
    b = a.clone()
    b.view(torch.int32)[0, 0] ^= 1
    d = determinism.bit_diff("out", b, a, (None, None))
    assert d["count"] == 1 and d["max_abs_diff"] is None


def test_diff_against_baseline_saves_the_first_iteration_and_compares_later_ones(tmp_path):
    op = OPS["rope_kv_write"]
    path = str(tmp_path / "b" / "case.safetensors")
    cache = torch.zeros((2, 4, 2, 16), dtype=torch.bfloat16)
    q = _query()
    first = determinism.diff_against_baseline(determinism.Baselines(), path, op, {"query": q}, {"k_cache": cache, "v_cache": cache}, 0)
    assert first["baseline"] and first["identical"]
    # a fresh worker (no memory) reads the file
    same = determinism.diff_against_baseline(determinism.Baselines(), path, op, {"query": q.clone()},
                             {"k_cache": cache.clone(), "v_cache": cache.clone()}, 1)
    assert same["identical"] and not same["baseline"] and same["baseline_repeat"] == 0
    changed = cache.clone()
    changed[1, 3, 0, 5] = 1.0                            # page 1, offset 3, head 0
    diff = determinism.diff_against_baseline(determinism.Baselines(), path, op, {"query": q},
                             {"k_cache": changed, "v_cache": cache}, 2)
    assert diff["identical"] is False
    (d,) = diff["differs"]
    assert d["name"] == "k_cache" and d["count"] == 1
    assert d["localisation"]["page"] == [0.0, 1 / 128]
    assert "k_cache: 1 / 256 elements" in diff["report"]


def test_first_writer_wins(tmp_path):
    path = str(tmp_path / "case.safetensors")
    one, two = determinism.Baselines(), determinism.Baselines()
    one.save(path, {"x": torch.zeros(3)}, 0)
    two.save(path, {"x": torch.ones(3)}, 5)             # lost the race: the file stands
    tensors, repeat = determinism.Baselines().get(path)
    assert repeat == 0 and torch.equal(tensors["x"], torch.zeros(3))
    assert two.get(path)[1] == 0


def test_a_torn_baseline_file_is_replaced(tmp_path):
    path = tmp_path / "case.safetensors"
    path.write_bytes(b"not safetensors")
    assert determinism.Baselines().get(str(path)) is None


def test_a_failing_iteration_never_becomes_the_baseline(tmp_path):
    op = OPS["rope_kv_write"]
    path = str(tmp_path / "case.safetensors")
    cache = torch.zeros((2, 4, 2, 16), dtype=torch.bfloat16)
    torn, good = _query(), _query()
    torn[:, 1] = 3.0
    caches = {"k_cache": cache, "v_cache": cache.clone()}
    first = determinism.diff_against_baseline(determinism.Baselines(), path, op, {"query": torn}, caches, 0, passed=False)
    assert first["identical"] is None and not first["baseline"] and first["digests"]["query"]
    second = determinism.diff_against_baseline(determinism.Baselines(), path, op, {"query": good}, caches, 1, passed=True)
    assert second["baseline"] and second["baseline_repeat"] == 1
    third = determinism.diff_against_baseline(determinism.Baselines(), path, op, {"query": torn}, caches, 2, passed=False)
    assert third["identical"] is False and third["baseline_repeat"] == 1      # compared once a baseline exists
    assert third["differs"][0]["localisation"]["head"] == [0.0, 1.0, 0.0, 0.0]
