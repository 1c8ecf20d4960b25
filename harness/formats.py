"""Numbers and messages as text, the same everywhere they are shown."""
from __future__ import annotations

from typing import Any


def pct(x: Any) -> str:
    """A rate as a percentage: ``0%``, ``20.0%``, ``0.042%`` (two significant digits below 0.1%);
    ``-`` for what is not a number (None, NaN)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool) or x != x:
        return "-"
    if x in (0, 1):
        return f"{100 * x:.0f}%"
    return f"{100 * x:.2g}%" if x < 0.001 else f"{100 * x:.1f}%"


def one_line(text: str) -> str:
    """``text`` with every run of whitespace, newlines included, as one space: an error fits its line."""
    return " ".join(text.split())
