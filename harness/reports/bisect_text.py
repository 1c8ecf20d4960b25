"""The terminal text of a bisect: the conclusion, the reproduction probability, the tally per commit."""
from __future__ import annotations

from typing import Any

from harness.bisect.driver import BisectState
from harness.bisect.search import Conclusion


def render_bisect(state: BisectState, report: dict[str, Any]) -> list[str]:
    """The lines printed at the end of a bisect (and on ``--resume`` of a finished one)."""
    lines = []
    conclusion = report["verdict"]
    good, bad = state.commits[0], state.commits[-1]
    sig = report["signature"] or "(none seen)"
    if report["culprit"]:
        c = report["culprit"]
        lines.append(f"first bad commit: {c['sha']} {c['subject']}")
        lines.append(f"  author date {c['author_date']}; posterior {100 * report['probability']:.2f}% "
                     f"after {report['runs']} runs; signature {sig}")
    elif conclusion == Conclusion.SKIPPED_RANGE.value:
        first, last = report["range"]
        lines.append(f"the first bad commit is one of {first[:12]}..{last[:12]} (untestable commits before a bad "
                     f"one; posterior {100 * report['probability']:.2f}% after {report['runs']} runs)")
    elif conclusion == Conclusion.GOOD_SHOWS.value:
        lines.append(f"no culprit in range: the good endpoint {good.short} shows {sig} too "
                     f"(posterior {100 * report['probability']:.2f}%)")
    elif conclusion == Conclusion.NOT_REPRODUCED.value:
        lines.append(f"no culprit in range: the bad endpoint {bad.short} did not reproduce "
                     f"{'a failure' if report['signature'] is None else sig} in {report['runs']} runs")
    else:
        best = f"; most likely {report['range'][0][:12]}" if report["range"] else ""
        lines.append(f"undecided after {report['runs']} runs (best {100 * report['probability']:.1f}%{best})")
    p = report["p"]
    if p["sightings"]:
        lines.append(f"  reproduction probability p ~ {p['mean']:.2f} ({100 * p['level']:.0f}% interval "
                     f"{p['low']:.2f}-{p['high']:.2f}, {p['sightings']} sightings)")
    lines.append("  commit        runs  seen  posterior  subject")
    for t in report["tally"]:
        if not (t["runs"] or t["skipped"] or (t["posterior"] or 0) >= 0.001):
            continue
        post = "-" if t["posterior"] is None else f"{100 * t['posterior']:.2f}%"
        tag = " (good)" if t["index"] == 0 else " (bad)" if t["index"] == state.n else ""
        runs = "skip" if t["skipped"] else str(t["runs"])
        lines.append(f"  {t['sha'][:12]}  {runs:>4}  {t['sightings']:>4}  {post:>9}  {t['subject'][:60]}{tag}")
    return lines
