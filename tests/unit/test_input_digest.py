"""The inputs digest's column sums (``harness.worker.input_digest``) against their definition:
a tensor's bytes as int32 words zero-padded to rows of PERIOD, rows in groups of GROUP_ROWS,
int64 column sums plain and weighted by ``1 + group % 1021``.  However the code chunks,
widens and folds them, the sums (and so every digest) stay those of the definition."""
from __future__ import annotations

import hashlib

import pytest
import torch

from harness.worker import input_digest
from harness.worker.input_digest import GROUP_ROWS, PERIOD, column_sums, fold


def defined(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The sums as docs/json-schema.md defines them, one group at a time, no shortcuts."""
    raw = t.contiguous().view(-1).view(torch.uint8).clone()
    words = torch.cat([raw, raw.new_zeros(-raw.numel() % (4 * PERIOD))]).view(torch.int32).to(torch.int64)
    rows = words.view(-1, PERIOD)
    plain, weighted = torch.zeros(PERIOD, dtype=torch.int64), torch.zeros(PERIOD, dtype=torch.int64)
    for group in range(-(-rows.shape[0] // GROUP_ROWS)):
        sums = rows[group * GROUP_ROWS:(group + 1) * GROUP_ROWS].sum(0)
        plain += sums
        weighted += sums * (1 + group % 1021)
    return plain, weighted


def words(n: int) -> torch.Tensor:
    """``n`` int32 words spread over the whole range, negative ones included."""
    return (torch.arange(n, dtype=torch.int64) * 2654435761 % (1 << 32) - (1 << 31)).to(torch.int32)


SIZES = [1, PERIOD - 1, PERIOD, PERIOD + 1, GROUP_ROWS * PERIOD, GROUP_ROWS * PERIOD + 7,
         7 * GROUP_ROWS * PERIOD, 7 * GROUP_ROWS * PERIOD + 5 * PERIOD + 3]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("chunk, keep", [(2, 3), (1, 3), (1, 1), (16, 256)])
def test_sums_are_the_defined_ones_however_they_are_chunked(n, chunk, keep, monkeypatch):
    """Chunks of 1, 2 and 16 groups, group sums kept up to 1, 3 and 256 before they are added: whole groups, a
    partial group, a short last row, bytes that do not fill a word."""
    monkeypatch.setitem(input_digest.CHUNK_GROUPS, "cpu", chunk)
    monkeypatch.setattr(input_digest, "FOLD_GROUPS", keep)
    t = words(n)
    for tensor in (t, t.view(torch.uint8)[:-1], t.view(torch.bfloat16)[:-1]):
        got, want = column_sums(tensor), defined(tensor)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_a_view_that_does_not_start_on_a_word_is_summed_as_its_own_bytes():
    t = words(3 * PERIOD).view(torch.bfloat16)
    for view in (t[1:], t[1:2 * PERIOD + 1], t.view(-1, 6)[:, 1:4]):
        got, want = column_sums(view), defined(view)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_one_changed_word_changes_the_sums():
    t = words(5 * GROUP_ROWS * PERIOD)
    before = column_sums(t)
    t[3 * GROUP_ROWS * PERIOD + 17] += 1
    after = column_sums(t)
    assert not torch.equal(before[0], after[0]) and not torch.equal(before[1], after[1])


def test_digest_values_are_those_of_the_published_format():
    """Pinned: a change here changes every stored inputs_digest and determinism digest (a format
    change, to be documented in docs/json-schema.md and docs/flake.md)."""
    t = words(200 * PERIOD + 13)          # more than one fold of group sums, a partial group, a short row
    pinned = {"words": (t, "e06e8a0b3be37efe"), "bytes": (t.view(torch.uint8)[:-3], "daba7abf96e1ecfa")}
    for name, (tensor, value) in pinned.items():
        h = hashlib.blake2b(digest_size=8)
        fold(h, tensor)
        assert h.hexdigest() == value, name
