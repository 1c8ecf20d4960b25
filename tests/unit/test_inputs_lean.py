"""The cached keys' leaning (``inputs._lean_cached``) against its definition: every context key
``bf16(float(key) + leaning[position])``, the key at position 0 also the sink on the shared
pair, position by position in sequence order.  The code leans runs of consecutive slots a
slice at a time through one buffer; the bytes must be those of the definition, on any
thread count, also where several positions share a slot (``block_value``)."""
from __future__ import annotations

import math

import pytest
import torch

from harness.worker import inputs
from harness.worker.inputs import _lean_cached, _pair

P, HEADS, D = 16, 2, 8


def defined(cache: torch.Tensor, table: torch.Tensor, filled: list[int], leaning: torch.Tensor, sink: float) -> torch.Tensor:
    rows = cache.clone().view(-1, HEADS, D)
    for b, count in enumerate(filled):
        for pos in range(count):
            extra = leaning[pos].clone()
            for d in _pair(D):
                extra[d] += sink if pos == 0 else 0.0
            slot = int(table[b, pos // P]) * P + pos % P
            rows[slot] = (rows[slot].float() + extra).to(rows.dtype)
    return rows.view(cache.shape)


def setup(pages: int, dtype: torch.dtype, seed: int = 0, positions: int = 8 * P):
    g = torch.Generator().manual_seed(seed)
    cache = torch.randn(pages, P, HEADS, D, generator=g).to(dtype)
    leaning = torch.randn(positions, D, generator=g)
    return cache, leaning


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(-1).view(torch.uint8), b.view(-1).view(torch.uint8))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("order", ["arange", "random"])
def test_leaned_keys_are_the_defined_ones(dtype, order, monkeypatch):
    """Sequences on consecutive pages (one run each, longer than a slice) and on shuffled pages
    (a run per page), partial last pages, an empty sequence."""
    monkeypatch.setattr(inputs, "_LEAN_ROWS", 5)          # slices that end mid-page
    filled = [3 * P + 5, 0, P, 2 * P - 1, 1]
    blocks = [math.ceil(n / P) for n in filled]
    cache, leaning = setup(sum(blocks) + 2, dtype)
    pool = torch.arange(sum(blocks)) if order == "arange" else torch.randperm(sum(blocks), generator=torch.Generator().manual_seed(3))
    table = torch.full((len(filled), max(blocks)), -1, dtype=torch.int32)
    start = 0
    for b, n in enumerate(blocks):
        table[b, :n] = pool[start:start + n].to(torch.int32)
        start += n
    want = defined(cache, table, filled, leaning, sink=2.5)
    _lean_cached(cache, table, filled, P, leaning, 2.5)
    assert same_bytes(cache, want)


def test_positions_that_share_a_slot_lean_it_in_turn_on_any_thread_count():
    filled = [3 * P + 2, 2 * P, P + 7]
    table = torch.zeros(3, 4, dtype=torch.int32)           # block_value 0: every block on page 0
    cache, leaning = setup(2, torch.bfloat16, seed=1)
    want = defined(cache, table, filled, leaning, sink=1.5)
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            got = cache.clone()
            _lean_cached(got, table, filled, P, leaning, 1.5)
            assert same_bytes(got, want), n
    finally:
        torch.set_num_threads(threads)


def test_a_key_leaned_at_the_wrong_position_is_caught_by_the_definition():
    """The definition tells positions apart: leaning every key by position 0's would not pass."""
    filled = [2 * P]
    table = torch.tensor([[0, 1]], dtype=torch.int32)
    cache, leaning = setup(2, torch.bfloat16, seed=2)
    wrong = cache.clone()
    _lean_cached(wrong, table, filled, P, leaning[:1].expand(len(leaning), D).contiguous(), 0.0)
    assert not same_bytes(wrong, defined(cache, table, filled, leaning, sink=0.0))
