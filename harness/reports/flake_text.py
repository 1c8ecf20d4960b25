"""Flake hunts as terminal text: plain lines, as engineers write them."""
from __future__ import annotations

from harness.flake.changes import CaseChange, Side
from harness.flake.summary import HuntSummary
from harness.formats import pct
from harness.outcomes import Result

DETERMINISM_REPORT_LINES = 12


def iteration_line(result: Result, show_case: bool) -> str:
    """``iter 3: PASS 0.41 s`` / ``iter 4: FAIL_507018 0.12 s  <summary>``."""
    who = f"{result.case_id} " if show_case else ""
    line = f"{who}iter {result.repeat}: {result.label} {result.duration_s:.2f} s"
    det = result.metrics.get("determinism")
    if isinstance(det, dict) and det.get("identical") is False:
        names = ", ".join(d["name"] for d in det.get("differs", []))
        line += f"  [bits differ from iter {det.get('baseline_repeat')}: {names}]"
    if result.outcome.failed:
        line += f"  {result.summary}"
    return line


def outcome_phrase(s: HuntSummary) -> str:
    """``9 clean, 1 near-tie, 0 hard failures`` (+ the failures by label)."""
    hard = s.hard_failures
    text = f"{s.clean} clean, {s.near_tie} near-tie, {s.failures} hard failure{'s' * (s.failures != 1)}"
    if hard:
        text += " (" + ", ".join(f"{n} {label}" for label, n in hard.items()) + ")"
    return text


def rate_phrase(s: HuntSummary) -> str:
    n, k = s.total, s.failures
    level = f"{100 * s.conf:g}%"
    if n == 0:
        return "no runs: nothing can be said about the failure rate"
    if k == 0:
        text = f"0 failures in {n} runs: failure rate <= {pct(s.upper_one_sided)} at {level}"
        if s.more_runs_for_target is not None:
            more, target = s.more_runs_for_target, pct(s.target_rate)
            text += (f"; {more} more clean runs would bound it at {target}" if more
                     else f"; that already bounds it at {target}")
        return text
    w, cp = s.wilson, s.clopper_pearson
    return (f"failure rate {pct(s.rate)} ({k}/{n}); {level} Wilson [{pct(w[0])}, {pct(w[1])}], "
            f"exact (Clopper-Pearson) [{pct(cp[0])}, {pct(cp[1])}]")


def summary_lines(case_id: str, s: HuntSummary) -> list[str]:
    lines = [f"{case_id}: {s.total} runs on {', '.join(s.devices) or '-'}"
             + (f" ({s.skipped} skipped)" if s.skipped else ""),
             f"  {outcome_phrase(s)}", f"  {rate_phrase(s)}"]
    if len(s.by_device) > 1:   # a flake on one device only is a hardware or placement clue
        lines.append("  per device: " + ", ".join(f"{d} {t.failures}/{t.runs} failed"
                                                  for d, t in s.by_device.items()))
    f = s.first_failure
    if f:
        lines.append(f"  first failure: iter {f.repeat} seed {f.seed}: {f.label}: {f.summary}")
        if f.log:
            lines.append(f"    log: {f.log}")
    det = s.determinism
    if det:
        lines.append(f"  determinism: {det.summary}")
        if det.first and det.first.report:
            lines.extend("    " + line for line in det.first.report.splitlines()[:DETERMINISM_REPORT_LINES])
    return lines


def change_line(row: CaseChange) -> str:
    """``a: 10/20 failed (50.0%) -> 0/20 failed (0%); Fisher exact p = 0.000436: fixed``."""
    def side(x: Side) -> str:
        return f"{x.failures}/{x.runs} failed ({pct(x.rate)})"
    return (f"{row.case_id}: {side(row.before)} -> {side(row.after)}; Fisher exact p = "
            f"{row.p_value:.3g}: {row.change.describe()}")


def changes_markdown(before: str, after: str, rows: list[CaseChange]) -> str:
    """``flake --compare --markdown``: the same rows as a table for a PR comment."""
    from harness.reports.markdown import escape

    def side(x: Side) -> str:
        return f"{x.failures}/{x.runs} failed ({pct(x.rate)})"
    lines = ["## Harness flake compare", "", f"before `{escape(before)}`, after `{escape(after)}`", "",
             "| case | before | after | Fisher exact p | change |", "|---|---|---|---:|---|"]
    lines += [f"| {escape(r.case_id)} | {escape(side(r.before))} | {escape(side(r.after))} | {r.p_value:.3g} | "
              f"{escape(r.change.describe())} |" for r in rows]
    return "\n".join(lines) + "\n"
