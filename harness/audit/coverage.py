"""Which boundary conditions a matrix exercises, from its expanded cases alone (no kernel runs).

Lengths drawn from the seed (``uniform``, and ``multi_block`` with fewer rows than
boundary shapes) are not credited: which ones a case gets is known only when its
inputs are generated, and an audit that claims a condition on a chance draw
would hide the gap it exists to show.

The conditions are the op packs' (``Pack.conditions``): a matrix is held to those of the packs
its cases' ops come from, in the packs' order.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness import packs
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
    """Rows one launch writes, as its pack counts them (``Pack.rows``; None when it depends on drawn
    lengths); a pack that declares no count, or a spec op: the batch."""
    count = packs.pack_of(case.op).rows if case.spec is None and packs.find(case.op) else None
    return count(case) if count is not None else case.geometry.batch


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


def conditions() -> tuple[tuple[str, str, Callable[[Case], bool]], ...]:
    """Every pack's boundary conditions, ``(name, text, test)``, in the packs' order."""
    return tuple(c for pack in packs.packs() for c in pack.conditions)


def __getattr__(name: str):
    """``CONDITION_NAMES``, read from the packs when first asked (a pack imports the helpers here)."""
    if name == "CONDITION_NAMES":
        return tuple(name for name, _, _ in conditions())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def coverage(cases: Sequence[Case]) -> tuple[Condition, ...]:
    """Every boundary condition of the packs the cases' ops come from, with the ids of the cases of
    that pack that exercise it (none: missed).  A spec op has none of them, so a matrix of spec
    ops only has no conditions to miss, and its spec cases are not counted against any."""
    by_pack: dict[str, list[Case]] = {}
    for c in cases:
        if c.spec is None:
            by_pack.setdefault(packs.pack_of(c.op).name, []).append(c)
    return tuple(Condition(name, text, tuple(c.case_id for c in by_pack[pack.name] if test(c)))
                 for pack in packs.packs() if pack.name in by_pack for name, text, test in pack.conditions)
