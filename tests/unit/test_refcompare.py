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


def test_a_flaky_verdict_says_how_many_runs_per_ref_would_decide_it():
    # 0/10 against 4/10: Fisher p = 0.087, not significant; 16 runs a side give 80% power at 0% vs 40%
    rows = refcompare.table(_results("up", [P] * 10) + _results("fix", [F] * 4 + [P] * 6), ["up", "fix"])
    row = rows[0]
    assert row.verdict is refcompare.RefVerdict.FLAKY and row.runs_to_decide == 16
    assert "16 runs per ref would decide it (80% power at these rates)" in refcompare.verdict_detail(row, ["up", "fix"])
    assert row.to_json()["runs_to_decide"] == 16
    from harness.reports.markdown import _verdict
    assert "16 runs per ref would decide it" in _verdict(row.to_json()).replace("\\", "")
    same = refcompare.table(_results("up", [F] * 2 + [P] * 8) + _results("fix", [F] * 2 + [P] * 8), ["up", "fix"])[0]
    assert same.verdict is refcompare.RefVerdict.FLAKY and same.runs_to_decide is None
    assert "more than 1000 runs per ref" in refcompare.verdict_detail(same, ["up", "fix"])
    fixed = refcompare.table(_results("up", [F] * 5) + _results("fix", [P] * 5), ["up", "fix"])[0]
    assert fixed.runs_to_decide is None and "would decide" not in refcompare.verdict_detail(fixed, ["up", "fix"])


def _command_failure(ref: str, i: int, output: str, case_id: str = "repro") -> Result:
    report = f"$ python repro.py\n(cwd /src/serving; exit status 1; {len(output)} bytes of output)\n{output}"
    return Result(case_id=case_id, matrix="repro", outcome=Outcome.FAILED, summary="exited with status 1",
                  report=report, metrics={"command": {"command": "python repro.py"}}, repeat=i, ref=ref)


def test_a_command_failing_on_every_ref_shows_what_it_printed():
    output = "Traceback (most recent call last):\n  File \"repro.py\", line 3\nModuleNotFoundError: No module named 'pypto'\n"
    results = [_command_failure(ref, i, output) for ref in ("up", "fix") for i in range(3)]
    [row] = refcompare.table(results, ["up", "fix"])
    assert row.verdict is refcompare.RefVerdict.UNCHANGED_FAILING and row.cells["fix"] == "0/3 PASS, 3/3 FAILED (exited with status 1)"
    assert row.failure.splitlines()[-1] == "ModuleNotFoundError: No module named 'pypto'"
    assert row.to_json()["failure"] == row.failure
    from harness.reports.markdown import _failing_everywhere
    md = "\n".join(_failing_everywhere({"compare": [row.to_json()]}))
    assert "Failing on every ref" in md and "No module named 'pypto'" in md
    # passing somewhere, or a kernel case: the cells say enough
    ok = Result(case_id="repro", matrix="repro", outcome=Outcome.PASS, repeat=3, ref="fix")
    assert refcompare.table(results + [ok], ["up", "fix"])[0].failure is None
    assert refcompare.table(_results("up", [F] * 2) + _results("fix", [F] * 2), ["up", "fix"])[0].failure is None


def test_changed_keeps_the_rows_whose_verdict_is_not_unchanged_and_the_title_counts_what_ran(capsys):
    from harness.cli.compare import _print_compare, ran_per_ref
    from harness.refs.git import Commit
    results = (_results("up", [P] * 6, "clean") + _results("fix", [P] * 6, "clean")
               + _results("up", [F] * 6, "broken") + _results("fix", [F] * 6, "broken")
               + _results("up", [F] * 6, "mended") + _results("fix", [P] * 3, "mended"))
    rows = refcompare.table(results, ["up", "fix"])
    assert [r.case_id for r in rows if r.changed] == ["mended"]
    assert ran_per_ref(results) == "3-6 runs per case per ref"
    assert ran_per_ref(results[:12]) == "6 runs per case per ref"
    commits = [(n, Commit(sha=c * 40, subject="s", author_date="d", author="a"))
               for n, c in (("up", "a"), ("fix", "b"))]
    _print_compare([r for r in rows if r.changed], commits, ran_per_ref(results), hidden=2)
    out = capsys.readouterr().out
    assert "mended" in out and "clean" not in out and "broken" not in out
    assert "3-6 runs per case per ref; 2 unchanged cases not shown (--changed)" in " ".join(out.split())
