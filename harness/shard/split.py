"""Deterministic sharding of a case list over N hosts (``harness run --shard I/N``).

Every host expands the same case files into the same case ids and must pick its
part without talking to the others, so the split is a pure function of the
case ids, the shard count and (optionally) the durations of an explicit
``--shard-durations`` file: never of a results store or any other local state,
which changes as shards run on one host (three shards run one after another
beside one store would otherwise each split differently):

- The unit is the case id: the repeats of one case (flake runs) stay on one shard.
- Ids are deduplicated and sorted first, so the input order does not matter and no
  hash of a string is used (Python salts ``hash(str)`` per process).
- **By count** (no durations given for these cases): round-robin over the sorted ids,
  shard ``i`` takes ids ``i-1, i-1+N, i-1+2N, ...``.  Shard sizes differ by at most
  one; neighbouring ids (the same matrix with one parameter changed, often a similar
  cost) land on different shards.
- **By durations** (at least one of these cases has a given duration): greedy
  longest-processing-time first.  Cases in decreasing duration (ties: by id) go one by
  one onto the least-loaded shard (ties: the lowest index).  A case with no recorded
  duration counts as the median of the known ones.  The largest shard load is at most
  ``total / N + longest case`` and at most ``4/3 - 1/(3N)`` times the best split.

The same durations file must reach every host.  ``shard_info`` records a fingerprint
of the case list and of the durations it used, ``shard_plan`` the case ids themselves;
``harness report --merge`` (``harness/shard/merge.py``) refuses shards whose
fingerprints differ and plans that overlap or leave a case out.
"""
from __future__ import annotations

import hashlib
import heapq
import json
import math
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from harness.errors import UsageError

T = TypeVar("T")

_SHARD_RE = re.compile(r"([0-9]+)/([0-9]+)", re.ASCII)


class ShardError(UsageError):
    """A bad ``--shard`` value or shard count. One line, names the value."""


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``total``, 1-based: ``Shard(3, 8)`` is ``--shard 3/8``."""

    index: int
    total: int

    def __post_init__(self) -> None:
        if self.total < 1 or not 1 <= self.index <= self.total:
            raise ShardError(f"shard {self.index}/{self.total}: expected I/N with 1 <= I <= N")

    def __str__(self) -> str:
        return f"{self.index}/{self.total}"


def parse_shard(text: str, where: str = "--shard") -> Shard:
    """``"3/8"`` → ``Shard(3, 8)``; anything else is a ``ShardError`` naming ``where`` and the value."""
    m = _SHARD_RE.fullmatch(text) if isinstance(text, str) else None
    if not m:
        raise ShardError(f"{where} {text!r}: expected I/N, two whole numbers with 1 <= I <= N (e.g. 3/8)")
    index, total = int(m.group(1)), int(m.group(2))
    if total < 1:
        raise ShardError(f"{where} {text!r}: the shard count N must be at least 1")
    if not 1 <= index <= total:
        raise ShardError(f"{where} {text!r}: the shard index I must be between 1 and {total} (1-based)")
    return Shard(index, total)


# -- the split ---------------------------------------------------------------

def _known(case_ids: Sequence[str], durations: dict[str, float] | None) -> dict[str, float]:
    """The usable recorded durations of these cases (finite, not negative)."""
    out: dict[str, float] = {}
    for case_id in case_ids:
        value = (durations or {}).get(case_id)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
            out[case_id] = float(value)
    return out


def balanced_by(case_ids: Iterable[str], durations: dict[str, float] | None) -> str:
    """``"durations"`` when at least one of the cases has a usable recorded duration, else ``"count"``."""
    return "durations" if _known(sorted(set(case_ids)), durations) else "count"


def weights(case_ids: Iterable[str], durations: dict[str, float] | None) -> dict[str, float]:
    """The duration each case counts for in the split: its recorded one, else the median of the
    known ones, else 1.0."""
    ids = sorted(set(case_ids))
    known = _known(ids, durations)
    default = statistics.median(known[i] for i in sorted(known)) if known else 1.0
    return {case_id: known.get(case_id, default) for case_id in ids}


def assign(case_ids: Iterable[str], total: int, durations: dict[str, float] | None = None) -> list[list[str]]:
    """Split the case ids over ``total`` shards; ``out[i - 1]`` is shard ``i``'s ids, sorted.

    Every distinct id is in exactly one shard; shards may be empty (more shards than
    cases).  Identical on every host for the same ids (any order, duplicates allowed),
    ``total`` and durations.
    """
    if isinstance(total, bool) or not isinstance(total, int) or total < 1:
        raise ShardError(f"shard count {total!r}: must be a whole number >= 1")
    ids = sorted(set(case_ids))
    if balanced_by(ids, durations) == "count":
        return [ids[i::total] for i in range(total)]
    weight = weights(ids, durations)
    shards: list[list[str]] = [[] for _ in range(total)]
    heap = [(0.0, i) for i in range(total)]          # (load, index): least loaded, then lowest index
    for case_id in sorted(ids, key=lambda c: (-weight[c], c)):
        load, i = heapq.heappop(heap)
        shards[i].append(case_id)
        heapq.heappush(heap, (load + weight[case_id], i))
    return [sorted(s) for s in shards]


def select_shard(items: Iterable[T], shard: Shard, *, key: Callable[[T], str] = str,
                 durations: dict[str, float] | None = None) -> list[T]:
    """The items of ``shard``, in their input order.  ``key`` gives an item's case id: items
    with the same id (repeats of a case) go to the same shard."""
    items = list(items)
    mine = set(assign([key(item) for item in items], shard.total, durations)[shard.index - 1])
    return [item for item in items if key(item) in mine]


# -- provenance --------------------------------------------------------------

def case_set_fingerprint(case_ids: Iterable[str]) -> str:
    """sha256 (hex) of the sorted distinct case ids: equal on two hosts iff they split the same list."""
    digest = hashlib.sha256()
    for case_id in sorted(set(case_ids)):
        digest.update(case_id.encode("utf-8", "surrogatepass") + b"\0")
    return digest.hexdigest()


def durations_fingerprint(case_ids: Iterable[str], durations: dict[str, float] | None) -> str | None:
    """sha256 (hex) of the recorded durations the split used (None when it was by count)."""
    ids = sorted(set(case_ids))
    known = _known(ids, durations)
    if not known:
        return None
    text = json.dumps([[case_id, repr(known[case_id])] for case_id in sorted(known)], separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def shard_info(shard: Shard, case_ids: Iterable[str], durations: dict[str, float] | None = None, *,
               matrices: Iterable[str] | None = None) -> dict[str, Any]:
    """What a sharded run records (``extra["shard"]`` in the store, ``"shard"`` in the JSON document).

    ``case_ids``: the whole list that was split (every shard's cases, after ``-k``), not
    only this shard's; ``durations``: exactly what was passed to ``assign``/``select_shard``;
    ``matrices``: the names of the matrices of the whole list.
    """
    ids = sorted(set(case_ids))
    return {
        "index": shard.index,
        "total": shard.total,
        "balanced_by": balanced_by(ids, durations),
        "cases": len(assign(ids, shard.total, durations)[shard.index - 1]),
        "total_cases": len(ids),
        "fingerprint": case_set_fingerprint(ids),
        "durations_fingerprint": durations_fingerprint(ids, durations),
        "matrices": sorted(set(matrices)) if matrices is not None else None,
    }


def shard_plan(shard: Shard, case_ids: Iterable[str], durations: dict[str, float] | None = None) -> dict[str, Any]:
    """The ids behind ``shard_info``, recorded beside it so that ``harness report --merge`` can
    name a case two shards both planned or none did: ``planned`` (this shard's ids) and
    ``split_cases`` (the whole list that was split), both sorted."""
    ids = sorted(set(case_ids))
    return {"planned": assign(ids, shard.total, durations)[shard.index - 1], "split_cases": ids}
