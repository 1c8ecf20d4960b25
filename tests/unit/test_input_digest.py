"""The inputs digest's column sums (``harness.worker.input_digest``) against their definition:
a tensor's bytes as little-endian 64-bit words zero-padded to rows of PERIOD, rows in groups of
GROUP_ROWS, column sums plain and weighted by ``1 + group % 1021``, modulo 2**64.  The definition
is computed with numpy's unsigned integers, whose arithmetic is defined to wrap; however the code
chunks and folds its signed torch sums, they (and so every digest) stay those of the definition."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from harness.worker import input_digest
from harness.worker.input_digest import GROUP_ROWS, PERIOD, column_sums, fold


def defined(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The sums as the module's docstring defines them, one group at a time, in unsigned
    arithmetic modulo 2**64, no shortcuts; as torch's int64 (the same 64 bits)."""
    raw = t.contiguous().view(-1).view(torch.uint8).numpy()
    words = np.concatenate([raw, np.zeros(-raw.size % (8 * PERIOD), np.uint8)]).view("<u8")
    rows = words.reshape(-1, PERIOD)
    plain, weighted = np.zeros(PERIOD, np.uint64), np.zeros(PERIOD, np.uint64)
    for group in range(-(-rows.shape[0] // GROUP_ROWS)):
        sums = rows[group * GROUP_ROWS:(group + 1) * GROUP_ROWS].sum(0, dtype=np.uint64)
        plain += sums
        weighted += sums * np.uint64(1 + group % 1021)
    return torch.from_numpy(plain.view(np.int64)), torch.from_numpy(weighted.view(np.int64))


def words(n: int) -> torch.Tensor:
    """``n`` int32 words spread over the whole range, negative ones included."""
    return (torch.arange(n, dtype=torch.int64) * 2654435761 % (1 << 32) - (1 << 31)).to(torch.int32)


ROW = 2 * PERIOD                        # int32 words in a row of PERIOD 64-bit words
SIZES = [1, ROW - 1, ROW, ROW + 1, GROUP_ROWS * ROW, GROUP_ROWS * ROW + 7,
         7 * GROUP_ROWS * ROW, 7 * GROUP_ROWS * ROW + 5 * ROW + 3]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("keep", [1, 3, 256])
def test_sums_are_the_defined_ones_however_they_are_chunked(n, keep, monkeypatch):
    """Groups summed 1, 3 and 256 at a time: whole groups, a partial group, a short last row, bytes
    that do not fill a word; every word's top bit set somewhere, so the sums wrap."""
    monkeypatch.setattr(input_digest, "FOLD_GROUPS", keep)
    t = words(n)
    for tensor in (t, t.view(torch.uint8)[:-1], t.view(torch.bfloat16)[:-1]):
        got, want = column_sums(tensor), defined(tensor)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_a_view_that_does_not_start_on_a_word_is_summed_as_its_own_bytes():
    t = words(3 * ROW).view(torch.bfloat16)
    for view in (t[1:], t[1:2 * ROW + 1], t.view(-1, 6)[:, 1:4]):   # the middle one: one whole row
        got, want = column_sums(view), defined(view)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_one_changed_word_changes_the_sums():
    t = words(5 * GROUP_ROWS * ROW)
    before = column_sums(t)
    t[3 * GROUP_ROWS * ROW + 17] += 1
    after = column_sums(t)
    assert not torch.equal(before[0], after[0]) and not torch.equal(before[1], after[1])


def test_digest_values_are_those_of_the_published_format():
    """Pinned: a change here changes every stored inputs_digest and determinism digest (a format
    change, to be documented in docs/json-schema.md and docs/flake.md)."""
    t = words(3 * GROUP_ROWS * ROW + 5 * ROW + 13)   # whole groups, a partial group, a short row
    pinned = {"words": (t, "726e12398fa7c181"), "bytes": (t.view(torch.uint8)[:-3], "1576adcd8d8403e2")}
    for name, (tensor, value) in pinned.items():
        h = hashlib.blake2b(digest_size=8)
        fold(h, tensor)
        assert h.hexdigest() == value, name
