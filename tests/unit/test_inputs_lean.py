"""The cached keys' leaning (``inputs._draw_leaned``) against its definition: every context key
is its draw (element ``slot·row ..`` of the stream, in the cache's dtype) plus the extra of its
position rounded to that dtype, summed in float32 and rounded once; a slot that several
positions share (``block_value``) is drawn once and gets each one's extra in turn, in
sequence order.  The code draws and leans runs of consecutive slots a
slice at a time through one buffer; the bytes must be those of the definition, on any thread
count, whether the stream is copied from its base or hashed element by element."""
from __future__ import annotations

import math

import pytest
import torch

from harness.worker import counter_rng
from harness.packs.qwen3 import inputs
from harness.packs.qwen3.inputs import _context_runs, _draw_leaned, _key_extra, _pair

P, HEADS, D = 16, 2, 8
ROW = HEADS * D


def defined(pages: int, dtype: torch.dtype, table: torch.Tensor, filled: list[int], extra: torch.Tensor,
            seed: int, scale: float) -> torch.Tensor:
    draws = counter_rng.draw(seed, "k", (pages * P, HEADS, D), "normal", dtype, scale=scale)
    rows = torch.zeros(pages * P, HEADS, D, dtype=dtype)
    seen: set[int] = set()
    for b, count in enumerate(filled):
        for pos in range(count):
            slot = int(table[b, pos // P]) * P + pos % P
            start = rows[slot] if slot in seen else draws[slot]
            rows[slot] = (start.float() + extra[pos].to(dtype).float()).to(dtype)
            seen.add(slot)
    return rows


def leaned(pages: int, dtype: torch.dtype, table: torch.Tensor, filled: list[int], extra: torch.Tensor,
           seed: int, scale: float, elements: int | None = None) -> torch.Tensor:
    rows = torch.zeros(pages * P, HEADS, D, dtype=dtype)
    context = sum(filled) * ROW if elements is None else elements
    stream = counter_rng.Stream(seed, "k", "normal", dtype, "cpu", context, scale=scale)
    _draw_leaned(rows, stream, _context_runs(table, filled, P), extra.to(dtype))
    return rows


def extras(positions: int = 8 * P, seed: int = 0, sink: float = 2.5) -> torch.Tensor:
    return _key_extra(torch.randn(positions, D, generator=torch.Generator().manual_seed(seed)), sink)


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(-1).view(torch.uint8), b.view(-1).view(torch.uint8))


def test_the_extra_is_the_leaning_with_the_sink_on_the_shared_pair_at_position_zero():
    leaning = torch.randn(5, D, generator=torch.Generator().manual_seed(4))
    extra = _key_extra(leaning, 2.5)
    want = leaning.clone()
    for d in _pair(D):
        want[0, d] += 2.5
    assert torch.equal(extra, want)
    assert torch.equal(extra[1:], leaning[1:])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("order", ["arange", "random"])
@pytest.mark.parametrize("from_base", [False, True])
def test_leaned_keys_are_the_defined_ones(dtype, order, from_base, monkeypatch):
    """Sequences on consecutive pages (one run each, longer than a slice) and on shuffled pages
    (a run per page), partial last pages, an empty sequence; the stream copied from its base
    (windows, partial ones at run and slice ends) or hashed element by element."""
    monkeypatch.setattr(inputs, "_LEAN_ROWS", 5)          # slices that end mid-page
    filled = [3 * P + 5, 0, P, 2 * P - 1, 1]
    blocks = [math.ceil(n / P) for n in filled]
    pages = sum(blocks) + 2
    pool = torch.arange(sum(blocks)) if order == "arange" else torch.randperm(sum(blocks), generator=torch.Generator().manual_seed(3))
    table = torch.full((len(filled), max(blocks)), -1, dtype=torch.int32)
    start = 0
    for b, n in enumerate(blocks):
        table[b, :n] = pool[start:start + n].to(torch.int32)
        start += n
    extra = extras()
    want = defined(pages, dtype, table, filled, extra, seed=5, scale=0.7)
    got = leaned(pages, dtype, table, filled, extra, seed=5, scale=0.7,
                 elements=counter_rng._BASE_LEN if from_base else None)
    assert same_bytes(got, want)


def test_positions_that_share_a_slot_lean_it_in_turn_on_any_thread_count():
    """block_value 0: every block on page 0, a first sequence shorter than a page (the later
    runs are part drawn, part fresh)."""
    filled = [5, 3 * P + 2, 2 * P, P + 7]
    table = torch.zeros(4, 4, dtype=torch.int32)
    extra = extras(seed=1, sink=1.5)
    want = defined(2, torch.bfloat16, table, filled, extra, seed=1, scale=1.0)
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            assert same_bytes(leaned(2, torch.bfloat16, table, filled, extra, seed=1, scale=1.0), want), n
    finally:
        torch.set_num_threads(threads)


def test_a_key_leaned_at_the_wrong_position_is_caught_by_the_definition():
    """The definition tells positions apart: leaning every key by position 0's would not pass."""
    filled = [2 * P]
    table = torch.tensor([[0, 1]], dtype=torch.int32)
    extra = extras(seed=2, sink=0.0)
    wrong = leaned(2, torch.bfloat16, table, filled, extra[:1].expand(len(extra), D).contiguous(), seed=2, scale=1.0)
    assert not same_bytes(wrong, defined(2, torch.bfloat16, table, filled, extra, seed=2, scale=1.0))


def test_a_key_leaned_in_float32_is_caught_by_the_definition():
    """The extra rounded to the cache's dtype before the sum is part of the definition: a key
    summed with the float32 extra (what the generator did before) differs in some bytes."""
    filled = [4 * P]
    table = torch.arange(4, dtype=torch.int32)[None]
    extra = extras(seed=3)
    draws = counter_rng.draw(3, "k", (4 * P, HEADS, D), "normal", torch.bfloat16)
    other = (draws.float() + extra[:4 * P, None, :]).to(torch.bfloat16)
    assert not same_bytes(other, defined(4, torch.bfloat16, table, filled, extra, seed=3, scale=1.0))
