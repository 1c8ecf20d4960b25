"""``--ref NAME=REV`` as the user gave it: parsed and checked before git sees it.

Every error a user can cause anywhere in ``harness.refs`` is a ``RefError`` with
one line that names the bad input (a ``UsageError``: the CLI exits 2).
"""
from __future__ import annotations

from collections.abc import Iterable

from harness.errors import UsageError


class RefError(UsageError):
    """A bad ref, repository, template or cache: one line naming the bad input."""


def show(text: str) -> str:
    """``text`` as it may appear in a one-line message (repr when it holds odd characters)."""
    return text if text.isprintable() and text.strip() == text and text else repr(text)


def _check_part(arg: str, what: str, value: str) -> None:
    if not value:
        raise RefError(f"--ref {show(arg)}: empty {what}")
    if value.startswith("-"):
        raise RefError(f"--ref {show(arg)}: {what} {show(value)} starts with '-'")
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        raise RefError(f"--ref {show(arg)}: {what} {show(value)} holds whitespace or control characters")


def parse_ref_arg(arg: str) -> tuple[str, str]:
    """``"NAME=REV"`` → ``(name, rev)``; a bare ``"REV"`` is named after itself."""
    name, sep, rev = arg.partition("=")
    if not sep:
        name = rev = arg
    _check_part(arg, "name", name)
    _check_part(arg, "revision", rev)
    return name, rev


def parse_ref_args(args: Iterable[str]) -> list[tuple[str, str]]:
    """Every ``--ref`` in order; names must be unique."""
    refs: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    for arg in args:
        name, rev = parse_ref_arg(arg)
        if name in seen:
            raise RefError(f"--ref {show(arg)}: name {show(name)} already used by --ref {show(seen[name])}")
        seen[name] = arg
        refs.append((name, rev))
    return refs
