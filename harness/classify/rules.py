"""Rules as data: the signatures the classifier looks for, and their files.

Rules are data (``harness/classify/builtin.yaml``, plus a project's
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

A rule may also be *detail* (``detail: true``): the device's or a framework's
own report of what happened (the AICore block with its core id and errorStr, a
task's retCode, the PTO2 status line, a signal).  It can name the root cause,
but the label is a code the runtime printed: a detail rule's code labels the
failure only where no other rule found a printed code.

A code table maps a rule's code (or another of its groups, ``lookup``) to a
name, a meaning, and overrides of outcome, sticky, role, hint or code: one rule
``error code is 507\\d{3}`` covers the whole ACL runtime range, 507018 being a
cascade and 507015 a cause.

Rules files are read as located YAML (``harness.casefiles.located``): every
error is a ``RulesError``, one line naming file:line:col and field.
"""
from __future__ import annotations

import enum
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml

from harness.casefiles.located import LocatedError, Where, compose, did_you_mean
from harness.classify.needles import needles
from harness.outcomes import Outcome

__all__ = [
    "BUILTIN_RULES_FILE",
    "PROJECT_RULES_FILE",
    "CodeInfo",
    "Role",
    "Rule",
    "RulesError",
    "builtin_rules",
    "builtin_tables",
    "combine_rules",
    "default_rules",
    "load_rules",
]

BUILTIN_RULES_FILE = Path(__file__).with_name("builtin.yaml")
PROJECT_RULES_FILE = "harness-rules.yaml"


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
    detail: bool = False                     # the rule's code labels only where no runtime code was printed
    needles: tuple[str, ...] = ()            # derived: one of these is in every line the pattern matches

    def __post_init__(self) -> None:
        if not self.needles:
            object.__setattr__(self, "needles", needles(self.pattern))


# ---------------------------------------------------------------------------
# Rules files: load, validate (every error names file:line:col and field), combine
# ---------------------------------------------------------------------------

class RulesError(LocatedError):
    """A bad rules file, one line: ``<path>:<line>:<col>: <field>: <message>``."""


_TOP_KEYS = ("version", "tables", "rules")
_RULE_KEYS = ("name", "pattern", "outcome", "sticky", "meaning", "role", "hint", "code", "code_groups",
              "lookup", "codes", "detail")
_REQUIRED = ("name", "pattern", "outcome", "sticky", "meaning")
_ENTRY_KEYS = ("name", "meaning", "hint", "outcome", "sticky", "role", "code")
_OUTCOMES = tuple(o.value for o in Outcome if o not in (Outcome.PASS, Outcome.NEAR_TIE))
_ROLES = tuple(r.value for r in Role)
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


class _File:
    """A rules file composed as located YAML: its nodes still know their line and column."""

    def __init__(self, path: Path, shown: str):
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise RulesError(shown, None, None, "", "no such rules file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise RulesError(shown, None, None, "", f"cannot read rules file: {exc}") from None
        self.root, self.loader = compose(text, shown, RulesError)

    def scalar(self, node: yaml.Node, where: Where) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise RulesError.at(where, f"expected a single value, got {_kind(node)}")
        return self.loader.construct_object(node, deep=True)

    def mapping(self, node: yaml.Node, where: Where) -> dict[Any, tuple[yaml.Node, Where, Where]]:
        """key -> (value node, where the value is, where the key is)."""
        if not isinstance(node, yaml.MappingNode):
            raise RulesError.at(where, f"expected a mapping, got {_kind(node)}")
        self.loader.flatten_mapping(node)
        out: dict[Any, tuple[yaml.Node, Where, Where]] = {}
        for knode, vnode in node.value:
            key = self.scalar(knode, where.at(knode))
            if isinstance(key, bool) or not isinstance(key, (str, int)):
                raise RulesError.at(where.at(knode), f"keys must be strings or integers, got {key!r} (quote it)")
            kwhere = where.key(str(key)).at(knode)
            if key in out:
                raise RulesError.at(kwhere, f"duplicate key {key!r}")
            out[key] = (vnode, where.key(str(key)).at(vnode), kwhere)
        return out

    def sequence(self, node: yaml.Node, where: Where) -> list[tuple[yaml.Node, Where]]:
        if not isinstance(node, yaml.SequenceNode):
            raise RulesError.at(where, f"expected a list, got {_kind(node)}")
        return [(item, where.index(i).at(item)) for i, item in enumerate(node.value)]


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return f"{node.value!r}"


def _check_keys(items: Mapping[Any, tuple], valid: tuple[str, ...]) -> None:
    for key, (_, _, kwhere) in items.items():
        if key not in valid:
            raise RulesError.at(
                kwhere, f"unknown key '{key}'{did_you_mean(str(key), valid)} (valid: {', '.join(valid)})")


def _text(f: _File, node: yaml.Node, where: Where) -> str:
    value = f.scalar(node, where)
    if not isinstance(value, str) or not value.strip():
        raise RulesError.at(where, f"expected a non-empty string, got {value!r}")
    return value


def _bool(f: _File, node: yaml.Node, where: Where) -> bool:
    value = f.scalar(node, where)
    if not isinstance(value, bool):
        raise RulesError.at(where, f"expected true or false, got {value!r}")
    return value


def _code(f: _File, node: yaml.Node, where: Where) -> int | str:
    value = f.scalar(node, where)
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "":
        raise RulesError.at(where, f"expected a code (an integer or a string), got {value!r}")
    return value


def _choice(f: _File, node: yaml.Node, where: Where, choices: tuple[str, ...], what: str) -> str:
    value = _text(f, node, where)
    if value not in choices:
        raise RulesError.at(where, f"unknown {what} '{value}'{did_you_mean(value, choices)} "
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
        raise RulesError.at(where, f"bad regex: {exc}") from None
    if compiled.search("") is not None:
        raise RulesError.at(where, "pattern matches an empty line, so it would match everywhere")
    return compiled


def _group(f: _File, node: yaml.Node, where: Where, pattern: re.Pattern) -> str:
    name = _text(f, node, where)
    if name not in pattern.groupindex:
        groups = ", ".join(pattern.groupindex) or "none"
        raise RulesError.at(where, f"the pattern has no group named '{name}' (its named groups: {groups})")
    return name


def _rule(f: _File, node: yaml.Node, where: Where, tables: Mapping[str, Mapping[Any, CodeInfo]]) -> Rule:
    items = f.mapping(node, where)
    _check_keys(items, _RULE_KEYS)
    for key in _REQUIRED:
        if key not in items:
            raise RulesError.at(where.key(key), f"missing required field '{key}'")
    get = {k: (n, w) for k, (n, w, _) in items.items()}
    name = _text(f, *get["name"])
    if not _NAME_RE.fullmatch(name):
        raise RulesError.at(get["name"][1], f"rule names are identifiers (letters, digits, _ . -), got {name!r}")
    pattern = _pattern(f, *get["pattern"])
    code = _code(f, *get["code"]) if "code" in get else None
    if "code_groups" in get:
        if code is not None:
            raise RulesError.at(get["code_groups"][1], "give either 'code' or 'code_groups', not both")
        nodes = f.sequence(*get["code_groups"])
        if not nodes:
            raise RulesError.at(get["code_groups"][1], "expected at least one group name")
        code_groups = tuple(_group(f, n, w, pattern) for n, w in nodes)
    else:
        code_groups = ("code",) if code is None and "code" in pattern.groupindex else ()
    codes: Mapping[Any, CodeInfo] = {}
    if "codes" in get:
        cnode, cwhere = get["codes"]
        if isinstance(cnode, yaml.ScalarNode):
            table = _text(f, cnode, cwhere)
            if table not in tables:
                raise RulesError.at(cwhere, f"unknown code table '{table}'{did_you_mean(table, tables)} "
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
        detail=_bool(f, *get["detail"]) if "detail" in get else False,
        source=f"{where.path}:{where.line}",
    )


def _parse(path: Path, shown: str, fallback_tables: Mapping[str, Mapping[Any, CodeInfo]]
           ) -> tuple[tuple[Rule, ...], dict[str, dict[Any, CodeInfo]]]:
    f = _File(path, shown)
    where = Where(shown)
    if f.root is None:
        raise RulesError.at(where, "empty rules file (expected a mapping with 'rules:')")
    top = f.mapping(f.root, where.at(f.root))
    _check_keys(top, _TOP_KEYS)
    if "version" in top:
        vnode, vwhere, _ = top["version"]
        if f.scalar(vnode, vwhere) != 1:
            raise RulesError.at(vwhere, "unsupported version (expected 1)")
    tables: dict[str, dict[Any, CodeInfo]] = {}
    if "tables" in top:
        tnode, twhere, _ = top["tables"]
        for key, (node, w, kw) in f.mapping(tnode, twhere).items():
            if not isinstance(key, str):
                raise RulesError.at(kw, f"table names are strings, got {key!r}")
            tables[key] = _table(f, node, w)
    if "rules" not in top:
        raise RulesError.at(where.at(f.root).key("rules"), "missing required field 'rules'")
    rnode, rwhere, _ = top["rules"]
    visible = {**fallback_tables, **tables}
    rules: list[Rule] = []
    first: dict[str, Where] = {}
    for node, w in f.sequence(rnode, rwhere):
        rule = _rule(f, node, w, visible)
        if rule.name in first:
            raise RulesError.at(
                w.key("name"), f"duplicate rule name '{rule.name}' (first at line {first[rule.name].line})")
        first[rule.name] = w
        rules.append(rule)
    return tuple(rules), tables


@functools.lru_cache(maxsize=1)
def _builtin() -> tuple[tuple[Rule, ...], dict[str, dict[Any, CodeInfo]]]:
    return _parse(BUILTIN_RULES_FILE, f"harness/classify/{BUILTIN_RULES_FILE.name}", {})


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
