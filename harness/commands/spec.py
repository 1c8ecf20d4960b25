"""What a command case runs: the command, its cwd, its pass rule, and the placeholders in them.

A command case is a ``Case`` whose ``command`` field holds ``CommandSpec.to_wire()``
(plain JSON, so it is stored with the planned case and read back by ``--resume``).
Placeholders are ``{name}``; ``{{`` and ``}}`` are literal braces.  The names a case
may use are its matrix keys, ``seed``, and ``RUNTIME``, which are filled in when the
case runs (docs/commands.md).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from harness.commands.selection import TestSelection

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
    tests: "TestSelection | None" = None   # --test / -k reaching its JUnit tests (harness.commands.selection)

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
