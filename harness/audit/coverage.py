"""Which boundary conditions a matrix exercises, from its expanded cases alone (no kernel runs).

Lengths drawn from the seed (``uniform``, and ``multi_block`` with fewer rows than
boundary shapes) are not credited: which ones a case gets is known only when its
inputs are generated, and an audit that claims a condition on a chance draw
would hide the gap it exists to show.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.case import Case, multi_block_lengths


@dataclass(frozen=True)
class Condition:
    """One boundary condition and the cases that exercise it."""

    name: str
    description: str
    cases: tuple[str, ...]

    @property
    def covered(self) -> bool:
        return bool(self.cases)

    def to_json(self) -> dict:
        return {"name": self.name, "description": self.description, "covered": self.covered,
                "cases": list(self.cases)}


def known_lengths(case: Case) -> tuple[int, ...]:
    """The sequence lengths every run of ``case`` has, whatever its seed (``()`` when drawn)."""
    spec, B, P = case.seq_lens, case.geometry.batch, case.geometry.page_size
    if spec.kind in ("const", "list"):
        return tuple(spec.values)
    if spec.kind == "multi_block":
        choices = multi_block_lengths(P)
        return choices if B >= len(choices) else ()
    return ()


def shortest_length(case: Case) -> int:
    """The shortest length any row of ``case`` can get, whatever its seed."""
    spec = case.seq_lens
    if spec.kind == "multi_block":
        return min(multi_block_lengths(case.geometry.page_size))
    return min(spec.values)


def rows(case: Case) -> int | None:
    """Rows one launch writes (``T`` of prefill), None when it depends on drawn lengths."""
    if case.op != "prefill_attention":
        return case.geometry.batch
    lengths = known_lengths(case)
    if not lengths or case.seq_lens.kind == "multi_block":
        return None
    per_row = list(lengths) * (case.geometry.batch // len(lengths) or 1)
    return sum(min(case.chunk_size or n, n) for n in per_row[: case.geometry.batch])


def has_negative_slot(case: Case) -> bool:
    """Some row of ``case`` has a slot < 0 (``const(v < 0)``, or ``padded(f)`` that pads a row)."""
    mode = case.slot_mode
    if mode.kind == "const":
        return int(mode.value) < 0
    if mode.kind == "padded":
        n = rows(case)
        padded = round(float(mode.value) * n) if n is not None else float(mode.value) > 0
        return bool(padded)
    return False


def has_valid_slot(case: Case) -> bool:
    mode = case.slot_mode
    if mode.kind == "const":
        return int(mode.value) >= 0
    if mode.kind == "padded":
        n = rows(case)
        return n is None or round(float(mode.value) * n) < n
    return True


def _residues(case: Case) -> set[int]:
    P = case.geometry.page_size
    return {n % P for n in known_lengths(case)}


def _conditions() -> list[tuple[str, str, Callable[[Case], bool]]]:
    def mod(r: Callable[[int], int]) -> Callable[[Case], bool]:
        return lambda c: r(c.geometry.page_size) % c.geometry.page_size in _residues(c)

    return [
        ("slot_negative", "rows with slot < 0", has_negative_slot),
        ("warmup_const_minus_one", "serving warmup: slot_mode const(-1)",
         lambda c: c.slot_mode.kind == "const" and int(c.slot_mode.value) == -1),
        ("page_boundary_0", "a sequence ending on a page boundary (seq_len mod P = 0)", mod(lambda p: 0)),
        ("page_boundary_1", "a sequence one token into a page (seq_len mod P = 1)", mod(lambda p: 1)),
        ("page_boundary_p_minus_1", "a sequence one token short of a page (seq_len mod P = P-1)",
         mod(lambda p: p - 1)),
        ("seq_len_1", "a sequence of length 1", lambda c: 1 in known_lengths(c)),
        ("largest_position", "a sequence filling its block table (position max_pos - 1)",
         lambda c: c.max_pos in known_lengths(c)),
        ("partial_last_page", "a sequence whose last page is partly filled",
         lambda c: any(n % c.geometry.page_size for n in known_lengths(c))),
        ("random_page_order", "pages in a random order (slot_mode random)", lambda c: c.slot_mode.kind == "random"),
        ("gqa_group", "GQA: more than one query head per kv head", lambda c: c.geometry.group > 1),
        ("several_layers", "decode_layers with more than one layer",
         lambda c: c.op == "decode_layers" and c.geometry.num_layers > 1),
        ("chunked_prefill_with_context", "prefill of a chunk after context already in the cache",
         lambda c: c.op == "prefill_attention" and c.chunk_size is not None
         and shortest_length(c) > c.chunk_size),
    ]


CONDITION_NAMES = tuple(name for name, _, _ in _conditions())


def coverage(cases: Sequence[Case]) -> tuple[Condition, ...]:
    """Every boundary condition with the ids of the cases that exercise it (none: missed).  They
    are the builtin ops' (slots, pages, lengths): a spec op has none of them, so a matrix of spec
    ops only has no conditions to miss, and its spec cases are not counted against any."""
    builtin = [c for c in cases if c.spec is None]
    if not builtin:
        return ()
    return tuple(Condition(name, text, tuple(c.case_id for c in builtin if test(c)))
                 for name, text, test in _conditions())
