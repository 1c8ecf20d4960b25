"""The compare table's cells and verdicts, from results made by hand."""
from __future__ import annotations

import pytest

from harness.refs import compare as refcompare
from harness.outcomes import Outcome, Result


def _results(ref: str, outcomes: list[tuple[Outcome, object]], case_id: str = "m[a=1]") -> list[Result]:
    return [Result(case_id=case_id, matrix="m", outcome=o, code=code, repeat=i, ref=ref)
            for i, (o, code) in enumerate(outcomes)]


P, F = (Outcome.PASS, None), (Outcome.DEVICE_FAULT, 507018)


def _cell(results: list[Result]) -> str:
    ref = results[0].ref
    return refcompare.table(results, [ref])[0].cells[ref]


def test_cells_read_like_the_pasted_tables():
    assert _cell(_results("up", [F] * 5)) == "0/5 PASS, 5/5 FAIL_507018"
    assert _cell(_results("fix", [P] * 5)) == "5/5 PASS"
    mixed = _results("x", [P, P, (Outcome.NEAR_TIE, None), (Outcome.MISMATCH, None), F, F])
    assert _cell(mixed) == "3/6 PASS (2 clean, 1 near-tie), 2/6 FAIL_507018, 1/6 MISMATCH"
    assert _cell(_results("x", [(Outcome.SKIPPED, None)] * 2)) == "2 skipped"
    assert _cell(_results("x", [P, (Outcome.SKIPPED, None)])) == "1/1 PASS"


@pytest.mark.parametrize("up, fix, word", [
    ([F] * 5, [P] * 5, "fixed"),
    ([F] * 10, [F] + [P] * 9, "improved"),
    ([P] * 5, [F] * 5, "regressed"),
    ([P] * 5, [P] * 5, "unchanged (clean)"),
    ([F] * 5, [F] * 5, "unchanged (failing)"),
    ([F] * 5, [(Outcome.HANG, None)] * 5, "changed (failing differently)"),
    ([P, P, F], [P, F, F], "flaky"),
    ([F], [P], "too few runs to tell"),
])
def test_verdicts(up, fix, word):
    rows = refcompare.table(_results("up", up) + _results("fix", fix), ["up", "fix"])
    assert isinstance(rows[0].verdict, refcompare.RefVerdict) and rows[0].verdict.describe() == word
    assert rows[0].to_json()["verdict"] == word
    if word in ("fixed", "regressed"):
        assert rows[0].p_value < 0.05


def test_table_keeps_every_ref_column_even_without_results():
    rows = refcompare.table(_results("up", [P] * 2), ["up", "fix"])
    assert rows[0].cells == {"up": "2/2 PASS", "fix": "-"} and rows[0].verdict.describe() == "no runs"
    assert "no runs" in refcompare.verdict_detail(rows[0], ["up", "fix"])
