"""The terminal text of a bisect: the conclusion, the other failures met, the reproduction
probability, when it ran, the tally per commit."""
from __future__ import annotations

import datetime as _dt
from typing import Any

from harness.bisect.driver import BisectState
from harness.bisect.search import Conclusion


def _utc(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _span(started: float, finished: float) -> str:
    seconds = max(0, round(finished - started))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h {rest // 60:02d}m {rest % 60:02d}s" if hours else f"{rest // 60}m {rest % 60:02d}s"


def also_seen_lines(report: dict[str, Any]) -> list[str]:
    """``also seen: MISMATCH at <sha>..<sha> (commits 13..19 of 0..32; ...)``: the failures other than
    the signature that the bisect met (a finding: they count as runs without the signature)."""
    lines, n = [], len(report["tally"]) - 1
    for a in report.get("also_seen") or []:
        where = (f"{a['first'][:12]}..{a['last'][:12]}" if a["first_index"] != a["last_index"]
                 else a["first"][:12])
        commits = (f"commits {a['first_index']}..{a['last_index']}" if a["first_index"] != a["last_index"]
                   else f"commit {a['first_index']}")
        lines.append(f"also seen: {a['label']} at {where} ({commits} of 0..{n}; in {a['runs']} "
                     f"run{'s' * (a['runs'] != 1)} at {a['commits']} commit{'s' * (a['commits'] != 1)})")
        if a.get("before"):
            first, last = (sha[:12] for sha in a["before"])
            lines.append(f"  {a['label']} showed before the first bad commit too ({first if first == last else f'{first}..{last}'}): "
                         f"another bug; bisect it with --signature {a['label']}")
    return lines


SHOWN = 8         # test ids listed per line


def tests_text(ids: list[str], shown: int = SHOWN) -> str:
    """``a, b, c (and 4 more)``; ``none`` for an empty list."""
    if not ids:
        return "none"
    more = f" (and {len(ids) - shown} more)" if len(ids) > shown else ""
    return ", ".join(ids[:shown]) + more


def failing_lines(report: dict[str, Any]) -> list[str]:
    """What failed at the culprit and at bad, and a warning when that differs: a suite bisect whose
    culprit breaks other tests than bad fails has likely found another regression than the one meant."""
    failing = report.get("failing")
    if not failing:
        return []
    lines = []
    for where in ("culprit", "bad"):
        ids = failing.get(where)
        lines.append(f"failing at {where}: {'(not run there)' if ids is None else tests_text(ids)}")
    culprit_only, bad_only = failing.get("culprit_only"), failing.get("bad_only")
    if culprit_only is None or bad_only is None:
        return lines
    if culprit_only and bad_only:
        head = "the culprit fails tests that bad does not, and the other way round"
    elif culprit_only:
        head = "the culprit fails tests that bad does not"
    else:
        head = "bad fails tests that the culprit does not"
    parts = ([f"only at the culprit: {tests_text(culprit_only)}"] if culprit_only else []) + \
            ([f"only at bad: {tests_text(bad_only)}"] if bad_only else [])
    lines.append(f"warning: {head}: {'; '.join(parts)}; this may be another regression than the one you "
                 f"track: bisect it with --test NODEID")
    return lines


def render_bisect(state: BisectState, report: dict[str, Any], *, started: float | None = None,
                  finished: float | None = None) -> list[str]:
    """The lines printed at the end of a bisect (and on ``--resume`` of a finished one); ``started``
    and ``finished`` are the bisect's own (a resumed bisect started when it was first started)."""
    lines = []
    conclusion = report["verdict"]
    good, bad = state.commits[0], state.commits[-1]
    sig = report["signature"] or "(none seen)"
    if report["culprit"]:
        c = report["culprit"]
        lines.append(f"first bad commit: {c['sha']} {c['subject']}")
        lines.append(f"  author date {c['author_date']}; posterior {100 * report['probability']:.2f}% "
                     f"after {report['runs']} runs; signature {sig}")
        if report.get("deterministic") is not None:
            lines.append(f"  deterministic: every run at a bad commit showed {sig}; every earlier culprit is ruled "
                         f"out whatever p is (likelihood ratio {report['deterministic']:.2g})")
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
    lines += ["  " + line for line in failing_lines(report)]
    failure = report.get("failure")
    if failure:             # a command's FAILED says nothing of why: what it printed does
        lines.append(f"  {failure['label']} of {failure['case_id']} at {failure['ref']}; it printed:")
        lines += [f"    {line}" for line in failure["text"].splitlines()]
    lines += ["  " + line for line in also_seen_lines(report)]
    p = report["p"]
    if p["sightings"]:
        lines.append(f"  reproduction probability p ~ {p['mean']:.2f} ({100 * p['level']:.0f}% interval "
                     f"{p['low']:.2f}-{p['high']:.2f}, {p['sightings']} sightings"
                     + (f"; prior {p['prior_sightings']:g} of {p['prior_runs']:g} earlier runs" if p.get("prior_runs")
                        else "") + ")")
    if started is not None and finished is not None:
        lines.append(f"  started {_utc(started)}, finished {_utc(finished)} ({_span(started, finished)})")
    lines.append("  commit        runs  seen  posterior  subject")
    for t in report["tally"]:
        if not (t["runs"] or t["skipped"] or (t["posterior"] or 0) >= 0.001):
            continue
        post = "-" if t["posterior"] is None else f"{100 * t['posterior']:.2f}%"
        tag = " (good)" if t["index"] == 0 else " (bad)" if t["index"] == state.n else ""
        runs = "skip" if t["skipped"] else str(t["runs"])
        lines.append(f"  {t['sha'][:12]}  {runs:>4}  {t['sightings']:>4}  {post:>9}  {t['subject'][:60]}{tag}")
    return lines


# -- the pieces every report of a bisect shows (Markdown, HTML): plain text, escaped by the renderer --

TALLY_COLUMNS = ["commit", "runs", "sightings", "posterior", "subject"]


def headline(report: dict[str, Any]) -> tuple[str, tuple[str, str, str] | None, str]:
    """``(label, (sha, subject, date) of the culprit or None, tail)``: "First bad commit" and the
    culprit with ``, posterior 99.12% after 9 runs``, or the verdict with `` after 9 runs (best 61.0%)``."""
    if report.get("culprit"):
        c = report["culprit"]
        return ("First bad commit", (c["sha"][:12], c["subject"], c["author_date"]),
                f", posterior {100 * report['probability']:.2f}% after {report['runs']} runs")
    return report["verdict"], None, f" after {report['runs']} runs (best {100 * report['probability']:.1f}%)"


def p_parts(report: dict[str, Any]) -> tuple[str, str] | None:
    """``(signature, "; reproduction probability 0.92 (90% interval 0.71-0.99)")``, None before any sighting."""
    p = report.get("p") or {}
    if not p.get("sightings"):
        return None
    return (report.get("signature") or "-",
            f"; reproduction probability {p['mean']:.2f} ({100 * p['level']:.0f}% interval {p['low']:.2f}-{p['high']:.2f})")


def tally_rows(report: dict[str, Any]) -> list[list[str]]:
    """The commits that ran (or were skipped), as ``TALLY_COLUMNS`` rows."""
    return [[t["sha"][:12], str(t["runs"]) if not t["skipped"] else "skipped", str(t["sightings"]),
             "-" if t["posterior"] is None else f"{100 * t['posterior']:.2f}%", t["subject"]]
            for t in report.get("tally", []) if t["runs"] or t["skipped"]]
