"""What a table cell and a failure entry say (issue 12, items 9, 10, 12).

9: a cell carries the key detail of the failures it counts (``5/5 CONTRACT (out 99.8% bad)``).
10: a near-tie is clean with a note (``5/5 PASS (4 clean, 1 near-tie)``), in every table and
summary, and passes for the exit code and JUnit.
12: Markdown and HTML list one entry per case and label (``×8``), not one per repeat.
The results are shaped as the worker and the classifier make them: real ``ratio_allclose``
metrics, real classifications of a dead worker and of an NPU fault text.
"""
from __future__ import annotations

import io
import re

from rich.console import Console

from harness.classify.matching import classify_exit, classify_text, classify_timeout
from harness.document.table import Detail, cell_text, detail, details_text, tabulate
from harness.outcomes import Outcome, Result
from harness.refs import compare as refcompare
from harness.document import build_document
from harness.document.failures import failure_groups
from harness.document.sections import flake_rows
from harness.reports.html import render_html
from harness.reports.junit import write_junit
from harness.reports.markdown import escape, render_markdown
from harness.reports.terminal import Reporter
from harness.run.pool import _fault_metrics
from harness.document.summary import summarize
from report_samples import cache_metrics, mismatch_metrics

CASE = "fused-decode[batch=16,slot_mode=padded(0.25)]"


def _fault(cls, **kw) -> Result:
    """A fault result as the pool builds it from a classification."""
    return Result(CASE, cls.outcome, matrix="fused-decode", code=cls.code, summary=cls.summary,
                  metrics=_fault_metrics(cls), **kw)


def _contract(bad_head: int | None = 2, **kw) -> Result:
    """The returns-query bug: the wrong buffer returned, ``out`` left unwritten (a real comparison)."""
    metrics, report = mismatch_metrics(bad_head=bad_head)
    return Result(CASE, Outcome.CONTRACT, matrix="fused-decode",
                  summary="return value: returned the 'query' buffer instead of 'out'", report=report,
                  metrics={"compare": {"out": metrics}}, **kw)


# -- 9: the detail a cell carries --------------------------------------------------

def test_each_kind_of_failure_has_its_telling_phrase():
    out, _ = mismatch_metrics(bad_head=2)                 # 1 of 8 heads wrong: 12.5%
    cache, _ = cache_metrics(bad_page=1)                   # 1 of 4 pages wrong: 25%
    npu_text = ("The aicore execution is abnormal, device_id=0, stream_id=3, task_id=12, kernel_name=k\n"
                "Kernel task happen error, retCode=0x26, [aicore exception].\n"
                "NPU function error: aclrtSynchronizeStreamWithTimeout, error code is 507018")
    cases = [
        (_contract(), "out 12.5% bad"),
        (Result(CASE, Outcome.MISMATCH, metrics={"compare": {"out": out, "k_cache": cache}}), "k_cache 25.0% bad"),
        (Result(CASE, Outcome.OOB_WRITE,
                summary="k_cache: guard band overwritten: 64 elements before the start (offsets -64..-1)"),
         "k_cache 64 before the start"),
        (Result(CASE, Outcome.MISMATCH, summary="logits: argmax differs in 3 rows beyond the near-tie margin 0.1",
                metrics={"argmax": {"compared_rows": 12, "near_ties": 0, "flips": 3}}),
         "argmax flipped in 3 of 12 rows"),
        (_fault(classify_exit(-11)), "SIGSEGV"),
        (_fault(classify_text(npu_text)), "AI Core execution fault"),     # the cause, not 507018's name
        (_fault(classify_text("aclrtSynchronizeStream(stream) failed: 507018 (main.cpp:141)\n"
                              "[ERROR] EZ9999: there is an exception of fftsplus aicore error, core id is 9\n")),
         "fftsplus aicore core 9"),
        (_fault(classify_text("RuntimeError: error code is 507015\n")), "ACL_ERROR_RT_AICORE_EXCEPTION"),
        (_fault(classify_timeout(60.0)), "killed after 60 s"),
        (Result(CASE, Outcome.BUILD_ERROR, summary="build failed", metrics={"build": {"ok": False, "returncode": 2}}),
         "build exit 2"),
        (Result(CASE, Outcome.HARNESS_ERROR, summary="golden raised KeyError: 'logits'; see the log"),
         "golden raised KeyError: 'logits'"),
    ]
    for result, phrase in cases:
        assert detail(result).text == phrase, (result.outcome, result.summary)
    assert detail(Result(CASE, Outcome.PASS)) is None and detail(Result(CASE, Outcome.NEAR_TIE)) is None
    assert detail(Result(CASE, Outcome.SKIPPED, summary="no npu")) is None


def test_the_cell_names_the_buffer_and_its_bad_fraction():
    results = [_contract(repeat=i, ref="upstream") for i in range(5)]
    results += [Result(CASE, Outcome.PASS, repeat=i, ref="fix") for i in range(5)]
    row = tabulate(results).rows[0]
    assert row.cell("upstream").text == "0/5 PASS, 5/5 CONTRACT (out 12.5% bad)"
    assert row.cell("fix").text == "5/5 PASS"
    # harness compare's cells come from the same table
    (compared,) = refcompare.table(results, ["upstream", "fix"])
    assert compared.cells == {"upstream": "0/5 PASS, 5/5 CONTRACT (out 12.5% bad)", "fix": "5/5 PASS"}


def test_repeats_that_disagree_show_the_range_or_the_most_common():
    one_head = _contract(bad_head=2)                                   # 12.5%
    two = mismatch_metrics(bad_head=2, bad_row=1)[0]                   # a head and a row: 34.4%
    results = [one_head, one_head, Result(CASE, Outcome.CONTRACT, metrics={"compare": {"out": two}})]
    assert tabulate(results).rows[0].cell("").text == "0/3 PASS, 3/3 CONTRACT (out 12.5%-34.4% bad)"
    crashes = [_fault(classify_exit(-11)), _fault(classify_exit(-11)), _fault(classify_exit(-6))]
    assert tabulate(crashes).rows[0].cell("").text == "0/3 PASS, 3/3 CRASH (SIGSEGV ×2, SIGABRT ×1)"
    assert details_text([Detail("a"), Detail("a"), Detail("b"), Detail("c")]) == "a ×2, +2 other"
    assert cell_text({"PASS": 1, "HANG": 1}) == "1/2 PASS, 1/2 HANG"      # the old call still works


def test_terminal_markdown_and_html_show_the_detail(tmp_path):
    results = [_contract(repeat=i, device="cpu") for i in range(5)]
    doc = build_document(results, started=0.0, devices=["cpu"], command=["harness"])
    assert "| 0/5 PASS, 5/5 CONTRACT \\(out 12\\.5% bad\\) |" in render_markdown(doc)
    assert "0/5 PASS, 5/5 CONTRACT (out 12.5% bad)</td>" in render_html(doc)
    flake_doc = dict(doc, flake={CASE: {"total": 5, "counts": {"CONTRACT": 5}, "failures": 5, "rate": 1.0}})
    assert flake_rows(flake_doc)[0][2] == "0/5 PASS, 5/5 CONTRACT (out 12.5% bad)"
    buf = io.StringIO()
    Reporter(total=5, plain=True, console=Console(file=buf, width=200)).final(results, summarize(results))
    assert f"{CASE} ×5" in buf.getvalue() and "returned the 'query' buffer" in buf.getvalue()


# -- 10: a near-tie is clean, with a note ----------------------------------------------

def _near_tie_fix() -> list[Result]:
    """upstream fails every repeat; the fix passes, one repeat of five at an argmax near-tie."""
    up = [_fault(classify_exit(-11), repeat=i, ref="upstream", device="cpu") for i in range(5)]
    fix = [Result(CASE, Outcome.NEAR_TIE if i == 3 else Outcome.PASS, matrix="fused-decode", repeat=i, ref="fix",
                  device="cpu", summary="logits: argmax differs in 1 rows within the near-tie margin 0.1"
                  if i == 3 else "all outputs, caches and guard bands match",
                  metrics={"argmax": {"compared_rows": 12, "near_ties": int(i == 3), "flips": 0}})
           for i in range(5)]
    return up + fix


def test_a_near_tie_reads_as_clean_with_a_note(tmp_path):
    results = _near_tie_fix()
    fix = [r for r in results if r.ref == "fix"]
    assert tabulate(fix).rows[0].cell("fix").text == "5/5 PASS (4 clean, 1 near-tie)"
    (row,) = refcompare.table(results, ["upstream", "fix"])
    assert row.cells["fix"] == "5/5 PASS (4 clean, 1 near-tie)" and row.verdict.describe() == "fixed"
    doc = build_document(fix, started=0.0, devices=["cpu"], command=["harness"])
    markdown = render_markdown(doc)
    assert "**5 results**: 5 passed \\(4 clean, 1 near\\-tie\\), 0 failed, 0 skipped" in markdown
    assert "NEAR\\_TIE" not in markdown.split("### ")[1]        # the table never shows it as its own label
    assert "Failing cases" not in markdown
    page = render_html(doc)
    assert "5 results: 5 passed (4 clean, 1 near-tie), 0 failed, 0 skipped." in " ".join(
        re.sub(r"<[^>]+>", "", page).split())
    assert "No failures." in page and "5/5 PASS (4 clean, 1 near-tie)</td>" in page
    buf = io.StringIO()
    Reporter(total=5, plain=True, console=Console(file=buf, width=200)).final(fix, summarize(fix))
    assert "5 passed (4 clean, 1 near-tie), 0 failed" in buf.getvalue()
    assert "Failures" not in buf.getvalue() and "NEAR_TIE (passed)" in buf.getvalue()


def test_a_near_tie_passes_for_the_exit_code_and_junit(tmp_path):
    fix = [r for r in _near_tie_fix() if r.ref == "fix"]
    assert summarize(fix)["failed"] == 0                 # harness run exits 1 only when "failed" counts
    from junitparser import JUnitXml
    doc = build_document(fix, started=0.0, devices=["cpu"], command=["harness"])
    write_junit(tmp_path / "j.xml", doc)
    cases = [c for suite in JUnitXml.fromfile(str(tmp_path / "j.xml")) for c in suite]
    assert len(cases) == 5 and all(c.is_passed for c in cases)


# -- 12: one entry per case and label --------------------------------------------------

def _eight_crashes(tmp_path) -> list[Result]:
    logs = tmp_path / "logs"
    logs.mkdir()
    results = []
    for i in range(8):
        log = logs / f"fused-decode.r{i}.log"
        log.write_text(f"iteration {i}\nFatal Python error: Segmentation fault\n")
        results.append(_fault(classify_exit(-11), repeat=i, device="npu:0", seed=7, log=str(log)))
    return results + [Result("other[a=1]", Outcome.PASS, matrix="other", device="npu:0")]


def test_eight_identical_crashes_are_one_entry(tmp_path):
    results = _eight_crashes(tmp_path)
    (group,) = failure_groups(results)
    assert (group.count, group.times, group.where) == (8, "×8", "npu:0, repeats 0-7, seed 7")
    assert group.log.endswith("fused-decode.r0.log")
    assert group.other_logs == "in the same folder: " + ", ".join(f"fused-decode.r{i}.log" for i in range(1, 8))
    doc = build_document(results, started=0.0, devices=["npu:0"], command=["harness"])
    markdown = render_markdown(doc)
    entries = [line for line in markdown.splitlines() if line.startswith("- **CRASH**")]
    assert entries == ["- **CRASH** ×8 fused\\-decode\\[batch=16,slot\\_mode=padded\\(0\\.25\\)\\] "
                       f"(npu\\:0, repeats 0\\-7, seed 7): {escape(results[0].summary)}"]
    assert "fused\\-decode\\.r0\\.log; other logs in the same folder\\: fused\\-decode\\.r1\\.log" in markdown
    assert markdown.count("Fatal Python error") == 1           # one excerpt, the representative's log
    page = render_html(doc)
    assert page.count("<article") == 1 and '<span class="times">×8</span>' in page
    assert "<dt>where</dt><dd>npu:0, repeats 0-7, seed 7</dd>" in page
    assert "<dt>other logs</dt><dd>in the same folder: fused-decode.r1.log" in page
    assert page.count("Fatal Python error") == 1


def test_an_entry_whose_repeats_differ_says_so(tmp_path):
    results = [_contract(bad_head=2, repeat=0), Result(CASE, Outcome.CONTRACT, repeat=1, summary="other words",
                                                        metrics={"compare": {"out": mismatch_metrics(2, 1)[0]}})]
    doc = build_document(results, started=0.0, devices=["cpu"], command=["harness"])
    assert "\\(all 2: out 12\\.5%\\-34\\.4% bad\\)" in render_markdown(doc)
    assert "all 2: out 12.5%-34.4% bad" in render_html(doc)
