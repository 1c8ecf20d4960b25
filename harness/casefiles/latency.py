"""A case file's ``latency:`` block: its cases are timed after their checks pass, with these settings
(docs/latency.md; ``--latency`` times every case, with the block's settings where a file gives one).

    latency: {target: 0.02, budget_s: 1.0, warmup_s: 0.1, cold: true, restore: false, clock: cpu}

``latency: true`` takes the defaults.  Every field is checked here, with its file and line.
"""
from __future__ import annotations

import math
from dataclasses import fields

from harness.case import LatencySpec
from harness.casefiles.located import Node
from harness.casefiles.values import CaseFileError, check_keys

FIELDS = tuple(f.name for f in fields(LatencySpec))
CLOCKS = ("auto", "cpu", "wall")
_BOUNDS = {"target": (0.0, 1.0), "budget_s": (0.0, 3600.0), "warmup_s": (-1e-300, 600.0)}


def _number(key: str, n: Node) -> float:
    if n.kind != "scalar" or isinstance(n.value, bool) or not isinstance(n.value, (int, float)):
        raise CaseFileError.at(n.where, f"expected a number, got {n.describe()}")
    lo, hi = _BOUNDS[key]
    v = float(n.value)
    if not (math.isfinite(v) and lo < v <= hi):
        raise CaseFileError.at(n.where, f"must be in {'[0' if lo < 0 else f'({lo:g}'}, {hi:g}], got {n.value}")
    return v


def _count(key: str, n: Node) -> int:
    if n.kind != "scalar" or isinstance(n.value, bool) or not isinstance(n.value, int) or not 1 <= n.value <= 10**6:
        raise CaseFileError.at(n.where, f"expected an integer from 1 to 1000000, got {n.describe()}")
    return n.value


def _flag(key: str, n: Node) -> bool:
    if n.kind != "scalar" or not isinstance(n.value, bool):
        raise CaseFileError.at(n.where, f"expected true or false, got {n.describe()}")
    return n.value


def parse_latency(n: Node) -> LatencySpec | None:
    """``true``/a mapping → the spec; ``false`` → None (not timed unless ``--latency``)."""
    if n.kind == "scalar" and isinstance(n.value, bool):
        return LatencySpec() if n.value else None
    if n.kind != "map":
        raise CaseFileError.at(n.where, f"expected true, false or a mapping of {', '.join(FIELDS)}, "
                                        f"got {n.describe()}")
    check_keys(n, FIELDS, "latency field")
    given = {}
    for key, child in n.value.items():
        if key in ("target", "budget_s", "warmup_s"):
            given[key] = _number(key, child)
        elif key in ("min_samples", "max_samples"):
            given[key] = _count(key, child)
        elif key == "clock":
            if child.kind != "scalar" or child.value not in CLOCKS:
                raise CaseFileError.at(child.where, f"one of {', '.join(CLOCKS)}, got {child.describe()}")
            given[key] = child.value
        else:
            given[key] = _flag(key, child)
    spec = LatencySpec(**given)
    if spec.min_samples > spec.max_samples:
        raise CaseFileError.at(n.where, f"min_samples {spec.min_samples} > max_samples {spec.max_samples}")
    return spec
