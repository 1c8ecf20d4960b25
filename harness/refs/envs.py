"""``--env KEY=VALUE`` templates, expanded for one ref's worktree."""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence

from harness.refs.spec import RefError, show

TEMPLATE_FIELDS = ("worktree", "sha", "name")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_LIKE = re.compile(r"[A-Z_][A-Z0-9_]*")
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


def _path_like(key: str) -> bool:
    return key.upper().endswith("PATH")


def _expand(template: str, value: str, fields: Mapping[str, str], env: Mapping[str, str]) -> str:
    def one(m: re.Match) -> str:
        token = m.group(0)
        if token in ("{{", "}}"):
            return token[0]
        if m.group(1) is None:
            raise RefError(f"--env {show(template)}: unmatched {token!r} (write {token * 2} for a literal one)")
        key = m.group(1)
        if key in fields:
            return fields[key]
        if key in env:
            return env[key]
        if _ENV_LIKE.fullmatch(key):
            return ""                         # an unset environment variable
        raise RefError(f"--env {show(template)}: unknown placeholder {{{key}}} "
                       f"(fields: {', '.join(TEMPLATE_FIELDS)}; or an environment variable)")
    return _PLACEHOLDER.sub(one, value)


def template_key(template: str) -> str:
    """The variable a ``KEY=VALUE`` template sets."""
    return template.partition("=")[0]


def with_defaults(defaults: Sequence[str], given: Sequence[str]) -> tuple[str, ...]:
    """The templates a ref gets: ``given`` adds to ``defaults``; a default whose variable
    ``given`` sets too is dropped (an explicit ``PYTHONPATH=`` replaces the default one)."""
    keys = {template_key(t) for t in given}
    return (*(t for t in defaults if template_key(t) not in keys), *given)


def expand_env(templates: Iterable[str], *, worktree: str | os.PathLike[str], sha: str, name: str,
               base_env: Mapping[str, str]) -> dict[str, str]:
    """The variables ``KEY=VALUE`` templates set for one ref (only those; merge over ``base_env``).

    Placeholders: ``{worktree}``, ``{sha}``, ``{name}``, then any variable of ``base_env``
    (as updated by the templates before this one).  An UPPER_CASE name that is unset
    expands to ""; any other unknown name is an error.  ``{{``/``}}`` are literal braces.
    In variables whose name ends in PATH, empty elements (a leading, trailing or doubled
    separator, which Python would read as the current directory) are dropped.
    """
    fields = {"worktree": str(worktree), "sha": sha, "name": name}
    env = dict(base_env)
    out: dict[str, str] = {}
    for template in templates:
        key, sep, value = template.partition("=")
        if not sep:
            raise RefError(f"--env {show(template)}: expected KEY=VALUE")
        if not _ENV_KEY.fullmatch(key):
            raise RefError(f"--env {show(template)}: {show(key)} is not a variable name")
        expanded = _expand(template, value, fields, env)
        if _path_like(key):
            expanded = os.pathsep.join(p for p in expanded.split(os.pathsep) if p)
        env[key] = out[key] = expanded
    return out
