"""Prefaulting a new tensor's pages (harness/worker/prefault.py): the inputs' bytes are the same
with and without it, and where it is unsupported it does nothing and says so (False)."""
from __future__ import annotations

import mmap
from dataclasses import replace

import pytest
import torch

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.worker import counter_rng, prefault
from harness.worker.inputs import generate


def big_case(seed: int) -> Case:
    """Caches of 2 MiB each: over ``prefault.MIN_BYTES``."""
    geo = replace(PRESETS["tiny"], num_kv_heads=4, head_dim=64, page_size=64)
    return Case(case_id="c", matrix="m", source="m.yaml:1", op="fused_rope_decode_attention", kernel="reference",
                geometry=geo, seq_lens=SeqLens("const", (1000,)), slot_mode=SlotMode("random"), seed=seed)


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8),
                                                                      b.reshape(-1).view(torch.uint8))


def _supported() -> bool:
    return prefault.prefault(torch.empty(4 << 20, dtype=torch.uint8))


needs_populate = pytest.mark.skipif(not _supported(), reason="madvise(MADV_POPULATE_WRITE) unsupported here")


@needs_populate
def test_a_fresh_large_tensor_is_prefaulted_and_keeps_its_writes():
    t = torch.empty(3 << 20, dtype=torch.uint8)
    assert prefault.prefault(t)
    t.fill_(7)
    assert int(t.min()) == int(t.max()) == 7


@needs_populate
def test_inputs_are_the_same_bytes_with_and_without_prefault(monkeypatch):
    calls = []
    real = prefault.prefault

    def counting(tensor, min_bytes=None):
        calls.append(real(tensor, 0))       # every tensor prefaulted, however small
        return calls[-1]

    monkeypatch.setattr(prefault, "prefault", counting)
    with_ = generate(big_case(seed=3)).args
    assert any(calls)                        # the caches (a tensor under a page has no whole page)
    monkeypatch.setattr(prefault, "prefault", lambda tensor, min_bytes=None: False)
    without = generate(big_case(seed=3)).args
    assert with_.keys() == without.keys()
    for name, value in with_.items():
        if isinstance(value, torch.Tensor):
            assert same_bytes(value, without[name]), name
        else:
            assert value == without[name], name


def test_a_large_draw_is_the_same_bytes_whatever_prefault_did(monkeypatch):
    n = 3 * counter_rng.BASE + 5
    prefaulted = counter_rng.draw(1, "k_cache", (n,), "normal", torch.bfloat16)
    monkeypatch.setattr(prefault, "_madvise", lambda: None)
    assert same_bytes(prefaulted, counter_rng.draw(1, "k_cache", (n,), "normal", torch.bfloat16))


def test_small_tensors_and_device_less_platforms_are_left_alone(monkeypatch):
    assert not prefault.prefault(torch.empty(1024, dtype=torch.uint8))        # under MIN_BYTES
    monkeypatch.setattr(prefault, "_madvise", lambda: None)                      # another OS, no madvise
    assert not prefault.prefault(torch.empty(4 << 20, dtype=torch.uint8))
    assert prefault.empty((4 << 20,), torch.uint8).shape == (4 << 20,)


def test_an_unknown_advice_is_false_not_an_error(monkeypatch):
    """An older kernel answers EINVAL to advice it does not know: the same path as this made-up one."""
    monkeypatch.setattr(prefault, "MADV_POPULATE_WRITE", 0x7FFF)
    got = prefault.prefault(torch.empty(4 << 20, dtype=torch.uint8))
    assert got is False


def test_only_whole_pages_inside_the_storage_are_advised(monkeypatch):
    seen = []

    def fake(addr, length, advice):
        seen.append((addr, length, advice))
        return 0

    monkeypatch.setattr(prefault, "_madvise", lambda: fake)
    t = torch.empty(5 << 20, dtype=torch.uint8)
    assert prefault.prefault(t)
    (addr, length, advice), = seen
    start, end = t.untyped_storage().data_ptr(), t.untyped_storage().data_ptr() + t.untyped_storage().nbytes()
    assert addr % mmap.PAGESIZE == 0 and length % mmap.PAGESIZE == 0 and length > 0
    assert start <= addr and addr + length <= end and advice == prefault.MADV_POPULATE_WRITE
    assert addr - start < mmap.PAGESIZE and end - (addr + length) < mmap.PAGESIZE
