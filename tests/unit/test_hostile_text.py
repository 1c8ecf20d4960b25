"""Text from kernels and case files printed to the terminal cannot act on it (issue 13, item 12)."""
from __future__ import annotations

import io

from rich.console import Console

from harness.cli import main
from harness.formats import printable
from harness.outcomes import Outcome, Result
from harness.reports.terminal import Reporter
from harness.document.summary import summarize

HOSTILE = "m[a=\x1b[2J\x1b]0;pwned\x07]"
SUMMARY = "boom\r\x1b[31moverwritten\x9b"


def test_printable_escapes_controls_and_keeps_plain_text():
    assert printable(HOSTILE) == "m[a=\\x1b[2J\\x1b]0;pwned\\x07]"
    assert printable(SUMMARY) == "boom\\x0d\\x1b[31moverwritten\\x9b"
    assert printable("tab\tand\nnewline stay, é and 中 too") == "tab\tand\nnewline stay, é and 中 too"
    assert printable("\ud800") == "\\ud800"
    assert printable(3) == "3"


def _results():
    return [Result(case_id=HOSTILE, outcome=Outcome.MISMATCH, device="cpu", summary=SUMMARY, duration_s=0.1,
                   log="/logs/\x1b[1m.log")]


def test_plain_reporter_output_has_no_raw_escape(capsys):
    results = _results()
    buf = io.StringIO()
    reporter = Reporter(total=1, plain=True, console=Console(file=buf, width=200))
    with reporter:
        reporter.started(HOSTILE, "cpu")
        reporter.finished(results[0])
        reporter.note(f"note {HOSTILE}")
    reporter.final(results, summarize(results))
    out = capsys.readouterr().out + buf.getvalue()
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out
    assert "\\x1b[2J" in out and "\\x0d" in out


def test_live_reporter_output_has_no_raw_escape_from_the_case():
    results = _results()
    buf = io.StringIO()
    reporter = Reporter(total=1, console=Console(file=buf, force_terminal=True, width=200, color_system=None))
    with reporter:
        reporter.started(HOSTILE, "cpu")
        reporter.finished(results[0])
    reporter.final(results, summarize(results))
    out = buf.getvalue()
    assert "\x1b[2J" not in out and "\x1b]0;pwned" not in out and "\\x1b[2J" in out


def test_error_lines_escape_what_they_quote(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text('op: "rope\\e[2J"\n')
    assert main(["list", str(path)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2J" in err and err.count("\n") == 1
