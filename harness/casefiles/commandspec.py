"""What a command case runs: the command, its cwd, its pass rule, the placeholders in them,
and which of its JUnit tests count.

A command case is a ``Case`` whose ``command`` field holds ``CommandSpec.to_wire()``
(plain JSON, so it is stored with the planned case and read back by ``--resume``).
Placeholders are ``{name}``; ``{{`` and ``}}`` are literal braces.  The names a case
may use are its matrix keys, ``seed``, and ``RUNTIME``, which are filled in when the
case runs (docs/commands.md).  ``TestSelection`` (``--test`` patterns, ``-k`` reaching its
tests) travels in ``CommandSpec.tests``: a case's tests are known only once it has run.
Here, below the case-file loader (``commandfile``), so that reading a case file needs
nothing of ``harness.commands``, which runs them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Iterator, Mapping

from harness.casefiles.expression import compile_expression

# Filled in when the case runs, per device and per run.  ``casedir`` is the case file's own
# directory, fixed whatever ref runs: where files that travel with the case live (a regression
# test injected into a suite, a conftest), so they need not be written inside the YAML.
RUNTIME = ("worktree", "casedir", "device", "device_index", "junit", "out", "python")

_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


class PlaceholderError(ValueError):
    """A template that names an unknown placeholder or has an unmatched brace (``offset``: where)."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.offset = offset


def placeholders(template: str) -> Iterator[tuple[str, int]]:
    """Every ``{name}`` in ``template`` with its offset; an unmatched brace raises ``PlaceholderError``."""
    for m in _PLACEHOLDER.finditer(template):
        token = m.group(0)
        if token in ("{{", "}}"):
            continue
        if m.group(1) is None:
            raise PlaceholderError(f"unmatched {token!r} (write {token * 2} for a literal one)", m.start())
        yield m.group(1), m.start()


def check_template(template: str, known: set[str]) -> None:
    """Refuse a placeholder that is not in ``known`` (``PlaceholderError`` with its offset)."""
    for name, offset in placeholders(template):
        if name not in known:
            raise PlaceholderError(f"unknown placeholder {{{name}}} (known: {', '.join(sorted(known))})", offset)


def substitute(template: str, values: Mapping[str, str]) -> str:
    """``template`` with every placeholder replaced (the names were checked when the file was read)."""
    def one(m: re.Match) -> str:
        token = m.group(0)
        if token in ("{{", "}}"):
            return token[0]
        return values[m.group(1)]
    return _PLACEHOLDER.sub(one, template)


@dataclass(frozen=True)
class TestSelection:
    """``patterns``: ``--test`` values (an id, exact, or a glob; matched against ``case::test`` and the
    bare test id); ``expr``: a ``-k`` expression the case's own id did not match.  Both must hold."""

    __test__ = False          # not a pytest class

    patterns: tuple[str, ...] = ()
    expr: str | None = None

    def matches(self, case_id: str, test_id: str) -> bool:
        full = f"{case_id}::{test_id}"
        if self.patterns and not any(pattern_matches(p, full, test_id) for p in self.patterns):
            return False
        if self.expr:
            return compile_expression(self.expr)(full)
        return True

    def describe(self) -> str:
        parts = [f"--test {p!r}" for p in self.patterns]
        if self.expr:
            parts.append(f"-k {self.expr!r}")
        return " ".join(parts)

    def to_wire(self) -> dict[str, Any]:
        return {"patterns": list(self.patterns), "expr": self.expr}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any] | None) -> "TestSelection | None":
        if not data:
            return None
        return cls(tuple(data.get("patterns") or ()), data.get("expr"))

    def merged(self, other: "TestSelection") -> "TestSelection":
        return TestSelection(self.patterns + other.patterns, self.expr or other.expr)


def pattern_matches(pattern: str, *ids: str) -> bool:
    """An id equal to the pattern (ids hold ``[...]``, which a glob reads as a set) or matching it as a glob."""
    return any(pattern == i or fnmatchcase(i, pattern) for i in ids)


@dataclass(frozen=True)
class PassRule:
    """When a finished command passed: its exit status, and optionally text that must (not) appear."""

    exit_code: int = 0
    regex: str | None = None         # must match somewhere in the output (re.MULTILINE)
    not_regex: str | None = None     # must match nowhere in the output

    def to_wire(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code, "regex": self.regex, "not_regex": self.not_regex}


@dataclass(frozen=True)
class CommandSpec:
    """One command case's command, before its placeholders are filled in."""

    command: str | tuple[str, ...]   # a string runs through /bin/sh -c; a list runs without a shell
    cwd: str | None = None           # None: the ref's worktree, else the case file's directory
    base_dir: str = "."              # the case file's directory (absolute)
    pass_rule: PassRule = field(default_factory=PassRule)
    tests: "TestSelection | None" = None   # --test / -k reaching its JUnit tests (TestSelection)

    @property
    def shell(self) -> bool:
        return isinstance(self.command, str)

    @property
    def text(self) -> str:
        """The command as one line, for ids, reports and provenance."""
        if isinstance(self.command, str):
            return self.command
        import shlex
        return shlex.join(self.command)

    def to_wire(self) -> dict[str, Any]:
        data = {"command": self.command if self.shell else list(self.command), "cwd": self.cwd,
                "base_dir": self.base_dir, "pass": self.pass_rule.to_wire()}
        if self.tests is not None:
            data["tests"] = self.tests.to_wire()
        return data

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> "CommandSpec":
        command = data["command"]
        return cls(command=command if isinstance(command, str) else tuple(command), cwd=data.get("cwd"),
                   base_dir=data.get("base_dir", "."), pass_rule=PassRule(**data.get("pass", {})),
                   tests=TestSelection.from_wire(data.get("tests")))
