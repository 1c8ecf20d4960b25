"""Case files that declare ``command:`` instead of ``op:`` (docs/commands.md): read, checked, expanded.

``harness.casefiles.loader.load_matrix`` hands a file here when its top level has
``command``, ``cwd`` or ``pass``.  Every error is a ``CaseFileError`` naming the file,
line, column and field, raised before anything runs: a missing command, ``command``
beside ``op``, an unknown placeholder, a ``cwd`` without placeholders that does not
exist, a ``timeout_s`` that is not a whole number of seconds.
"""
from __future__ import annotations

import itertools
import math
import re
from pathlib import Path
from typing import Any

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.casefiles.commandspec import (RUNTIME, CommandSpec, PassRule, PlaceholderError, check_template,
                                           placeholders, substitute)
from harness.casefiles.ids import case_id_of, id_text, stem_name
from harness.casefiles.located import Node, Where
from harness.casefiles.values import MAX_SEED, MAX_TIMEOUT_S, CaseFileError, case_name, check_keys, parse_value

TOP_KEYS = ("name", "command", "cwd", "env", "timeout_s", "matrix", "pass", "tier", "seed")
PASS_KEYS = ("exit_code", "regex", "not_regex")
KERNEL_KEYS = ("op", "kernel")
DEFAULT_TIMEOUT_S = 600
COMMAND_OP = "command"           # Case.op of a command case: it names no op of harness/ops/__init__.py
_AXIS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_command_file(root: Node) -> bool:
    """A case file for this loader: its top level has a key only command cases take."""
    return root.kind == "map" and any(k in root.value for k in ("command", "cwd", "pass"))


def _fail(where: Where, message: str) -> CaseFileError:
    return CaseFileError.at(where, message)


def _template(n: Node, known: set[str]) -> str:
    if n.kind != "scalar" or not isinstance(n.value, (str, int, float)) or isinstance(n.value, bool):
        raise _fail(n.where, f"expected a string, got {n.describe()}")
    text = n.value if isinstance(n.value, str) else (n.text or str(n.value))
    try:
        check_template(text, known)
    except PlaceholderError as exc:
        raise _fail(n.where, f"{exc} (at character {exc.offset + 1} of {text!r})") from None
    return text


def _command(n: Node, known: set[str]) -> str | tuple[str, ...]:
    if n.kind == "list":
        if not n.value:
            raise _fail(n.where, "empty command list: give the program and its arguments")
        return tuple(_template(item, known) for item in n.value)
    text = _template(n, known)
    if not text.strip():
        raise _fail(n.where, "empty command")
    return text


def _timeout(n: Node) -> int:
    v = n.value
    if n.kind != "scalar" or isinstance(v, bool) or not isinstance(v, int):
        raise _fail(n.where, f"expected a whole number of seconds, got {n.describe()}")
    if not 0 < v <= MAX_TIMEOUT_S:
        raise _fail(n.where, f"must be between 1 and {MAX_TIMEOUT_S:g} seconds, got {v}")
    return v


def _pass_rule(n: Node) -> PassRule:
    if n.kind != "map":
        raise _fail(n.where, f"expected a mapping (exit_code, regex, not_regex), got {n.describe()}")
    check_keys(n, PASS_KEYS)
    fields: dict[str, Any] = {}
    if "exit_code" in n.value:
        c = n.value["exit_code"]
        if c.kind != "scalar" or isinstance(c.value, bool) or not isinstance(c.value, int) or not 0 <= c.value <= 255:
            raise _fail(c.where, f"expected an exit status 0..255, got {c.describe()}")
        fields["exit_code"] = c.value
    for key in ("regex", "not_regex"):
        if key in n.value:
            c = n.value[key]
            if c.kind != "scalar" or not isinstance(c.value, str) or not c.value:
                raise _fail(c.where, f"expected a regular expression, got {c.describe()}")
            try:
                re.compile(c.value, re.MULTILINE)
            except re.error as exc:
                raise _fail(c.where, f"not a regular expression: {exc}") from None
            fields[key] = c.value
    return PassRule(**fields)


def _matrix(n: Node) -> list[tuple[str, list[Node]]]:
    if n.kind != "map":
        raise _fail(n.where, f"expected a mapping of axis name to a list of values, got {n.describe()}")
    if not n.value:
        raise _fail(n.where, "empty matrix: give at least one axis, or drop the key")
    axes = []
    for key, child in n.value.items():
        if not _AXIS.fullmatch(key):
            raise _fail(n.keys[key], f"'{key}' cannot be a placeholder name (letters, digits and _)")
        if key in RUNTIME:
            raise _fail(n.keys[key], f"'{key}' is filled in by the harness; name the axis otherwise")
        if child.kind != "list" or not child.value:
            raise _fail(child.where, f"expected a non-empty list of values, got {child.describe()}")
        seen: dict[Any, Node] = {}
        for item in child.value:
            if item.kind != "scalar" or item.value is None:
                raise _fail(item.where, f"axis values must be strings or numbers, got {item.describe()}")
            if key == "seed":
                _seed(item)
            if item.value in seen and type(item.value) is type(seen[item.value].value):
                raise _fail(item.where, f"duplicate value {item.value!r} (line {seen[item.value].where.line})")
            seen[item.value] = item
        axes.append((key, list(child.value)))
    return axes


def _seed(n: Node) -> int:
    v = n.value
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_SEED:
        raise _fail(n.where, f"a seed is an integer 0..{MAX_SEED}, got {n.describe()}")
    return v


def load_command_matrix(root: Node, path: str, max_cases: int) -> list[Case]:
    """A command case file's node tree -> its cases, in matrix order."""
    top = root.value
    for key in KERNEL_KEYS:
        if key in top:
            raise _fail(root.keys[key], f"a case has either `command` or `{key}`, not both")
    check_keys(root, TOP_KEYS)
    if "command" not in top:
        raise _fail(root.where, "no command given: a case file with `cwd` or `pass` needs `command`")
    name = case_name(top["name"]) if "name" in top else stem_name(path)
    axes = _matrix(top["matrix"]) if "matrix" in top else []
    if "seed" in top and any(k == "seed" for k, _ in axes):
        raise _fail(top["matrix"].keys["seed"], "'seed' is set both at top level and as a matrix axis")
    known = {*RUNTIME, "seed", *(k for k, _ in axes)}

    command = _command(top["command"], known)
    base_dir = str(Path(path).resolve().parent)
    cwd = None
    if "cwd" in top:
        cwd = _template(top["cwd"], known)
        names = {name for name, _ in placeholders(cwd)}
        if names <= {"casedir"}:        # known now: the case file's directory is fixed
            resolved = Path(base_dir, substitute(cwd, {"casedir": base_dir}))
            if not resolved.is_dir():
                raise _fail(top["cwd"].where, f"no such directory: {resolved}")
    env: dict[str, str] = {}
    if "env" in top:
        env = parse_value("env", top["env"]).parsed
        for var, value in env.items():
            node = top["env"].value[var]
            try:
                check_template(value, known)
            except PlaceholderError as exc:
                raise _fail(node.where, f"{exc} (at character {exc.offset + 1} of {value!r})") from None
    timeout_s = _timeout(top["timeout_s"]) if "timeout_s" in top else DEFAULT_TIMEOUT_S
    pass_rule = _pass_rule(top["pass"]) if "pass" in top else PassRule()
    tier = parse_value("tier", top["tier"]).parsed if "tier" in top else "ci"
    seed = _seed(top["seed"]) if "seed" in top else 0
    wire = CommandSpec(command, cwd, base_dir, pass_rule).to_wire()

    count = math.prod(len(values) for _, values in axes)
    if count > max_cases:
        raise _fail(top["matrix"].where, f"expands to {count} cases, more than the cap of {max_cases} (--max-cases)")
    origin = root.keys.get("matrix", root.where)
    varying = [k for k, values in axes if len(values) > 1]
    cases = []
    for combo in itertools.product(*(values for _, values in axes)):
        chosen = {k: item.value for (k, _), item in zip(axes, combo)}
        parts = [f"{k}={id_text(chosen[k])}" for k in varying]
        cases.append(Case(
            case_id=case_id_of(name, parts), matrix=name, source=f"{path}:{origin.line}",
            op=COMMAND_OP, kernel="", geometry=PRESETS["tiny"], seq_lens=SeqLens("const", (1,)),
            slot_mode=SlotMode("arange"), seed=chosen.get("seed", seed), timeout_s=float(timeout_s),
            env=dict(env), tier=tier, params=chosen, command=wire))
    return cases


__all__ = ["COMMAND_OP", "DEFAULT_TIMEOUT_S", "is_command_file", "load_command_matrix"]
