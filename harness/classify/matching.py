"""Name a failure from what the worker saw: the exception, its log, its exit status.

Rules are data (``harness/rules/builtin.yaml``, plus a project's
``harness-rules.yaml`` and ``--rules`` files): a single-line regex, the outcome
it means (docs/contracts.md), its code, whether the fault is *sticky* (the device
context is poisoned: the worker must be replaced), a meaning, a hint, and a
*role*:

* ``cause``   names a fault by itself (an AICore exception, an orchestration
  deadlock, CUDA 700);
* ``cascade`` is a generic wrapper a fault ends in (507018 AICPU_EXCEPTION, a
  stream-sync timeout, a worker killed by a signal);
* ``context`` is an annotation that names no fault on its own (an ``EZ9999``
  header, a bare "task failed" line).

The engine finds every signature in the evidence, one per line (on a line
matched by several rules: the strongest role, then the first rule in the list;
user rules come before the built-ins), then picks the class: a cause anywhere
beats a cascade, a cascade beats context, and among equals the earliest line
wins.  The other signatures are kept as secondary labels (``FAIL_507018``), and
the named groups of all of them (the class's first) become ``fields``.  A cause
may be printed after the wrapper it explains (torch-npu prints the device's
detail block after ``error code is 507018``), so a cause wins wherever it is.

Speed: each rule's pattern is reduced, once, to the literal text any match
must contain (its *needles*); the evidence is searched for the needles with
``str.find`` (at most the first and last 512 places of each) and only the
lines that contain one are given to the regexes.  A pattern with no usable
literal (or one matching case-insensitively) is run over the whole text
instead: start such a pattern with a literal character so that stays cheap.
Evidence longer than 16 MiB is read as its first 4 MiB and last 12 MiB.

A code table maps a rule's code (or another of its groups, ``lookup``) to a
name, a meaning, and overrides of outcome, sticky, role, hint or code: one rule
``error code is 507\\d{3}`` covers the whole ACL runtime range, 507018 being a
cascade and 507015 a cause.
"""
from __future__ import annotations

import enum
import functools
import re
import signal
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml

from harness.casefiles.matrix import MatrixError, Where
from harness.outcomes import Outcome

try:                                    # Python 3.11+
    from re import _constants as _sre
    from re import _parser as _sre_parse
except ImportError:                     # pragma: no cover - Python 3.10
    import sre_constants as _sre        # type: ignore[no-redef]
    import sre_parse as _sre_parse      # type: ignore[no-redef]

__all__ = [
    "BUILTIN_RULES_FILE",
    "PROJECT_RULES_FILE",
    "Classification",
    "CodeInfo",
    "Hit",
    "Role",
    "Rule",
    "RulesError",
    "builtin_rules",
    "classify_exception",
    "classify_exit",
    "classify_text",
    "classify_timeout",
    "combine_rules",
    "default_rules",
    "exit_line",
    "load_rules",
    "match_rules",
    "read_log",
]

BUILTIN_RULES_FILE = Path(__file__).with_name("builtin.yaml")
PROJECT_RULES_FILE = "harness-rules.yaml"

# Evidence window: a log longer than head + tail is read as its head and its tail.
_LOG_HEAD = 4 << 20
_LOG_TAIL = 12 << 20
_LINE_CLIP = 4096          # a "line" is cut to this many characters either side of a needle
_PER_NEEDLE = 512          # occurrences looked at per needle: this many first and this many last
_SLOW_MATCHES = 256        # matches taken per rule that has no needle
_MIN_NEEDLE = 3
_SHARED_PREFIX = 6         # needles sharing this long a prefix are searched by the prefix
_MAX_SECONDARY = 8
_EVIDENCE_CHARS = 160
# "[ERROR] RUNTIME(48211,python):2026-03-14-09:21:07.512.334 [task_info.cc:1412]48211 PrintErrorInfo: "
_LOG_PREFIX = re.compile(r"^\s*\[(?:ERROR|WARNING|INFO|DEBUG|EVENT)\]\s+\S+?\(\d+,[^)]*\):\S+\s+"
                         r"(?:\[[^\]]*\]\s*)?(?:\d+\s+\w+:\s*)?")


# ---------------------------------------------------------------------------
# Rules as data
# ---------------------------------------------------------------------------

class Role(str, enum.Enum):
    CAUSE = "cause"
    CASCADE = "cascade"
    CONTEXT = "context"

    @property
    def rank(self) -> int:
        return _ROLE_RANK[self]


_ROLE_RANK = {Role.CAUSE: 0, Role.CASCADE: 1, Role.CONTEXT: 2}


@dataclass(frozen=True)
class CodeInfo:
    """One entry of a code table: a name and what it changes about the rule that found it."""

    name: str | None = None
    meaning: str | None = None
    hint: str | None = None
    outcome: Outcome | None = None
    sticky: bool | None = None
    role: Role | None = None
    code: int | str | None = None


_NO_INFO = CodeInfo()


@dataclass(frozen=True, eq=False)
class Rule:
    """A signature: a single-line regex and what a match means."""

    name: str
    pattern: re.Pattern
    outcome: Outcome
    sticky: bool
    meaning: str
    role: Role = Role.CAUSE
    hint: str | None = None
    code: int | str | None = None            # a fixed code, when the pattern carries none
    code_groups: tuple[str, ...] = ()        # the code is the first of these groups that is non-zero
    lookup: str | None = None                # group whose value keys ``codes`` (default: the code)
    codes: Mapping[Any, CodeInfo] = field(default_factory=dict)
    source: str = ""                         # where the rule was written: ``builtin.yaml:120``
    needles: tuple[str, ...] = ()            # derived: one of these is in every line the pattern matches

    def __post_init__(self) -> None:
        if not self.needles:
            object.__setattr__(self, "needles", _needles(self.pattern))


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


# ---------------------------------------------------------------------------
# Needles: the literal text a pattern cannot match without
# ---------------------------------------------------------------------------

_REPEATS = tuple(op for op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, getattr(_sre, "POSSESSIVE_REPEAT", None)) if op)
_GROUPS = tuple(op for op in (_sre.SUBPATTERN, getattr(_sre, "ATOMIC_GROUP", None)) if op)


def _needles(pattern: re.Pattern) -> tuple[str, ...]:
    """Literals, one of which is in every string the pattern matches; () when none is long enough."""
    if not isinstance(pattern.pattern, str) or pattern.flags & re.IGNORECASE:
        return ()
    try:
        best = _requirement(_sre_parse.parse(pattern.pattern, pattern.flags))
    except Exception:       # an unknown parse shape only costs speed
        return ()
    if not best or min(map(len, best)) < _MIN_NEEDLE or any("\n" in n for n in best):
        return ()
    return tuple(sorted(best))


def _requirement(items) -> frozenset[str] | None:
    """The strongest requirement of a parsed sequence: literals of which a match contains one."""
    found: list[frozenset[str]] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            found.append(frozenset(["".join(run)]))
            run.clear()

    for op, av in _flatten(items):
        if op is _sre.LITERAL:
            run.append(chr(av))
            continue
        if op is _sre.AT:           # zero width: literals either side stay adjacent
            continue
        flush()
        if op is _sre.BRANCH:
            alternatives = [_requirement(branch) for branch in av[1]]
            if all(alternatives):
                found.append(frozenset().union(*alternatives))
        elif op in _REPEATS and av[0] >= 1:
            inner = _requirement(av[2])
            if inner:
                found.append(inner)
    flush()
    return max(found, key=lambda req: min(map(len, req)), default=None)


def _flatten(items):
    for op, av in items:
        if op in _GROUPS:
            sub = av if op is not _sre.SUBPATTERN else av[3]
            if op is _sre.SUBPATTERN and av[1] & _sre.SRE_FLAG_IGNORECASE:
                yield _sre.ANY, None
            else:
                yield from _flatten(sub)
        else:
            yield op, av


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
    """Every signature in the text, one per line (the strongest rule there), in evidence order."""
    rules = builtin_rules() if rules is None else tuple(rules)
    text = _bounded(text)
    best: dict[int, Hit] = {}

    def offer(hit: Hit) -> None:
        held = best.get(hit.pos)
        if held is None or (hit.role.rank, hit.order) < (held.role.rank, held.order):
            best[hit.pos] = hit

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
    return sorted(best.values(), key=lambda h: h.pos)


def _evidence(line: str) -> str:
    text = " ".join(_LOG_PREFIX.sub("", line).split())
    return text if len(text) <= _EVIDENCE_CHARS else text[:_EVIDENCE_CHARS - 3] + "..."


def _from_hits(hits: list[Hit], prefix: str = "") -> Classification | None:
    if not hits:
        return None
    primary = min(hits, key=lambda h: (h.role.rank, h.pos, h.order))
    secondary: list[str] = []
    for h in hits:
        if h is not primary and h.label != primary.label and h.label not in secondary:
            secondary.append(h.label)
    secondary = secondary[:_MAX_SECONDARY]
    fields: dict[str, Any] = {}
    for h in (primary, *hits):
        for k, v in h.groups.items():
            if k != "code" and not k.startswith("_"):
                fields.setdefault(k, v)
    summary = f"{prefix}{primary.title}: {primary.meaning}"
    if secondary:
        summary += f"; cascade: {', '.join(secondary)}"
    summary += f" | {_evidence(primary.line)}"
    return Classification(primary.outcome, primary.code, summary, primary.sticky, primary.rule.name,
                          tuple(secondary), fields, primary.hint, primary.name)


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


# ---------------------------------------------------------------------------
# Rules files: load, validate (every error names file:line:col and field), combine
# ---------------------------------------------------------------------------

class RulesError(MatrixError):
    """A bad rules file, one line: ``<path>:<line>:<col>: <field>: <message>`` (a ``ValueError``)."""


def _fail(where: Where, message: str) -> RulesError:
    return RulesError(where.path, where.line, where.column, where.field, message)


_TOP_KEYS = ("version", "tables", "rules")
_RULE_KEYS = ("name", "pattern", "outcome", "sticky", "meaning", "role", "hint", "code", "code_groups",
              "lookup", "codes")
_REQUIRED = ("name", "pattern", "outcome", "sticky", "meaning")
_ENTRY_KEYS = ("name", "meaning", "hint", "outcome", "sticky", "role", "code")
_OUTCOMES = tuple(o.value for o in Outcome if o not in (Outcome.PASS, Outcome.NEAR_TIE))
_ROLES = tuple(r.value for r in Role)
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    import difflib
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


class _File:
    """A composed YAML file whose nodes still know their line and column."""

    def __init__(self, path: Path, shown: str):
        self.shown = shown
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise RulesError(shown, None, None, "", "no such rules file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise RulesError(shown, None, None, "", f"cannot read rules file: {exc}") from None
        self.loader = yaml.SafeLoader(text)
        try:
            self.root = self.loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            raise _yaml_error(exc, shown, text) from None
        except yaml.YAMLError as exc:
            raise RulesError(shown, None, None, "", f"invalid YAML: {' '.join(str(exc).split())}") from None
        finally:
            self.loader.dispose()

    def scalar(self, node: yaml.Node, where: Where) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise _fail(where, f"expected a single value, got {_kind(node)}")
        return self.loader.construct_object(node, deep=True)

    def mapping(self, node: yaml.Node, where: Where) -> dict[Any, tuple[yaml.Node, Where, Where]]:
        """key -> (value node, where the value is, where the key is)."""
        if not isinstance(node, yaml.MappingNode):
            raise _fail(where, f"expected a mapping, got {_kind(node)}")
        self.loader.flatten_mapping(node)
        out: dict[Any, tuple[yaml.Node, Where, Where]] = {}
        for knode, vnode in node.value:
            key = self.scalar(knode, where.at(knode))
            if isinstance(key, bool) or not isinstance(key, (str, int)):
                raise _fail(where.at(knode), f"keys must be strings or integers, got {key!r} (quote it)")
            kwhere = where.key(str(key)).at(knode)
            if key in out:
                raise _fail(kwhere, f"duplicate key {key!r}")
            out[key] = (vnode, where.key(str(key)).at(vnode), kwhere)
        return out

    def sequence(self, node: yaml.Node, where: Where) -> list[tuple[yaml.Node, Where]]:
        if not isinstance(node, yaml.SequenceNode):
            raise _fail(where, f"expected a list, got {_kind(node)}")
        return [(item, where.index(i).at(item)) for i, item in enumerate(node.value)]


def _yaml_error(exc: yaml.MarkedYAMLError, shown: str, text: str) -> RulesError:
    """At the problem; a problem at the end of the file (an unclosed bracket or quote) is
    reported where the unclosed construct starts."""
    mark = exc.problem_mark or exc.context_mark
    what = " ".join(str(exc.problem or "malformed").split()).replace("'<stream end>'", "end of file")
    if exc.context and exc.context_mark is not None:
        if exc.problem_mark is not None and exc.problem_mark.index >= len(text.rstrip()):
            mark = exc.context_mark
            what += f" ({' '.join(exc.context.split())} that starts here)"
    line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
    return RulesError(shown, line, col, "", f"invalid YAML: {what}")


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return f"{node.value!r}"


def _check_keys(items: Mapping[Any, tuple], valid: tuple[str, ...]) -> None:
    for key, (_, _, kwhere) in items.items():
        if key not in valid:
            raise _fail(kwhere, f"unknown key '{key}'{_did_you_mean(str(key), valid)} (valid: {', '.join(valid)})")


def _text(f: _File, node: yaml.Node, where: Where) -> str:
    value = f.scalar(node, where)
    if not isinstance(value, str) or not value.strip():
        raise _fail(where, f"expected a non-empty string, got {value!r}")
    return value


def _bool(f: _File, node: yaml.Node, where: Where) -> bool:
    value = f.scalar(node, where)
    if not isinstance(value, bool):
        raise _fail(where, f"expected true or false, got {value!r}")
    return value


def _code(f: _File, node: yaml.Node, where: Where) -> int | str:
    value = f.scalar(node, where)
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "":
        raise _fail(where, f"expected a code (an integer or a string), got {value!r}")
    return value


def _choice(f: _File, node: yaml.Node, where: Where, choices: tuple[str, ...], what: str) -> str:
    value = _text(f, node, where)
    if value not in choices:
        raise _fail(where, f"unknown {what} '{value}'{_did_you_mean(value, choices)} "
                           f"(expected one of: {', '.join(choices)})")
    return value


def _entry(f: _File, node: yaml.Node, where: Where) -> CodeInfo:
    if isinstance(node, yaml.ScalarNode):
        return CodeInfo(name=_text(f, node, where))
    items = f.mapping(node, where)
    _check_keys(items, _ENTRY_KEYS)
    get = {k: (n, w) for k, (n, w, _) in items.items()}
    return CodeInfo(
        name=_text(f, *get["name"]) if "name" in get else None,
        meaning=_text(f, *get["meaning"]) if "meaning" in get else None,
        hint=_text(f, *get["hint"]) if "hint" in get else None,
        outcome=Outcome(_choice(f, *get["outcome"], _OUTCOMES, "outcome")) if "outcome" in get else None,
        sticky=_bool(f, *get["sticky"]) if "sticky" in get else None,
        role=Role(_choice(f, *get["role"], _ROLES, "role")) if "role" in get else None,
        code=_code(f, *get["code"]) if "code" in get else None,
    )


def _table(f: _File, node: yaml.Node, where: Where) -> dict[Any, CodeInfo]:
    return {key: _entry(f, vnode, vwhere) for key, (vnode, vwhere, _) in f.mapping(node, where).items()}


def _pattern(f: _File, node: yaml.Node, where: Where) -> re.Pattern:
    source = _text(f, node, where)
    try:
        compiled = re.compile(source, re.MULTILINE)
    except re.error as exc:
        raise _fail(where, f"bad regex: {exc}") from None
    if compiled.search("") is not None:
        raise _fail(where, "pattern matches an empty line, so it would match everywhere")
    return compiled


def _group(f: _File, node: yaml.Node, where: Where, pattern: re.Pattern) -> str:
    name = _text(f, node, where)
    if name not in pattern.groupindex:
        groups = ", ".join(pattern.groupindex) or "none"
        raise _fail(where, f"the pattern has no group named '{name}' (its named groups: {groups})")
    return name


def _rule(f: _File, node: yaml.Node, where: Where, tables: Mapping[str, Mapping[Any, CodeInfo]]) -> Rule:
    items = f.mapping(node, where)
    _check_keys(items, _RULE_KEYS)
    for key in _REQUIRED:
        if key not in items:
            raise _fail(where.key(key), f"missing required field '{key}'")
    get = {k: (n, w) for k, (n, w, _) in items.items()}
    name = _text(f, *get["name"])
    if not _NAME_RE.fullmatch(name):
        raise _fail(get["name"][1], f"rule names are identifiers (letters, digits, _ . -), got {name!r}")
    pattern = _pattern(f, *get["pattern"])
    code = _code(f, *get["code"]) if "code" in get else None
    if "code_groups" in get:
        if code is not None:
            raise _fail(get["code_groups"][1], "give either 'code' or 'code_groups', not both")
        nodes = f.sequence(*get["code_groups"])
        if not nodes:
            raise _fail(get["code_groups"][1], "expected at least one group name")
        code_groups = tuple(_group(f, n, w, pattern) for n, w in nodes)
    else:
        code_groups = ("code",) if code is None and "code" in pattern.groupindex else ()
    codes: Mapping[Any, CodeInfo] = {}
    if "codes" in get:
        cnode, cwhere = get["codes"]
        if isinstance(cnode, yaml.ScalarNode):
            table = _text(f, cnode, cwhere)
            if table not in tables:
                raise _fail(cwhere, f"unknown code table '{table}'{_did_you_mean(table, tables)} "
                                    f"(tables: {', '.join(tables) or 'none'})")
            codes = tables[table]
        else:
            codes = _table(f, cnode, cwhere)
    return Rule(
        name=name,
        pattern=pattern,
        outcome=Outcome(_choice(f, *get["outcome"], _OUTCOMES, "outcome")),
        sticky=_bool(f, *get["sticky"]),
        meaning=_text(f, *get["meaning"]),
        role=Role(_choice(f, *get["role"], _ROLES, "role")) if "role" in get else Role.CAUSE,
        hint=_text(f, *get["hint"]) if "hint" in get else None,
        code=code,
        code_groups=code_groups,
        lookup=_group(f, *get["lookup"], pattern) if "lookup" in get else None,
        codes=codes,
        source=f"{where.path}:{where.line}",
    )


def _parse(path: Path, shown: str, fallback_tables: Mapping[str, Mapping[Any, CodeInfo]]
           ) -> tuple[tuple[Rule, ...], dict[str, dict[Any, CodeInfo]]]:
    f = _File(path, shown)
    where = Where(shown)
    if f.root is None:
        raise _fail(where, "empty rules file (expected a mapping with 'rules:')")
    top = f.mapping(f.root, where.at(f.root))
    _check_keys(top, _TOP_KEYS)
    if "version" in top:
        vnode, vwhere, _ = top["version"]
        if f.scalar(vnode, vwhere) != 1:
            raise _fail(vwhere, "unsupported version (expected 1)")
    tables: dict[str, dict[Any, CodeInfo]] = {}
    if "tables" in top:
        tnode, twhere, _ = top["tables"]
        for key, (node, w, kw) in f.mapping(tnode, twhere).items():
            if not isinstance(key, str):
                raise _fail(kw, f"table names are strings, got {key!r}")
            tables[key] = _table(f, node, w)
    if "rules" not in top:
        raise _fail(where.at(f.root).key("rules"), "missing required field 'rules'")
    rnode, rwhere, _ = top["rules"]
    visible = {**fallback_tables, **tables}
    rules: list[Rule] = []
    first: dict[str, Where] = {}
    for node, w in f.sequence(rnode, rwhere):
        rule = _rule(f, node, w, visible)
        if rule.name in first:
            raise _fail(w.key("name"), f"duplicate rule name '{rule.name}' (first at line {first[rule.name].line})")
        first[rule.name] = w
        rules.append(rule)
    return tuple(rules), tables


@functools.lru_cache(maxsize=1)
def _builtin() -> tuple[tuple[Rule, ...], dict[str, dict[Any, CodeInfo]]]:
    return _parse(BUILTIN_RULES_FILE, f"harness/rules/{BUILTIN_RULES_FILE.name}", {})


def builtin_rules() -> tuple[Rule, ...]:
    """The shipped rules (read once, on first use)."""
    return _builtin()[0]


def builtin_tables() -> dict[str, dict[Any, CodeInfo]]:
    return _builtin()[1]


def load_rules(path: str | Path) -> tuple[Rule, ...]:
    """A user rules file, validated; its rules may use the built-in code tables by name."""
    return _parse(Path(path), str(path), builtin_tables())[0]


def combine_rules(base: Sequence[Rule], *layers: Sequence[Rule]) -> tuple[Rule, ...]:
    """Later layers first; a rule replaces any later-tried rule of the same name."""
    ordered: list[Rule] = []
    seen: set[str] = set()
    for layer in (*reversed(layers), base):
        for rule in layer:
            if rule.name not in seen:
                seen.add(rule.name)
                ordered.append(rule)
    return tuple(ordered)


def default_rules(project_file: Path | None = None, extra: Iterable[Path] = ()) -> tuple[Rule, ...]:
    """Built-ins, then the project file (``harness-rules.yaml`` in the cwd when not named), then
    ``--rules`` files: each later file overrides same-named rules and is tried first."""
    layers = []
    if project_file is None:
        found = Path.cwd() / PROJECT_RULES_FILE
        project_file = found if found.is_file() else None
    if project_file is not None:
        layers.append(load_rules(project_file))
    layers.extend(load_rules(p) for p in extra)
    return combine_rules(builtin_rules(), *layers)
