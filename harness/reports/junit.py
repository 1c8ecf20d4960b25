"""JUnit XML for CI test-report readers (Jenkins, GitLab, GitHub actions, Buildkite).

One ``<testsuite>`` per matrix, one ``<testcase>`` per result:

* ``name``: the case id, `` [repeat N]`` when the case ran more than once,
  `` on DEVICE`` when it ran on several devices, `` @REF`` when the document
  compares refs; ``classname``: the matrix; ``time``: ``duration_s``.
* a failing outcome is a ``<failure>`` (``HARNESS_ERROR``, the harness itself
  broken, and ``ENV_ERROR``, the machine or cluster, are an ``<error>``: the case was not judged) whose ``type`` is the display label
  (``FAIL_507018``, ``MISMATCH``, ``HANG``), ``message`` the one-line summary
  and text the comparison report plus the tail of the case's log;
  ``SKIPPED`` is a ``<skipped>`` with the reason.
* ``<properties>`` per testcase: params, seed, device, ref, code, and per
  compared buffer its bad count, element count, greatest |diff| and verdict.
* a compare (``harness compare``) fails only the candidate's (the last ref's)
  failing runs; another ref's failure is a passing testcase whose
  ``system-out`` says so, with the case's verdict (``junit_compare``).

Every string from outside (summaries, reports, logs, params) is passed
through ``clean_text``, so control characters cannot make the file invalid
XML.  The file is written to a temporary name and renamed into place.
"""
from __future__ import annotations

import datetime
import json
import os
from collections import defaultdict
from typing import Any, Mapping

from junitparser import Error, Failure, JUnitXml, Properties, Property, Skipped, TestCase, TestSuite

from harness.document import kind_of, results_of
from harness.document.sections import provenance_items
from harness.files import atomic_path
from harness.formats import blocking_rerun_text, device_log_text
from harness.intermediates import table as intermediates_table
from harness.logs import clean_text, log_tail
from harness.outcomes import Outcome, Result
from harness.reports.junit_compare import CompareRoles

__all__ = ["build_junit", "write_junit"]

MESSAGE_CHARS = 1000          # a failure's message attribute
REPORT_CHARS = 32_000         # the comparison report inside a failure
_COMPARE_KEYS = ("bad_count", "numel", "max_abs_error")        # per compared buffer; + outcome when it failed


def _text(value: Any, limit: int | None = None) -> str:
    text = clean_text(value)
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"... ({len(text) - limit} more characters)"
    return text


def _one_line(value: Any, limit: int = MESSAGE_CHARS) -> str:
    return _text(" ".join(str(value).split()), limit)


def _value(value: Any) -> str:
    """A property value: strings as they are, everything else as JSON (``true``, ``null``, ``[1, 2]``)."""
    if isinstance(value, str):
        return _text(value, 2000)
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    return _text(json.dumps(value, default=str, sort_keys=True), 2000)


def _properties(r: Result, ref: str | None) -> list[tuple[str, str]]:
    props = [("case_id", r.case_id), ("outcome", r.outcome.value), ("label", r.label),
             ("device", r.device), ("repeat", str(r.repeat))]
    if r.seed is not None:
        props.append(("seed", str(r.seed)))
    if ref:
        props.append(("ref", ref))
    if r.code is not None:
        props.append(("code", str(r.code)))
    for key in ("op", "kernel"):
        if getattr(r, key):
            props.append((key, getattr(r, key)))
    if r.sticky:
        props.append(("sticky", "true"))
    if r.log:
        props.append(("log", r.log))
    props += [(f"params.{k}", v) for k, v in sorted(r.params.items())]
    for buf, m in sorted((r.metrics.get("compare") or {}).items()):
        if isinstance(m, Mapping):
            props += [(f"compare.{buf}.{k}", m[k]) for k in _COMPARE_KEYS if k in m]
            if m.get("passed") is False:
                props.append((f"compare.{buf}.outcome", m.get("outcome", "MISMATCH")))
    dumped = intermediates_table.data(r.metrics)
    if dumped:
        props.append(("first_bad_intermediate", dumped.get("first_bad_intermediate")))
    argmax = r.metrics.get("argmax")
    if isinstance(argmax, Mapping):
        props += [(f"argmax.{k}", v) for k, v in sorted(argmax.items())]
    return [(_text(k), _value(v)) for k, v in props]


def _details(r: Result) -> str:
    parts = [_text(r.report, REPORT_CHARS)] if r.report else [_text(r.summary)]
    for extra in (blocking_rerun_text(r.metrics), device_log_text(r.metrics)):
        if extra:
            parts.append(_text(extra, REPORT_CHARS))
    dumped = intermediates_table.data(r.metrics)
    if dumped:          # docs/intermediates.md
        parts.append("--- intermediates ---\n" + _text(intermediates_table.text(dumped)))
    tail = log_tail(r.log)
    if tail:
        parts.append(f"--- last lines of {_text(r.log)} ---\n{tail}")
    return "\n\n".join(parts)


def _names(results: list[Result], with_refs: bool) -> list[str]:
    """Unique, readable testcase names (see the module docstring)."""
    per_case = defaultdict(set)
    devices = defaultdict(set)
    for r in results:
        per_case[r.case_id, r.ref].add(r.repeat)
        devices[r.case_id, r.ref].add(r.device)
    names = []
    for r in results:
        name = r.case_id
        if len(per_case[r.case_id, r.ref]) > 1:
            name += f" [repeat {r.repeat}]"
        if len(devices[r.case_id, r.ref]) > 1:
            name += f" on {r.device}"
        if with_refs and r.ref:
            name += f" @{r.ref}"
        names.append(_text(name))
    return names


def _suite_properties(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The document's provenance (devices, refs, env, ...) as ``<property>`` pairs."""
    return [(_text(k.replace(" ", ".")), _text(v, 2000)) for k, v in provenance_items(doc)]


def _add_properties(element, props: list[tuple[str, str]]) -> None:
    """A ``<properties>`` child; called before any other child is added, so it comes
    first, where the JUnit schemas expect it (junitparser 5 has no testcase API for it)."""
    if not props:
        return
    holder = Properties()
    for name, value in props:
        holder.add_property(Property(name, value))
    element.append(holder)


def build_junit(doc: Mapping[str, Any]) -> JUnitXml:
    results = results_of(doc)
    with_refs = bool(doc.get("refs")) or any(r.ref for r in results)
    names = _names(results, with_refs)
    roles = CompareRoles.of(doc)
    timestamp = _iso(doc.get("started"))
    suite_props = _suite_properties(doc)
    suites: dict[str, TestSuite] = {}
    for r, name in zip(results, names):
        matrix = r.matrix or r.case_id.split("[", 1)[0] or "harness"
        suite = suites.get(matrix)
        if suite is None:
            suite = suites[matrix] = TestSuite(_text(matrix))
            if timestamp:
                suite.timestamp = timestamp
            if doc.get("host"):
                suite.hostname = _text(doc["host"])
            _add_properties(suite, suite_props)
        case = TestCase(name, _text(matrix), _seconds(r.duration_s))
        extra = [(_text(k), _value(v)) for k, v in roles.properties(r)] if roles else []
        _add_properties(case, _properties(r, r.ref if with_refs else None) + extra)
        if r.outcome is Outcome.SKIPPED:
            case.result = [Skipped(_one_line(r.summary or "skipped"))]
        elif r.outcome.failed and (roles is None or roles.fails(r)):
            # the case could not be judged (the harness or the environment broke): an error, not a failure
            kind = Error if r.outcome in (Outcome.HARNESS_ERROR, Outcome.ENV_ERROR) else Failure
            element = kind(_one_line(r.summary or r.label), r.label)
            element.text = _details(r)
            case.result = [element]
        elif r.outcome.failed:
            case.system_out = _text(roles.note(r)) + "\n\n" + _details(r)
        suite.append(case)             # add_testcase recounts the suite each time: O(n^2)
    xml = JUnitXml(_text(f"harness {kind_of(doc)}" + (f" {doc['run_id']}" if doc.get("run_id") else "")))
    for suite in suites.values():
        suite.update_statistics()
        xml.add_testsuite(suite)
    xml.update_statistics()
    return xml


def _seconds(value: Any) -> float:
    """A duration as JUnit readers parse it: finite, >= 0, plain decimal (rounded to ms)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return 0.0
    return round(x, 3) if x == x and 0 <= x < 1e12 else 0.0


def _iso(ts: Any) -> str | None:
    if not isinstance(ts, (int, float)) or isinstance(ts, bool):
        return None
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def write_junit(path: str | os.PathLike, doc: Mapping[str, Any]) -> None:
    """Render ``doc`` as JUnit XML at ``path``, atomically."""
    xml = build_junit(doc)
    with atomic_path(path) as tmp:
        xml.write(str(tmp))

