"""Name a failure from what the worker saw: the exception, its log, its exit status.

The rules (``harness.classify.rules``) are signatures with a role.  The matcher
finds every signature in the evidence (each rule at most once per line), then
answers two questions:

* the *root cause* (the class: outcome, sticky, hint, rule): a cause anywhere
  beats a cascade, a cascade beats context, and among equals the earliest line
  wins (then the first rule in the list; user rules come before the
  built-ins), unless another of its rank names it more exactly (a code name
  ``X/Y`` refines ``X``).  A cause may be printed after the wrapper it explains (torch-npu
  prints the device's detail block after ``error code is 507018``), so a cause
  wins wherever it is;
* the *label* (the code): the code the runtime printed.  Among the signatures
  of rules that read a printed code (``error code is 507018``, ``failed:
  507015``, ``FAIL_507018``, ``EZ9999``, CUDA's error text) the same order
  picks one; a *detail* rule's code (the PTO2 status line, a signal) labels
  only where none was printed, and a code no report stands for is never a label:
  the AICore report ends in 507014, 507015, 507018 or 507035 alike, so it names
  no code and is detail of whatever code was printed.

Every printed code other than the root cause's own is kept as a secondary label
(``FAIL_507018``), and the named groups of all signatures (the root cause's
first) become ``fields``; where the root cause is not what the label names, its
name and code are added as ``cause`` and ``cause_code``.

Speed: each rule's pattern is reduced, once, to the literal text any match
must contain (its *needles*, ``harness.classify.needles``); the evidence is
searched for the needles with ``str.find`` (at most the first and last 512
places of each) and only the lines that contain one are given to the regexes.
A pattern with no usable literal (or one matching case-insensitively) is run
over the whole text instead: start such a pattern with a literal character so
that stays cheap.  Evidence longer than 16 MiB is read as its first 4 MiB and
last 12 MiB.
"""
from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from harness.classify.rules import CodeInfo, Role, Rule, builtin_rules
from harness.outcomes import Outcome

__all__ = [
    "Classification",
    "Hit",
    "classify_exception",
    "classify_exit",
    "classify_text",
    "classify_timeout",
    "exit_line",
    "match_rules",
    "read_log",
]

# Evidence window: a log longer than head + tail is read as its head and its tail.
_LOG_HEAD = 4 << 20
_LOG_TAIL = 12 << 20
_LINE_CLIP = 4096          # a "line" is cut to this many characters either side of a needle
_PER_NEEDLE = 512          # occurrences looked at per needle: this many first and this many last
_SLOW_MATCHES = 256        # matches taken per rule that has no needle
_SHARED_PREFIX = 6         # needles sharing this long a prefix are searched by the prefix
_MAX_SECONDARY = 8
_EVIDENCE_CHARS = 160
_DETAIL_CHARS = 160        # the summary's "detail: core_id=9, retcode=0x26, ..." part
# "[ERROR] RUNTIME(48211,python):2026-03-14-09:21:07.512.334 [task_info.cc:1412]48211 PrintErrorInfo: "
_LOG_PREFIX = re.compile(r"^\s*\[(?:ERROR|WARNING|INFO|DEBUG|EVENT)\]\s+\S+?\(\d+,[^)]*\):\S+\s+"
                         r"(?:\[[^\]]*\]\s*)?(?:\d+\s+\w+:\s*)?")

_NO_INFO = CodeInfo()


@dataclass(frozen=True)
class Hit:
    """One signature found in the evidence, with its code table entry applied."""

    pos: int                  # offset of its line in the evidence
    order: int                # the rule's place in the rule list
    rule: Rule
    line: str
    groups: dict[str, Any]
    code: int | str | None
    name: str | None
    meaning: str
    hint: str | None
    outcome: Outcome
    sticky: bool
    role: Role

    @property
    def label(self) -> str:
        return f"FAIL_{self.code}" if self.code is not None else self.rule.name

    @property
    def title(self) -> str:
        if self.name and self.code is not None and self.name != str(self.code):
            return f"{self.name} ({self.code})"
        if self.name:
            return self.name
        if self.code is not None:
            return f"{self.outcome.value}_{self.code}"
        return self.outcome.value


@dataclass(frozen=True)
class Classification:
    outcome: Outcome
    code: int | str | None
    summary: str
    sticky: bool
    rule: str | None = None
    secondary: tuple[str, ...] = field(default_factory=tuple)   # other signatures seen, as labels
    fields: dict[str, Any] = field(default_factory=dict)        # named groups: core_id, retcode, runtime_status, ...
    hint: str | None = None
    name: str | None = None                                     # the code's name: ACL_ERROR_RT_AICORE_EXCEPTION
    cause: str | None = None                                    # the root cause's meaning, when the label names
                                                                # another code: "AI Core execution fault"

    def metrics(self) -> dict[str, Any]:
        """What the classifier extracted, kept with the result's metrics (rendered by reports)."""
        metrics: dict[str, Any] = {"rule": self.rule}
        if self.secondary:
            metrics["secondary"] = list(self.secondary)
        if self.fields:
            metrics["fields"] = dict(self.fields)
        if self.hint:
            metrics["hint"] = self.hint
        if self.name:
            metrics["fault_name"] = self.name
        if self.cause:
            metrics["cause"] = self.cause
        return metrics


# ---------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------

def _bounded(text: str) -> str:
    if len(text) <= _LOG_HEAD + _LOG_TAIL:
        return text
    return text[:_LOG_HEAD] + "\n...\n" + text[-_LOG_TAIL:]


def _occurrences(text: str, needle: str) -> list[int]:
    """Where the needle is: its first and last ``_PER_NEEDLE`` occurrences."""
    first: list[int] = []
    i = text.find(needle)
    while i >= 0 and len(first) < _PER_NEEDLE:
        first.append(i)
        i = text.find(needle, i + 1)
    if i < 0:
        return first
    last: list[int] = []
    floor = first[-1] + 1
    j = text.rfind(needle, floor)
    while j >= floor and len(last) < _PER_NEEDLE:
        last.append(j)
        j = text.rfind(needle, floor, j + len(needle) - 1)
    return first + last[::-1]


def _base_needles(needles: set[str]) -> list[str]:
    """The strings actually searched for: needles sharing a long prefix are searched by the
    prefix (CUDA_ERROR_..., cudaError...), and a needle containing another is left to it."""
    ordered = sorted(needles)
    searched = set(needles)
    for a, b in zip(ordered, ordered[1:]):
        common = len(_common_prefix(a, b))
        if common >= _SHARED_PREFIX:
            searched.discard(a)
            searched.discard(b)
            searched.add(a[:common])
    return [n for n in searched if not any(m != n and m in n for m in searched)]


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def _line_span(text: str, i: int) -> tuple[int, int]:
    lo = max(0, i - _LINE_CLIP)
    k = text.rfind("\n", lo, i)
    start = k + 1 if k >= 0 else lo
    end = text.find("\n", i, i + _LINE_CLIP)
    return start, end if end >= 0 else min(len(text), i + _LINE_CLIP)


def _candidate_lines(text: str, base: Iterable[str]) -> dict[int, tuple[int, set[str]]]:
    """Lines holding a searched string: start -> (end, the strings found on it)."""
    lines: dict[int, tuple[int, set[str]]] = {}
    for b in base:
        for i in _occurrences(text, b):
            start, end = _line_span(text, i)
            held_end, found = lines.get(start, (end, set()))
            found.add(b)
            lines[start] = (max(held_end, end), found)
    return lines


def _value(raw: str) -> int | str:
    return int(raw) if re.fullmatch(r"-?\d{1,18}", raw) else raw


def _hit(rule: Rule, order: int, pos: int, line: str, m: re.Match) -> Hit:
    groups = {k: _value(v) for k, v in m.groupdict().items() if v is not None}
    code = rule.code
    present = [groups[g] for g in rule.code_groups if g in groups]
    if present:
        code = next((v for v in present if v not in (0, "")), present[-1])
    key = groups.get(rule.lookup) if rule.lookup else code
    info = rule.codes.get(key, _NO_INFO) if key is not None else _NO_INFO
    if info.code is not None:
        code = info.code
    return Hit(pos=pos, order=order, rule=rule, line=line, groups=groups, code=code, name=info.name,
               meaning=info.meaning or rule.meaning, hint=info.hint or rule.hint,
               outcome=info.outcome or rule.outcome,
               sticky=rule.sticky if info.sticky is None else info.sticky, role=info.role or rule.role)


def match_rules(text: str, rules: Sequence[Rule] | None = None) -> list[Hit]:
    """Every signature in the text, each rule at most once per line, in evidence order."""
    rules = builtin_rules() if rules is None else tuple(rules)
    text = _bounded(text)
    found_hits: dict[tuple[int, int], Hit] = {}

    def offer(hit: Hit) -> None:
        found_hits.setdefault((hit.pos, hit.order), hit)

    base = _base_needles({n for rule in rules for n in rule.needles})
    tried_through = {b: [(i, r) for i, r in enumerate(rules) if any(b in n for n in r.needles)] for b in base}
    for start, (end, found) in _candidate_lines(text, base).items():
        line = text[start:end]
        tried: set[int] = set()
        for b in found:
            for order, rule in tried_through[b]:
                if order in tried:
                    continue
                tried.add(order)
                if any(n in line for n in rule.needles) and (m := rule.pattern.search(line)):
                    offer(_hit(rule, order, start, line, m))
    for order, rule in enumerate(rules):
        if rule.needles:
            continue
        for k, m in enumerate(rule.pattern.finditer(text)):
            if k >= _SLOW_MATCHES:
                break
            start, end = _line_span(text, m.start())
            offer(_hit(rule, order, start, text[start:end], m))
    return [found_hits[key] for key in sorted(found_hits)]


def _evidence(line: str) -> str:
    return _clip(" ".join(_LOG_PREFIX.sub("", line).split()), _EVIDENCE_CHARS)


def _detail(hits: list[Hit]) -> str:
    """What the device's and the frameworks' reports said, for the one-line summary."""
    said = _fields(h for h in hits if h.rule.detail)
    text = ", ".join(f"{k}={_clip(str(v), 40)}" for k, v in said.items())
    return _clip(text, _DETAIL_CHARS)


def _fields(hits: Iterable[Hit]) -> dict[str, Any]:
    """The named groups of the hits, the first hit's value winning ("code" and "_x" are not fields)."""
    fields: dict[str, Any] = {}
    for h in hits:
        for k, v in h.groups.items():
            if k != "code" and not k.startswith("_"):
                fields.setdefault(k, v)
    return fields


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _strength(hit: Hit) -> tuple[int, int, int]:
    return hit.role.rank, hit.pos, hit.order


def _refined(cause: Hit, hits: list[Hit]) -> Hit:
    """The root cause, or a hit of its rank that names it more exactly: a name ``X/Y`` refines
    ``X`` (PTO2's ``SCHEDULER_TIMEOUT/S1:running-stalled`` refines the status line's
    ``SCHEDULER_TIMEOUT``, whichever was printed first)."""
    if not cause.name:
        return cause
    finer = [h for h in hits if h.role is cause.role and h.name and h.name.startswith(cause.name + "/")]
    return min(finer, key=_strength) if finer else cause


def _from_hits(hits: list[Hit], prefix: str = "") -> Classification | None:
    if not hits:
        return None
    cause = _refined(min(hits, key=_strength), hits)
    printed = [h for h in hits if h.code is not None and not h.rule.detail]
    named = min(printed, key=_strength) if printed else cause
    secondary: list[str] = []
    for h in hits:
        if h.code is not None and h.label != cause.label and h.label not in secondary:
            secondary.append(h.label)
    secondary = secondary[:_MAX_SECONDARY]
    fields = _fields((cause, named, *hits))
    summary = f"{prefix}{named.title}: {named.meaning}"
    if cause is not named:
        if cause.code is not None:
            fields.setdefault("cause_code", cause.code)
        if cause.name:
            fields.setdefault("cause", cause.name)
        summary += f"; cause: {cause.title}: {cause.meaning}" if cause.name or cause.code is not None \
            else f"; cause: {cause.meaning}"
    cascade = [label for label in secondary if label != named.label]
    if cascade:
        summary += f"; cascade: {', '.join(cascade)}"
    detail = _detail(hits)
    if detail:
        summary += f"; detail: {detail}"
    summary += f" | {_evidence(cause.line)}"
    hint = next((h.hint for h in (cause, named, *sorted(hits, key=_strength)) if h.hint), None)
    return Classification(cause.outcome, named.code, summary, cause.sticky, cause.rule.name,
                          tuple(secondary), fields, hint, named.name,
                          cause.meaning if cause is not named else None)


def classify_text(text: str, rules: Sequence[Rule] | None = None) -> Classification | None:
    """The class the evidence names, or None when no rule matches."""
    return _from_hits(match_rules(text, rules))


# ---------------------------------------------------------------------------
# The front end's three questions
# ---------------------------------------------------------------------------

def read_log(path: str | Path | None) -> str:
    """Head and tail of a log, bounded, never failing on bad bytes."""
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(0)
            if size <= _LOG_HEAD + _LOG_TAIL:
                data = fh.read()
            else:
                head = fh.read(_LOG_HEAD)
                fh.seek(size - _LOG_TAIL)
                data = head + b"\n...\n" + fh.read(_LOG_TAIL)
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


def classify_exception(stage: str, exc_type: str, message: str, traceback_text: str,
                       log_text: str = "", *, rules: Sequence[Rule] | None = None) -> Classification:
    """A Python exception raised while importing or running the kernel."""
    first_line = (f"{exc_type}: {message}".splitlines() or [exc_type])[0][:300]
    if stage == "import":
        return Classification(Outcome.BUILD_ERROR, None, f"kernel import failed: {first_line}", False, "import")
    if stage == "contract":
        return Classification(Outcome.CONTRACT, None, (message.splitlines() or [""])[0][:300], False, "signature")
    evidence = "\n".join((_bounded(log_text), traceback_text, f"{exc_type}: {message}"))
    found = classify_text(evidence, rules)
    if found is not None:
        return found
    return Classification(Outcome.CRASH, None, f"kernel raised {first_line}", False, "exception")


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def exit_line(returncode: int | None) -> str:
    """The line the harness adds to a dead worker's evidence, for the process rules to match."""
    if returncode is None:
        return "[harness] worker died mid-case; exit status unknown"
    if returncode < 0:
        return f"[harness] worker killed by {_signal_name(returncode)} (signal {-returncode}) while running the kernel"
    return f"[harness] worker exited with status {returncode} while running the kernel"


def classify_exit(returncode: int | None, log_text: str = "", *,
                  rules: Sequence[Rule] | None = None) -> Classification:
    """The worker process died while running a case: always sticky (there is no worker left)."""
    line = exit_line(returncode)
    found = _from_hits(match_rules(_bounded(log_text) + "\n" + line, rules), prefix="worker died: ")
    if found is not None:
        return replace(found, sticky=True)
    code = _signal_name(returncode) if returncode is not None and returncode < 0 else returncode
    return Classification(Outcome.CRASH, code, line.removeprefix("[harness] "), True, "exit")


def classify_timeout(timeout_s: float, log_text: str = "", *,
                     rules: Sequence[Rule] | None = None) -> Classification:
    """No answer within the case's timeout; signatures in ``log_text`` are kept as secondary."""
    summary = f"no result within timeout_s={timeout_s:g}; worker killed"
    seen = classify_text(log_text, rules) if log_text else None
    if seen is None:
        return Classification(Outcome.HANG, None, summary, True, "timeout")
    labels = tuple(dict.fromkeys((f"FAIL_{seen.code}" if seen.code is not None else seen.rule or "",
                                  *seen.secondary)))
    return Classification(Outcome.HANG, None, f"{summary}; log shows {', '.join(labels)}", True, "timeout",
                          labels, seen.fields, seen.hint)
