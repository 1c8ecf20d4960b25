"""What every run's summary counts, and the strict JSON every stored or written value passes through.

Below the stores and the report writers: the session, the ref runner, the
store, shard merging and the pytest plugin all summarise results the same way.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any, Iterable

from harness.outcomes import Outcome, Result


def strict_json(value: Any) -> Any:
    """Strict JSON: NaN becomes null, infinities the strings "Infinity"/"-Infinity"."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def summarize(results: Iterable[Result]) -> dict:
    """The ``summary`` of a report document and of a stored run (docs/json-schema.md)."""
    results = list(results)
    labels = Counter(r.label for r in results)
    outcomes = Counter(r.outcome.value for r in results)
    golden_computed = sum(1 for r in results if r.metrics.get("golden_cache_hit") is False)
    golden_hits = sum(1 for r in results if r.metrics.get("golden_cache_hit") is True)
    return {
        "total": len(results),
        "passed": sum(r.outcome.passed for r in results),
        "failed": sum(r.outcome.failed for r in results),
        "skipped": outcomes.get(Outcome.SKIPPED.value, 0),
        "counts": dict(sorted(labels.items())),
        "outcomes": dict(sorted(outcomes.items())),
        "duration_s": round(sum(r.duration_s for r in results), 6),
        "golden_cache": {"computed": golden_computed, "hits": golden_hits},
    }
