"""The terminal reporter: live view on a terminal, plain lines otherwise, failures grouped by outcome."""
from __future__ import annotations

import io

from rich.console import Console

from harness.outcomes import Outcome, Result
from harness.document.summary import summarize
from harness.reports.terminal import Reporter

RESULTS = [Result(case_id=f"m[i={i}][bold]x[/bold]", outcome=o, device=f"npu:{i % 2}", summary=f"why {i} [red]",
                  duration_s=0.5) for i, o in enumerate([Outcome.PASS, Outcome.MISMATCH, Outcome.HANG,
                                                         Outcome.MISMATCH])]


def _run(reporter: Reporter) -> None:
    with reporter:
        for r in RESULTS:
            reporter.started(r.case_id, r.device)
            reporter.finished(r)
    reporter.final(RESULTS, summarize(RESULTS))


def test_live_view_shows_the_case_per_device_and_groups_failures():
    buf = io.StringIO()
    reporter = Reporter(total=4, console=Console(file=buf, force_terminal=True, width=140))
    with reporter:
        reporter.started(RESULTS[0].case_id, "npu:0")
        reporter.started(RESULTS[1].case_id, "npu:1")
        rendered = Console(file=io.StringIO(), width=140, record=True)
        rendered.print(reporter._render())
        live = rendered.export_text()
        assert "npu:0: m[i=0][bold]x[/bold]" in live and "npu:1: m[i=1][bold]x[/bold]" in live
        assert "0/4" in live and "0 failed" in live and "eta" in live
        for r in RESULTS:
            reporter.finished(r)
    reporter.final(RESULTS, summarize(RESULTS))
    out = buf.getvalue()
    assert "Failures, by outcome" in out
    out = out[out.index("Failures, by outcome"):]
    # grouped: HANG before MISMATCH (sorted by label), each MISMATCH case listed, markup shown as text
    assert out.index("m[i=2][bold]x[/bold]") < out.index("m[i=1][bold]x[/bold]") < out.index("m[i=3][bold]x[/bold]")
    assert "why 1 [red]" in out


def test_plain_mode_writes_one_line_per_case_without_escape_codes(capsys):
    _run(Reporter(total=4, plain=True, console=Console(file=io.StringIO(), no_color=True)))
    out = capsys.readouterr().out
    assert "[2/4] MISMATCH       m[i=1][bold]x[/bold] (0.50 s)\n    why 1 [red]" in out
    assert "\x1b[" not in out


def test_the_final_report_prints_each_failing_cases_log_path_whole():
    long_dir = "/tmp/" + "deep/" * 30
    results = [Result(case_id="m[i=0]", outcome=Outcome.PASS, log=f"{long_dir}m0.r0.log"),
               Result(case_id="m[i=1]", outcome=Outcome.MISMATCH, log=f"{long_dir}m1.r0.log"),
               Result(case_id="m[i=2]", outcome=Outcome.HANG, repeat=3, log=f"{long_dir}m2.r3.log"),
               Result(case_id="m[i=3]", outcome=Outcome.CRASH)]
    buf = io.StringIO()
    Reporter(total=4, plain=True, console=Console(file=buf, width=80)).final(results, summarize(results))
    out = buf.getvalue()
    assert "logs of the failing cases:" in out
    assert f"  m[i=1]: {long_dir}m1.r0.log\n" in out          # never folded, however long
    assert f"  m[i=2] (iter 3): {long_dir}m2.r3.log\n" in out
    assert "m0.r0.log" not in out                               # a passing case's log is not listed
