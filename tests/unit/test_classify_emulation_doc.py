"""docs/classify.md, "Emulating a failure on the CPU": every row's Python, run, gets the documented class.

The table is parsed from the doc, so the doc cannot drift from the classifier (issue 12, item 3).
Each snippet runs as a kernel would: what it prints is the case log, what it raises is the
exception; ``os.kill`` and ``time.sleep`` are caught (they would end or stall this test) and
read as the worker's death by that signal and as a timeout.
"""
from __future__ import annotations

import io
import os
import signal
import sys
import traceback
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.classify import Classification, classify_exception, classify_exit, classify_timeout
from harness.outcomes import label

DOC = Path(__file__).resolve().parents[2] / "docs" / "classify.md"
SECTION = "## Emulating a failure on the CPU"


def _rows() -> list[tuple[str, str, str, str]]:
    text = DOC.read_text()
    body = text[text.index(SECTION):]
    body = body[:body.index("\n## ", len(SECTION))]
    rows = []
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows.append(tuple(c.strip("`") for c in cells))
    return rows


ROWS = _rows()


class _Killed(BaseException):
    def __init__(self, signum: int):
        self.signum = signum


class _Slept(BaseException):
    pass


def _kill(pid: int, signum: int) -> None:
    raise _Killed(signum)


def _sleep(seconds: float) -> None:
    raise _Slept()


def _run_as_kernel(snippet: str) -> Classification:
    namespace = {"os": SimpleNamespace(kill=_kill, getpid=os.getpid), "signal": signal, "sys": sys,
                 "time": SimpleNamespace(sleep=_sleep)}
    log = io.StringIO()
    try:
        with redirect_stdout(log), redirect_stderr(log):
            exec(snippet, namespace)
    except _Killed as killed:
        return classify_exit(-killed.signum, log.getvalue())
    except _Slept:
        return classify_timeout(60, log.getvalue())
    except Exception as exc:
        return classify_exception("launch", type(exc).__name__, str(exc), traceback.format_exc(), log.getvalue())
    pytest.fail(f"the snippet neither raised nor ended: {snippet}")


def _code(cell: str) -> int | str | None:
    if cell == "none":
        return None
    return int(cell) if cell.isdigit() else cell


def test_the_table_is_there_and_covers_every_class_the_rules_give():
    assert len(ROWS) >= 15
    classes = {row[0] for row in ROWS}
    assert classes >= {"DEVICE_FAULT", "ORCH_ERROR", "OOM", "NONFINITE", "CRASH", "BUILD_ERROR",
                       "ENV_ERROR", "HANG"}


def _disagreement(row: tuple[str, str, str, str]) -> str | None:
    """What the classifier says where it differs from the row, None where the row holds."""
    outcome, code, shown, snippet = row
    c = _run_as_kernel(snippet)
    got = (c.outcome.value, c.code, label(c.outcome, c.code))
    return None if got == (outcome, _code(code), shown) else f"{got}: {c.summary}"


@pytest.mark.parametrize("row", ROWS, ids=[f"{r[0]}-{r[1]}-{i}" for i, r in enumerate(ROWS)])
def test_each_documented_emulation_gets_its_documented_class(row):
    assert _disagreement(row) is None


def test_a_row_that_drifted_from_the_classifier_is_caught():
    row = next(r for r in ROWS if r[3] == 'raise RuntimeError("aclrtSynchronizeStream(stream) failed: 507015")')
    assert row[:3] == ("DEVICE_FAULT", "507015", "FAIL_507015")
    assert _disagreement(("DEVICE_FAULT", "507015", "FAIL_507015",
                          'raise RuntimeError("aclrtSynchronizeStream(stream) failed: 507018")')) is not None
    assert _disagreement(("DEVICE_FAULT", "507015", "FAIL_507015",
                          'print("there is an aicore error exception, core id is 3"); '
                          'raise RuntimeError("kernel failed")')) is not None     # the code is never invented
