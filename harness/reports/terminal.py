"""All terminal output of a run goes through one ``Reporter``.

A rich live display (a bar with done/total, failures so far, elapsed time and
ETA, and under it the case each device is running) on a terminal; one plain line per case otherwise, so CI logs stay readable.
The final table counts results per outcome (a near-tie is a pass, noted) and
lists the failures by outcome, one row per case and outcome (``×8``, where it
happened, the key detail when the repeats differ), then each entry's log path.
"""
from __future__ import annotations

from typing import Callable

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from harness.document.failures import failure_groups, result_warnings
from harness.document.table import NEAR_TIE, PASS, passed_text
from harness.formats import blocking_rerun_text, printable
from harness.outcomes import Outcome, Result

_STYLE = {Outcome.PASS: "green", Outcome.NEAR_TIE: "green", Outcome.SKIPPED: "yellow"}


class Reporter:
    """``line``: when given, every result gets that line (flake hunts: ``iter 3: PASS 0.41 s``);
    else plain mode writes a progress line per case and the live view prints failures only."""

    def __init__(self, total: int, plain: bool = False, console: Console | None = None,
                 line: Callable[[Result], str] | None = None):
        self.total = total
        self.line = line
        self.plain = plain
        self.console = console or Console(highlight=False, soft_wrap=plain, no_color=plain)
        self.done = 0
        self.failures = 0
        self.current: dict[str, str] = {}
        self._progress: Progress | None = None
        self._live: Live | None = None
        self._task = None

    def __enter__(self) -> "Reporter":
        if not self.plain:
            # The bar (done/total, failures so far, elapsed, ETA) and under it one line per
            # device with the case it is running, redrawn together by one Live display.
            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("[red]{task.fields[failures]} failed"), TimeElapsedColumn(), TextColumn("eta"),
                TimeRemainingColumn(), console=self.console,
            )
            self._task = self._progress.add_task("cases", total=self.total, failures=0)
            self._live = Live(get_renderable=self._render, console=self.console, transient=True,
                              refresh_per_second=8)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None
            self._progress = None

    def _render(self) -> Group:
        lines = [Text(f"  {device}: {case_id}", overflow="ellipsis", no_wrap=True)
                 for device, case_id in sorted(self.current.items())]
        return Group(self._progress, *lines)

    def _refresh(self) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=self.done, failures=self.failures)

    def started(self, case_id: str, device: str) -> None:
        self.current[device] = printable(case_id)
        self._refresh()

    def finished(self, result: Result) -> None:
        self.done += 1
        self.failures += result.outcome.failed
        self.current.pop(result.device, None)
        if self.line is not None:
            text = printable(self.line(result))
            if self.plain:
                print(text, flush=True)
            else:
                self.console.print(Text(text, style="red" if result.outcome.failed else ""))
                self._refresh()
        elif self.plain:
            line = f"[{self.done}/{self.total}] {result.label:<14} {printable(result.case_id)} ({result.duration_s:.2f} s)"
            if result.outcome.failed:
                line += f"\n    {printable(result.summary)}"
                rerun = blocking_rerun_text(result.metrics)
                if rerun:
                    line += f"\n    {printable(rerun)}"
            print(line, flush=True)
        else:
            if result.outcome.failed:
                self.console.print(Text.assemble((result.label, "red"),
                                                 f" {printable(result.case_id)}: {printable(result.summary)}"))
            self._refresh()

    def note(self, text: str) -> None:
        self.console.print(printable(text), markup=False)

    def final(self, results: list[Result], summary: dict) -> None:
        table = Table(title="Summary", show_lines=False)
        table.add_column("outcome")
        table.add_column("cases", justify="right")
        counts = sorted(summary["counts"].items(), key=lambda kv: (kv[0] != PASS, kv[0] != NEAR_TIE, -kv[1], kv[0]))
        for label, count in counts:
            table.add_row(label + (" (passed)" if label == NEAR_TIE else ""), str(count))
        self.console.print(table)
        groups = sorted(failure_groups(results), key=lambda g: (g.label, g.case_id))
        if groups:
            fail_table = Table(title="Failures, by outcome")
            fail_table.add_column("outcome", no_wrap=True)
            fail_table.add_column("case", overflow="fold")
            fail_table.add_column("where", overflow="fold")
            fail_table.add_column("summary", overflow="fold")
            previous = None
            for g in groups:   # Text: case ids hold [...] that rich would read as markup
                if previous is not None and g.label != previous:
                    fail_table.add_section()
                text = g.first.summary
                if not g.same_summary and g.detail:
                    text += f" (all {g.count}: {g.detail})"
                fail_table.add_row(Text("" if g.label == previous else g.label),
                                   Text(printable(g.case_id + (f" {g.times}" if g.times else ""))),
                                   Text(printable(g.where)), Text(printable(text)))
                previous = g.label
            self.console.print(fail_table)
            logged = [g for g in groups if g.log]
            if logged:     # plain lines, never folded: a path to copy into a shell
                self.console.print("logs of the failing cases:", markup=False)
                for g in logged:
                    if g.count > 1:
                        iteration = f" ({g.times}, iters {g.repeats})"
                    else:
                        iteration = f" (iter {g.first.repeat})" if g.first.repeat else ""
                    self.console.print(printable(f"  {g.case_id}{iteration}: {g.log}"), markup=False, soft_wrap=True)
                    if g.other_logs:
                        self.console.print(printable(f"    other logs {g.other_logs}"), markup=False, soft_wrap=True)
        warned = result_warnings(results)
        if warned:     # not failures: what a result says the user must know (docs/reports.md)
            self.console.print("warnings on results:", markup=False)
            for case_id, text in warned:
                self.console.print(printable(f"  {case_id}: {text}"), markup=False, soft_wrap=True)
        gc = summary["golden_cache"]
        near_tie = summary.get("outcomes", {}).get(NEAR_TIE, 0)
        self.console.print(
            f"{summary['total']} cases: {passed_text(summary['passed'], near_tie)}, {summary['failed']} failed, "
            f"{summary['skipped']} skipped; goldens computed {gc['computed']}, from cache {gc['hits']}",
            markup=False,
        )
