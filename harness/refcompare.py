"""`harness compare`: the same cases × N on several kernel refs, as the table engineers paste.

Rows are cases, columns are refs, a cell counts each label over the repeats
(``5/5 PASS`` or ``0/5 PASS, 5/5 FAIL_507018``).  The verdict per case sets the
first ref (the baseline: upstream, the last good fix point) against the last
one (the candidate) with the flake statistics of ``harness.flake``: a Fisher
exact test on the failure counts, plus the failure rate and its interval on
every ref.
"""
from __future__ import annotations

from harness import flake
from harness.outcomes import Outcome, Result
from harness.reports.document import cell_text, label_counts

SIGNIFICANCE = 0.05
VERDICTS = ("fixed", "improved", "regressed", "flaky", "unchanged (clean)", "unchanged (failing)",
            "changed (failing differently)", "too few runs to tell", "no runs")


def cell(results: list[Result]) -> str:
    """``5/5 PASS`` / ``0/5 PASS, 5/5 FAIL_507018`` / ``3/5 PASS, 1/5 NEAR_TIE, 1/5 MISMATCH``."""
    ran = [r for r in results if r.outcome is not Outcome.SKIPPED]
    if not ran:
        return f"{len(results)} skipped" if results else "-"
    return cell_text(label_counts(ran))


def verdict(before: dict, after: dict, alpha: float = SIGNIFICANCE) -> tuple[str, float]:
    """The candidate (``after``) against the baseline (``before``); both are flake summaries.
    ``flake.verdict`` decides what the Fisher test can; the rest is told apart here."""
    fa, na, fb, nb = before["failures"], before["total"], after["failures"], after["total"]
    if na == 0 or nb == 0:
        return "no runs", 1.0
    word, p = flake.verdict(before, after, alpha)
    if word == "clean in both":
        return "unchanged (clean)", p
    if word == "fixed":
        return ("fixed" if fb == 0 else "improved"), p
    if word == "regressed":
        return word, p
    if 0 < fa < na or 0 < fb < nb:
        return "flaky", p
    if fa == na and fb == nb:
        same = _failure_labels(before) == _failure_labels(after)
        return ("unchanged (failing)" if same else "changed (failing differently)"), p
    return "too few runs to tell", p


def _failure_labels(summary: dict) -> set[str]:
    return {label for label in summary["counts"] if label not in (Outcome.PASS.value, Outcome.NEAR_TIE.value)}


def table(results: list[Result], ref_names: list[str]) -> list[dict]:
    """One row per case id (in first-seen order): cells and flake summaries per ref, and the verdict."""
    by_case: dict[str, dict[str, list[Result]]] = {}
    for r in results:
        by_case.setdefault(r.case_id, {}).setdefault(r.ref or "", []).append(r)
    rows = []
    for case_id, per_ref in by_case.items():
        summaries = {name: flake.summarize_case(per_ref.get(name, [])) for name in ref_names}
        word, p = verdict(summaries[ref_names[0]], summaries[ref_names[-1]]) if len(ref_names) > 1 else ("", 1.0)
        rows.append({"case_id": case_id, "matrix": next(iter(per_ref.values()))[0].matrix,
                     "cells": {name: cell(per_ref.get(name, [])) for name in ref_names},
                     "flake": summaries, "verdict": word, "p_value": p})
    return rows


def verdict_detail(row: dict, ref_names: list[str]) -> str:
    """``fixed: upstream 100% (95% CI 48-100%) -> fix 0% (<= 45%), Fisher p = 0.0079``."""
    def rate(s: dict) -> str:
        if s["total"] == 0:
            return "no runs"
        if s["failures"] == 0:
            return f"0% (<= {100 * s['upper_one_sided']:.0f}%)"
        lo, hi = s["clopper_pearson"]
        return f"{100 * s['rate']:.0f}% (95% CI {100 * lo:.0f}-{100 * hi:.0f}%)"
    first, last = ref_names[0], ref_names[-1]
    return (f"{row['verdict']}: {first} {rate(row['flake'][first])} -> {last} {rate(row['flake'][last])}, "
            f"Fisher p = {row['p_value']:.3g}")
