"""One command case, start to results: placeholders filled, the command run, judged, its JUnit read.

The engine calls ``run_case`` for a case whose ``command`` is set, in the device's
thread instead of sending it to the device worker.  The result of the command
itself comes first (``case_id``), then one per test of the JUnit it wrote to
``{junit}`` (``case_id::tests/test_x.py::test_decode``).  A failed command's output
goes through the classifier that names kernel failures (``harness.classify``):
``error code is 507018`` is ``DEVICE_FAULT`` ``FAIL_507018`` whether a kernel or a
serving test printed it.
"""
from __future__ import annotations

import re
import shutil
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from harness.case import Case
from harness.casefiles.commandspec import CommandSpec, TestSelection, substitute
from harness.classify.matching import Classification, classify_text
from harness.commands import process
from harness.commands.junit import JUnitError, TestCase, read_junit
from harness.commands.selection import SHOWN_TESTS
from harness.devices import Device
from harness.logs import clean_text
from harness.outcomes import Outcome, Result
from harness.provenance import relevant_env

REPORT_CHARS = 12000            # the output kept in the result (head and tail); the whole capped output is its log
_NOT_FOUND = re.compile(r"^(?:\S*sh: (?:\d+: |line \d+: )?)?(?P<name>[^\s:]+): (?:command )?not found\s*$", re.MULTILINE)
_NOT_EXECUTABLE = re.compile(r"^(?:\S*sh: (?:\d+: |line \d+: )?)?(?P<name>[^\s:]+): Permission denied\s*$",
                             re.MULTILINE)


@dataclass(frozen=True)
class Context:
    """What a command case runs with, from the engine's options and the device."""

    device: Device
    repeat: int
    log_path: Path                         # the command's captured output
    scratch: Path                          # {out} and {junit} live under it
    base_env: Mapping[str, str]            # the documented base: the harness's environment plus the ref's --env
    worktree: str | None = None            # the ref's worktree (compare, bisect), else None
    rules: Sequence | None = None
    cap_bytes: int = process.OUTPUT_CAP_BYTES
    sessions: process.Sessions | None = None     # the engine's, killed when it closes


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    code: int | str | None
    summary: str
    metrics: dict = field(default_factory=dict)     # the classifier's rule, fields, hint... (Classification.metrics)


def _values(case: Case, spec: CommandSpec, ctx: Context, out: Path, junit: Path, env: Mapping[str, str]) -> dict:
    worktree = ctx.worktree or spec.base_dir
    return {**{k: _plain(v) for k, v in case.params.items()}, "seed": str(case.seed), "worktree": worktree,
            "casedir": spec.base_dir, "device": str(ctx.device), "device_index": str(ctx.device.index or 0), "junit": str(junit),
            "out": str(out), "python": env.get("HARNESS_PYTHON") or sys.executable}


def _plain(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def _signal_of(returncode: int, shell: bool) -> int | None:
    """The signal that ended the command: a negative status, or a shell's 128+N for its child."""
    n = -returncode if returncode < 0 else (returncode - 128 if shell and 128 < returncode < 128 + 65 else None)
    if n is None:
        return None
    try:
        signal.Signals(n)
    except ValueError:
        return None
    return n


def _classified(c: Classification) -> Verdict:
    return Verdict(c.outcome, c.code, c.summary, c.metrics())


def judge(finished: process.Finished, spec: CommandSpec, timeout_s: float, rules=None) -> Verdict:
    """The command's outcome: exit status and pass rule first, then the classifier on its output."""
    if finished.not_started:
        return Verdict(Outcome.BUILD_ERROR, None, f"command could not be started: {finished.not_started}")
    text = finished.output.decode("utf-8", errors="replace")
    if finished.timed_out:
        summary = f"no end within timeout_s={timeout_s:g}; its session was killed"
        seen = classify_text(text, rules)
        if seen is not None:
            summary += f"; output shows {seen.outcome.value} {seen.code if seen.code is not None else seen.rule}"
        return Verdict(Outcome.HANG, None, summary)
    rc = finished.returncode
    rule = spec.pass_rule
    problems = []
    if rc != rule.exit_code:
        problems.append(f"exited with status {rc}" + (f" (pass needs {rule.exit_code})" if rule.exit_code else ""))
    if rule.regex and not re.search(rule.regex, text, re.MULTILINE):
        problems.append(f"pass.regex {rule.regex!r} not in its output")
    if rule.not_regex and (m := re.search(rule.not_regex, text, re.MULTILINE)):
        problems.append(f"pass.not_regex {rule.not_regex!r} in its output: {clean_text(m.group(0))[:120]!r}")
    if not problems:
        return Verdict(Outcome.PASS, None, "")
    if spec.shell and rc in (126, 127):
        m = (_NOT_FOUND if rc == 127 else _NOT_EXECUTABLE).search(text)
        if m:
            what = "not found" if rc == 127 else "not executable"
            return Verdict(Outcome.BUILD_ERROR, None, f"command {what}: {m.group('name')}")
    sig = _signal_of(rc, spec.shell)
    if sig is not None:
        name = signal.Signals(sig).name
        line = f"[harness] worker killed by {name} (signal {sig}) while running the command"
        found = classify_text(text + "\n" + line, rules)
        if found is not None:
            return _classified(found)
        return Verdict(Outcome.CRASH, name, f"command killed by {name}")
    found = classify_text(text, rules)
    if found is not None:
        return _classified(found)
    return Verdict(Outcome.FAILED, None, "; ".join(problems))


def _test_verdict(test: TestCase, rules) -> Verdict:
    if test.status == "passed":
        return Verdict(Outcome.PASS, None, "")
    if test.status == "skipped":
        return Verdict(Outcome.SKIPPED, None, clean_text(test.message)[:300] or "skipped")
    found = classify_text(f"{test.message}\n{test.text}", rules)
    if found is not None:
        return _classified(found)
    first = (clean_text(test.message).splitlines() or [test.status])[0][:300]
    return Verdict(Outcome.FAILED, None, f"test {test.status}: {first}")


def _report(argv_text: str, cwd: str, finished: process.Finished) -> str:
    text = clean_text(finished.output.decode("utf-8", errors="replace"))
    if len(text) > REPORT_CHARS:
        text = text[:REPORT_CHARS // 4] + "\n[...]\n" + text[-(REPORT_CHARS * 3 // 4):]
    status = ("timed out" if finished.timed_out else f"not started ({finished.not_started})" if finished.not_started
              else f"exit status {finished.returncode}")
    return f"$ {argv_text}\n(cwd {cwd}; {status}; {finished.output_bytes} bytes of output)\n{text}"


def _fresh_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_case(case: Case, ctx: Context) -> list[Result]:
    """Run the command case ``case`` once; its own result, then one per JUnit test."""
    spec = CommandSpec.from_wire(case.command)
    out = _fresh_dir(ctx.scratch / "out")
    junit = ctx.scratch / "junit.xml"
    junit.unlink(missing_ok=True)
    case_env = {k: substitute(v, _values(case, spec, ctx, out, junit, ctx.base_env)) for k, v in case.env.items()}
    env = {**ctx.base_env, **case_env}
    env.setdefault("PYTHONUNBUFFERED", "1")
    values = _values(case, spec, ctx, out, junit, env)
    if spec.shell:
        shown = substitute(spec.command, values)
        argv = ["/bin/sh", "-c", shown]
    else:
        argv = [substitute(part, values) for part in spec.command]
        shown = CommandSpec(tuple(argv)).text
    cwd = str(Path(spec.base_dir, substitute(spec.cwd, values))) if spec.cwd else values["worktree"]
    provenance = {"command": shown, "shell": spec.shell, "cwd": cwd,
                  "env": relevant_env(env), "junit": str(junit), "out": str(out)}
    base = dict(case_id=case.case_id, matrix=case.matrix, op=case.op, kernel=case.kernel, seed=case.seed,
                repeat=ctx.repeat, device=str(ctx.device), params=dict(case.params))
    if not Path(cwd).is_dir():
        return [Result(outcome=Outcome.CONTRACT, summary=f"cwd {cwd} is not a directory", log=None,
                       metrics={"command": provenance}, **base)]

    finished = process.run(argv, cwd=cwd, env=env, timeout_s=case.timeout_s, cap_bytes=ctx.cap_bytes,
                           sessions=ctx.sessions)
    process.write_output(ctx.log_path, finished)
    verdict = judge(finished, spec, case.timeout_s, ctx.rules)
    metrics = {"command": {**provenance, "returncode": finished.returncode, "output_bytes": finished.output_bytes,
                           "timed_out": finished.timed_out, "leftover_processes": finished.leftovers}}
    metrics.update(verdict.metrics)
    summary = verdict.summary
    outcome, code = verdict.outcome, verdict.code
    tests: list[TestCase] = []
    read = False
    if junit.exists():
        try:
            tests = read_junit(junit, cwd)
            read = True
            metrics["command"]["tests"] = len(tests)
        except JUnitError as exc:
            metrics["command"]["junit_error"] = str(exc)
            if outcome.passed:         # the evidence asked for is unreadable: not a pass
                outcome, code, summary = Outcome.CONTRACT, None, f"junit: {exc}"
            else:
                summary += f"; junit: {exc}"
    if spec.tests is not None:
        tests, note = _select(spec.tests, case.case_id, tests, read, metrics["command"])
        if note:
            summary = (summary + "; " if summary else "") + note
    if finished.leftovers:
        summary = (summary + "; " if summary else "") + f"{finished.leftovers} processes left in its session, killed"
    log = str(ctx.log_path)
    results = [Result(outcome=outcome, code=code, summary=summary,
                      report=_report(shown, cwd, finished) if not outcome.passed else "",
                      metrics=metrics, duration_s=finished.duration_s, log=log, **base)]
    for test in tests:
        v = _test_verdict(test, ctx.rules)
        results.append(Result(
            outcome=v.outcome, code=v.code, summary=v.summary,
            report=clean_text(f"{test.message}\n{test.text}".strip()) if v.outcome.failed else "",
            metrics={"test": test.test_id, "suite": case.case_id, **v.metrics},
            duration_s=test.duration_s, log=log,
            **{**base, "case_id": f"{case.case_id}::{test.test_id}"}))
    return results


FAILURE_LINES = 5           # the head of a failing command's output a conclusion shows
FAILURE_LINE_CHARS = 200


def failure_text(result: Result, lines: int = FAILURE_LINES) -> str | None:
    """What a failing command case printed, for a conclusion that would otherwise say only
    ``FAILED`` (``exited with status 1``): the head of its output, and its last line when the head
    stops before it; for a test of its JUnit, the failure message and what follows it.  None for a
    pass and for kernel cases (their summary already says what failed)."""
    if not result.outcome.failed or not result.report:
        return None
    metrics = result.metrics if isinstance(result.metrics, Mapping) else {}
    body = result.report.splitlines()
    if isinstance(metrics.get("command"), Mapping) and body[:1] and body[0].startswith("$ "):
        body = body[2:]                 # the command line and its status line (``_report``)
    elif "test" not in metrics:
        return None
    kept = [line.rstrip()[:FAILURE_LINE_CHARS] for line in body if line.strip()]
    if not kept:
        return None
    if len(kept) > lines + 1:
        kept = kept[:lines] + ["[...]", kept[-1]]
    return "\n".join(kept)


def _select(selection: TestSelection, case_id: str, tests: list[TestCase], read: bool,
            provenance: dict) -> tuple[list[TestCase], str]:
    """The tests ``selection`` keeps, and the note for the command's own result.  ``of`` stays None
    when no JUnit was read: the command's own result then decides, as without a selection."""
    kept = [t for t in tests if selection.matches(case_id, t.test_id)]
    provenance["selection"] = {"patterns": list(selection.patterns), "expr": selection.expr,
                               "describe": selection.describe(), "matched": len(kept),
                               "of": len(tests) if read else None,
                               "sample": [t.test_id for t in tests[:SHOWN_TESTS]]}
    if not read:
        return kept, f"no JUnit tests to select ({selection.describe()}): the command's outcome stands"
    if not kept:
        shown = ", ".join(t.test_id for t in tests[:SHOWN_TESTS]) or "none"
        return kept, f"{selection.describe()} matched none of its {len(tests)} tests (they include: {shown})"
    return kept, ""


def scratch_name(case_id: str, repeat: int, device: Device) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.=,()+-]+", "_", case_id)[:160]
    return f"{safe}.r{repeat}.{str(device).replace(':', '')}"


__all__ = ["Context", "Verdict", "failure_text", "judge", "run_case", "scratch_name"]
