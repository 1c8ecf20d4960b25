"""The table of intermediates as the reports print it (torch-free: rendered in the front end).

Reads a result's ``metrics["intermediates"]`` (``harness.worker.dumps.Collector.to_metrics``)
and gives header and rows of plain strings; each report format draws them its own way.  A
table longer than ``limit`` keeps every ``bad`` row, the rows of the first bad one's layer and
those outside any layer (``final_norm``), and counts what it left out.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

HEADER = ["intermediate", "verdict", "cosine", "ratio", "max abs", "max rel", ">1/1000", ">5/1000", "bad", "where"]
LIMIT = 24


def data(metrics: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The intermediates of a result's metrics, or None when it dumped none."""
    found = metrics.get("intermediates") if isinstance(metrics, Mapping) else None
    return found if isinstance(found, Mapping) and found.get("rows") else None


def rows(found: Mapping[str, Any], limit: int = LIMIT) -> tuple[list[list[str]], str]:
    """The table's rows and a line saying what was left out ("" when nothing)."""
    all_rows = [r for r in found.get("rows", ()) if isinstance(r, Mapping)]
    shown = all_rows
    if len(all_rows) > limit:
        layer = next((r.get("layer") for r in all_rows if r.get("name") == found.get("first_bad_intermediate")), None)
        keep = [r for r in all_rows if r.get("verdict") == "bad" or r.get("layer") is None
                or (layer is not None and r.get("layer") == layer)]
        shown = keep[:limit]
    left = len(all_rows) - len(shown)
    counts: dict[str, int] = {}
    for r in all_rows:
        if r not in shown:
            counts[r.get("verdict", "?")] = counts.get(r.get("verdict", "?"), 0) + 1
    note = (f"{left} more not shown: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))) if left else ""
    return [_row(r) for r in shown], note


def _row(r: Mapping[str, Any]) -> list[str]:
    m = r.get("metrics") or {}
    if r.get("verdict") in ("missing", "refused", "not compared"):   # nothing measured
        return [str(r.get("name")), str(r.get("verdict"))] + [""] * (len(HEADER) - 2)
    return [str(r.get("name")), str(r.get("verdict")), _num(m.get("cosine"), ".6f"), ratio(m), _num(m.get("max_abs")),
            _num(m.get("max_rel")), _permille(m.get("over_0.001")), _permille(m.get("over_0.005")),
            _percent(m.get("bad_ratio")), where(m)]


def ratio(m: Mapping[str, Any]) -> str:
    """``20.3 (20.1-20.4)``: the median actual / golden and its p10-p90, or ``-``."""
    r, lo, hi = m.get("ratio"), m.get("ratio_p10"), m.get("ratio_p90")
    if not isinstance(r, (int, float)):
        return "-"
    return f"{r:.3g} ({lo:.3g}-{hi:.3g})" if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else f"{r:.3g}"


def where(m: Mapping[str, Any]) -> str:
    """``head [0, 1]; 12 NaN/Inf``: the indices of each localised axis that hold bad elements."""
    parts = [m["note"]] if m.get("note") else []
    for axis, ratios in (m.get("localisation") or {}).items():
        bad = [i for i, x in enumerate(ratios) if isinstance(x, (int, float)) and not math.isnan(x) and x > 0]
        if bad and axis != "row":
            parts.append(f"{axis} {_span(bad, len(ratios))}")
        elif bad:
            parts.append(f"{len(bad)}/{len(ratios)} rows")
    return "; ".join(parts)


def _span(indices: Sequence[int], n: int) -> str:
    if len(indices) == n:
        return "all"
    if len(indices) > 1 and indices[-1] - indices[0] == len(indices) - 1:
        return f"{indices[0]}-{indices[-1]}"
    shown = ", ".join(map(str, indices[:8]))
    return f"[{shown}{', ...' if len(indices) > 8 else ''}]"


def _num(x: Any, fmt: str = ".4g") -> str:
    return format(x, fmt) if isinstance(x, (int, float)) and not (isinstance(x, float) and math.isnan(x)) else "-"


def _permille(x: Any) -> str:
    return f"{1000 * x:.1f}‰" if isinstance(x, (int, float)) else "-"


def _percent(x: Any) -> str:
    return f"{100 * x:.1f}%" if isinstance(x, (int, float)) else "-"


def head_map(found: Mapping[str, Any], limit: int = 64) -> dict[str, Any] | None:
    """The bad-element ratio per intermediate (down) and query head (across), as a ratio map the
    HTML figures draw (``harness/reports/heatmap.py``), or None when no dumped intermediate is bad
    or none is localised per head.  A KV head's ratio is drawn under each query head that reads it
    (query head ``h`` reads KV head ``h // (Hq / Hkv)``)."""
    rows = [r for r in found.get("rows", ()) if isinstance(r, Mapping) and r.get("verdict") not in ("missing", "refused")]
    per_head = []
    for r in rows:
        loc = (r.get("metrics") or {}).get("localisation") or {}
        ratios = loc.get("head") or loc.get("kv_head")
        if isinstance(ratios, list) and ratios:
            per_head.append((str(r.get("name")), "head" in loc, [x if isinstance(x, (int, float)) else math.nan
                                                                  for x in ratios]))
    heads = max((len(x) for _, is_q, x in per_head if is_q), default=0)
    if not heads or not any(r.get("verdict") in ("bad", "inherited") for r in rows):
        return None
    grid, names = [], []
    for name, is_q, ratios in per_head[:limit]:
        if not is_q:
            group = max(1, heads // len(ratios))
            ratios = [ratios[min(h // group, len(ratios) - 1)] for h in range(heads)]
        if len(ratios) != heads:
            continue
        grid.append([None if math.isnan(x) else x for x in ratios])
        names.append(name)
    return {"ratio": grid, "axes": ["intermediate", "head"], "size": [len(grid), heads], "block": [1, 1],
            "shape": [len(grid), heads], "names": names}


def text(found: Mapping[str, Any], limit: int = LIMIT) -> str:
    """The table as aligned plain text (JUnit, the terminal), its headline first."""
    body, note = rows(found, limit)
    widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(HEADER)]
    lines = [str(found.get("headline", ""))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [HEADER, *body]]
    if note:
        lines.append(note)
    lines += [f"note: {n}" for n in found.get("notes") or ()]
    return "\n".join(lines)
