"""Case files (docs/cases.md): YAML matrices in, validated and expanded ``Case`` objects out.

Three layers, bottom up:

1. **Located YAML.**  The file is composed (never constructed into arbitrary
   objects, never evaluated) with a safe loader; every mapping, list and scalar
   becomes a ``_Node`` that knows its place: file, 1-based line and column, and
   the field path (``matrix.slot_mode[2]``, ``include[0].tolerance.atol``).
2. **Values.**  One parser per case key turns a node into a ``_Value``: the
   parsed object (``SeqLens``, ``Geometry`` field, ...) plus a normalised plain
   form (``"uniform(1,3756)"``) used for ids, ``Case.params`` and ``exclude``
   matching.  Each parser checks only its own value; an error points at it.
3. **Cases.**  The matrix is expanded (cartesian product in file order, then
   excludes, then includes), ids are built, and every case is checked as a
   whole (heads vs KV heads, cache capacity, slot collisions, ...).  A
   cross-field error blames the most specific value that was given and names
   the case.

Every error is a ``MatrixError``: one line, ``<path>:<line>:<col>: <field>: <what>``.
``select`` implements ``-k`` expressions over case ids with a small parser.
"""
from __future__ import annotations

import copy
import difflib
import itertools
import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import yaml

from harness.case import (
    default_tolerance,
    GEOMETRY_FIELDS,
    PRESETS,
    Case,
    Geometry,
    SeqLens,
    SlotMode,
    Tolerance,
)
from harness.errors import UsageError
from harness.ops import OPS
from harness.registry import BUILTINS, is_import_path

__all__ = [
    "CASE_KEYS",
    "ExpressionError",
    "MatrixError",
    "Where",
    "load_matrix",
    "load_paths",
    "parse_seq_lens",
    "parse_slot_mode",
    "select",
]


# ---------------------------------------------------------------------------
# Places and errors
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Where:
    """Where a value came from: file (or any label such as ``--seq-lens``), 1-based line/column, field path."""

    path: str
    line: int | None = None
    column: int | None = None
    field: str = ""

    def key(self, name: str) -> "Where":
        return replace(self, field=f"{self.field}.{name}" if self.field else name)

    def index(self, i: int) -> "Where":
        return replace(self, field=f"{self.field}[{i}]")

    def at(self, node: yaml.Node) -> "Where":
        mark = node.start_mark
        return replace(self, line=mark.line + 1, column=mark.column + 1)

    def error(self, message: str) -> "MatrixError":
        return MatrixError(self.path, self.line, self.column, self.field, message)

    def __str__(self) -> str:
        return _location(self.path, self.line, self.column)


def _location(path: str, line: int | None, column: int | None) -> str:
    loc = path
    if line is not None:
        loc += f":{line}"
        if column is not None:
            loc += f":{column}"
    return loc


class MatrixError(UsageError):
    """A bad case file, rendered as one line: ``<path>:<line>:<col>: <field>: <message>``."""

    def __init__(self, path: str, line: int | None, column: int | None, field: str, message: str):
        self.path = path
        self.line = line
        self.column = column
        self.field = field
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [_location(self.path, self.line, self.column)]
        if self.field:
            parts.append(self.field)
        parts.append(self.message)
        return ": ".join(parts)

    def __reduce__(self):
        return (type(self), (self.path, self.line, self.column, self.field, self.message))


class ExpressionError(MatrixError):
    """A bad ``-k`` expression: ``-k 'a and': at column 6: expected ...``."""

    def __init__(self, expression: str, column: int, message: str):
        self.expression = expression
        super().__init__("-k", None, column, "", message)

    def __str__(self) -> str:
        return f"-k {self.expression!r}: at column {self.column}: {self.message}"

    def __reduce__(self):
        return (type(self), (self.expression, self.column, self.message))


def _as_where(where: "Where | str") -> Where:
    return where if isinstance(where, Where) else Where(str(where))


# ---------------------------------------------------------------------------
# Located YAML
# ---------------------------------------------------------------------------

class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-6`` / ``1.0e6`` as floats (YAML 1.2), as users expect."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


@dataclass
class _Node:
    kind: str                        # scalar | list | map
    value: Any                       # python scalar | list[_Node] | dict[str, _Node]
    where: Where
    keys: dict[str, Where] = field(default_factory=dict)   # map only: where each key is written
    text: str | None = None          # scalar only: the text as written

    def describe(self) -> str:
        if self.kind == "list":
            return "a list"
        if self.kind == "map":
            return "a mapping"
        return _describe_scalar(self.value, self.text)


def _describe_scalar(value: Any, text: str | None = None) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{'true' if value else 'false'} (a boolean)"
    if isinstance(value, str):
        return f"{value!r} (a string)"
    if isinstance(value, (int, float)):
        return text if text is not None else repr(value)
    shown = repr(text) if text is not None else repr(value)
    return f"{shown} (a {type(value).__name__})"


def _compose(text: str, path: str) -> tuple[yaml.Node | None, _Loader]:
    """The single document's node tree (marks kept) and the loader that constructs its scalars."""
    loader = _Loader(text)
    try:
        return loader.get_single_node(), loader
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(exc, path, text) from None
    except yaml.YAMLError as exc:
        raise MatrixError(path, None, None, "", f"invalid YAML: {_one_line(str(exc))}") from None
    finally:
        loader.dispose()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _yaml_error(exc: yaml.MarkedYAMLError, path: str, text: str = "") -> MatrixError:
    """One line at the error mark.  A problem at end of input (an unclosed bracket or quote)
    is reported where the unclosed construct starts: that is the line to fix."""
    mark = exc.problem_mark or exc.context_mark
    what = _one_line(exc.problem or "malformed").replace("'<stream end>'", "end of file")
    at_end = exc.problem_mark is not None and exc.problem_mark.index >= len(text.rstrip())
    if exc.context:
        ctx = _one_line(exc.context)
        if at_end and exc.context_mark is not None:
            mark = exc.context_mark
            ctx += " that starts here"
        elif exc.context_mark is not None and exc.context_mark.line != mark.line:
            ctx += f" at line {exc.context_mark.line + 1}"
        what += f" ({ctx})"
    line = mark.line + 1 if mark is not None else None
    column = mark.column + 1 if mark is not None else None
    return MatrixError(path, line, column, "", f"invalid YAML: {what}")


_PLAIN_COLLECTION_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


def _tree(loader: _Loader, node: yaml.Node, where: Where, active: frozenset = frozenset()) -> _Node:
    where = where.at(node)
    if id(node) in active:
        raise where.error("recursive YAML alias")
    active = active | {id(node)}
    if isinstance(node, yaml.CollectionNode) and node.tag not in _PLAIN_COLLECTION_TAGS:
        raise where.error(f"unsupported YAML tag '{node.tag}' (case files hold plain mappings, lists and scalars)")
    if isinstance(node, yaml.MappingNode):
        explicit = sum(1 for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge")
        loader.flatten_mapping(node)            # YAML merge keys (<<): merged pairs come first
        first_explicit = len(node.value) - explicit
        children: dict[str, _Node] = {}
        keys: dict[str, Where] = {}
        merged: set[str] = set()
        for i, (knode, vnode) in enumerate(node.value):
            key = loader.construct_object(knode, deep=True) if isinstance(knode, yaml.ScalarNode) else None
            if not isinstance(key, str):
                shown = _describe_scalar(key) if isinstance(knode, yaml.ScalarNode) else "a collection"
                raise where.at(knode).error(f"keys must be plain strings, got {shown}")
            kw = where.key(key).at(knode)
            if key in children and key not in merged:
                raise kw.error(f"duplicate key '{key}' (first at line {keys[key].line})")
            if i < first_explicit:
                merged.add(key)               # a merged value: explicit keys override it
            else:
                merged.discard(key)
            keys[key] = kw
            children[key] = _tree(loader, vnode, where.key(key), active)
        return _Node("map", children, where, keys)
    if isinstance(node, yaml.SequenceNode):
        items = [_tree(loader, item, where.index(i), active) for i, item in enumerate(node.value)]
        return _Node("list", items, where)
    return _Node("scalar", loader.construct_object(node, deep=True), where, text=node.value)


def _wrap(value: Any, where: Where) -> _Node:
    """A plain Python value as a ``_Node`` (for the public parse functions)."""
    if isinstance(value, _Node):
        return value
    if isinstance(value, Mapping):
        children = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise where.error(f"keys must be plain strings, got {_describe_scalar(k)}")
            children[k] = _wrap(v, where.key(k))
        return _Node("map", children, where, {k: where.key(k) for k in children})
    if isinstance(value, (list, tuple)):
        return _Node("list", [_wrap(v, where.index(i)) for i, v in enumerate(value)], where)
    return _Node("scalar", value, where)


# ---------------------------------------------------------------------------
# Scalar checks
# ---------------------------------------------------------------------------

def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _int(n: _Node, minimum: int | None = None) -> int:
    if n.kind != "scalar" or not _is_int(n.value):
        raise n.where.error(f"expected an integer, got {n.describe()}")
    if minimum is not None and n.value < minimum:
        raise n.where.error(f"must be >= {minimum}, got {n.value}")
    return n.value


def _float(n: _Node, minimum: float | None = None, maximum: float | None = None,
           positive: bool = False) -> float:
    if n.kind != "scalar" or not _is_number(n.value):
        raise n.where.error(f"expected a number, got {n.describe()}")
    v = float(n.value)
    if not math.isfinite(v):
        raise n.where.error(f"must be finite, got {n.describe()}")
    if positive and v <= 0:
        raise n.where.error(f"must be > 0, got {n.describe()}")
    if minimum is not None and v < minimum:
        raise n.where.error(f"must be >= {minimum:g}, got {n.describe()}")
    if maximum is not None and v > maximum:
        raise n.where.error(f"must be <= {maximum:g}, got {n.describe()}")
    return v


def _str(n: _Node) -> str:
    if n.kind != "scalar" or not isinstance(n.value, str):
        raise n.where.error(f"expected a string, got {n.describe()}")
    return n.value


def _choice(n: _Node, choices: Iterable[str], what: str) -> str:
    choices = tuple(choices)
    v = _str(n)
    if v not in choices:
        raise n.where.error(f"unknown {what} '{v}'{_did_you_mean(v, choices)} (expected one of: {', '.join(choices)})")
    return v


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def _check_keys(n: _Node, valid: tuple[str, ...], what: str = "key") -> None:
    for key, kw in n.keys.items():
        if key not in valid:
            raise kw.error(f"unknown {what} '{key}'{_did_you_mean(key, valid)} (valid: {', '.join(valid)})")


# ---------------------------------------------------------------------------
# Input modes: seq_lens and slot_mode
# ---------------------------------------------------------------------------

_INT = r"\s*([+-]?\d+)\s*"
_FLOAT = r"\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*"
_CONST_RE = re.compile(rf"const\({_INT}\)")
_UNIFORM_RE = re.compile(rf"uniform\({_INT},{_INT}\)")
_LIST_RE = re.compile(r"\[\s*([+-]?\d+(?:\s*,\s*[+-]?\d+)*)\s*,?\s*\]")
_PADDED_RE = re.compile(rf"padded\({_FLOAT}\)")

_SEQ_LENS_FORMS = "const(n), uniform(lo, hi), a list of ints, multi_block"
_SLOT_MODE_FORMS = "arange, random, const(v), padded(f)"


def parse_seq_lens(value: Any, where: "Where | str") -> SeqLens:
    """``"const(n)"``, ``"uniform(lo, hi)"`` (inclusive), a list of ints (one per batch row), ``"multi_block"``."""
    return _seq_lens(_wrap(value, _as_where(where)))


def _seq_lens(n: _Node) -> SeqLens:
    w = n.where
    if n.kind == "list":
        if not n.value:
            raise w.error("an explicit seq_lens list must not be empty")
        lengths = tuple(_positive_len(item) for item in n.value)
        return SeqLens("list", lengths)
    if n.kind != "scalar" or not isinstance(n.value, str):
        raise w.error(f"expected seq_lens as {_SEQ_LENS_FORMS}; got {n.describe()}")
    text = n.value.strip()
    if text == "multi_block":
        return SeqLens("multi_block")
    if m := _CONST_RE.fullmatch(text):
        return SeqLens("const", (_len_value(int(m[1]), w),))
    if m := _UNIFORM_RE.fullmatch(text):
        lo, hi = _len_value(int(m[1]), w), _len_value(int(m[2]), w)
        if lo > hi:
            raise w.error(f"uniform(lo, hi) needs lo <= hi, got uniform({lo}, {hi})")
        return SeqLens("uniform", (lo, hi))
    if m := _LIST_RE.fullmatch(text):
        return SeqLens("list", tuple(_len_value(int(v), w) for v in m[1].split(",")))
    raise w.error(f"unknown seq_lens '{n.value}' (expected {_SEQ_LENS_FORMS})")


def _positive_len(n: _Node) -> int:
    if n.kind != "scalar" or not _is_int(n.value):
        raise n.where.error(f"expected a sequence length (an integer), got {n.describe()}")
    return _len_value(n.value, n.where)


def _len_value(v: int, where: Where) -> int:
    if v < 1:
        raise where.error(f"sequence lengths must be >= 1, got {v}")
    return v


def parse_slot_mode(value: Any, where: "Where | str") -> SlotMode:
    """``"arange"``, ``"random"``, ``"const(v)"`` (any int; ``< 0`` = do not write), ``"padded(f)"`` with 0 <= f <= 1."""
    return _slot_mode(_wrap(value, _as_where(where)))


def _slot_mode(n: _Node) -> SlotMode:
    w = n.where
    if n.kind != "scalar" or not isinstance(n.value, str):
        raise w.error(f"expected a slot mode ({_SLOT_MODE_FORMS}), got {n.describe()}")
    text = n.value.strip()
    if text in ("arange", "random"):
        return SlotMode(text)
    if m := _CONST_RE.fullmatch(text):
        return SlotMode("const", int(m[1]))
    if m := _PADDED_RE.fullmatch(text):
        f = float(m[1])
        if not 0.0 <= f <= 1.0:
            raise w.error(f"padded(f) needs 0 <= f <= 1, got {m[1]}")
        return SlotMode("padded", f)
    raise w.error(f"unknown slot mode '{n.value}' (expected {_SLOT_MODE_FORMS})")


# ---------------------------------------------------------------------------
# Values: one parser per case key
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Value:
    key: str
    parsed: Any          # what the Case field gets (before cross-field resolution)
    plain: Any           # normalised JSON-plain form: params, ids, exclude matching
    where: Where


TOLERANCE_FIELDS = ("atol", "rtol", "max_error_ratio", "argmax_margin")


@dataclass(frozen=True)
class _ToleranceSpec:
    flat: dict[str, float] | None                 # one set of fields for every output and cache
    per: dict[str, dict[str, float]] | None       # output/cache name -> fields
    where: Where
    name_where: dict[str, Where]                  # per: where each name is; flat: where each field is


def _tolerance_fields(n: _Node) -> tuple[dict[str, float], dict[str, Any]]:
    if n.kind != "map":
        raise n.where.error(f"expected a mapping of {', '.join(TOLERANCE_FIELDS)}, got {n.describe()}")
    _check_keys(n, TOLERANCE_FIELDS, "tolerance field")
    fields: dict[str, float] = {}
    plain: dict[str, Any] = {}
    for key, child in n.value.items():
        if key == "max_error_ratio":
            fields[key] = _float(child, minimum=0.0, maximum=1.0)
        else:
            fields[key] = _float(child, minimum=0.0)
        plain[key] = child.value
    return fields, plain


def _tolerance(n: _Node) -> tuple[_ToleranceSpec, Any]:
    if n.kind != "map":
        raise n.where.error(
            f"expected {{atol, rtol, max_error_ratio}} or a mapping of output name to those, got {n.describe()}")
    as_fields = [k for k, child in n.value.items() if child.kind != "map"]
    as_names = [k for k, child in n.value.items() if child.kind == "map"]
    if as_names and as_fields:
        k = as_fields[0] if as_fields[0] not in TOLERANCE_FIELDS else as_names[0]
        raise n.keys[k].error(
            "mixes tolerance fields and per-output mappings; give either "
            "{atol, rtol, max_error_ratio} or {output: {atol, ...}, ...}")
    if not as_names:
        fields, plain = _tolerance_fields(n)
        return _ToleranceSpec(fields, None, n.where, dict(n.keys)), plain
    per: dict[str, dict[str, float]] = {}
    plain_per: dict[str, Any] = {}
    for name, child in n.value.items():
        fields, plain = _tolerance_fields(child)
        if "argmax_margin" in fields and name != "logits":
            raise child.keys["argmax_margin"].error("argmax_margin applies to logits only")
        per[name], plain_per[name] = fields, plain
    return _ToleranceSpec(None, per, n.where, dict(n.keys)), plain_per


_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env(n: _Node) -> dict[str, str]:
    if n.kind != "map":
        raise n.where.error(f"expected a mapping of variable name to value, got {n.describe()}")
    env: dict[str, str] = {}
    for name, child in n.value.items():
        if not _ENV_NAME_RE.fullmatch(name):
            raise n.keys[name].error(f"'{name}' is not a valid environment variable name")
        v = child.value
        if child.kind != "scalar" or not (isinstance(v, str) or _is_number(v)):
            hint = "; quote it" if child.kind == "scalar" and child.text is not None else ""
            raise child.where.error(f"environment values must be strings or numbers, got {child.describe()}{hint}")
        env[name] = v if isinstance(v, str) else (child.text if child.text is not None else str(v))
    return env


_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


def _name(n: _Node) -> str:
    v = _str(n)
    if not _NAME_RE.fullmatch(v):
        raise n.where.error(f"name '{v}' is not usable in a test id (use letters, digits and _ . + -)")
    return v


def _kernel(n: _Node) -> str:
    v = _str(n)
    if v in BUILTINS or is_import_path(v):
        return v
    raise n.where.error(
        f"unknown kernel '{v}'{_did_you_mean(v, BUILTINS)} "
        f"(expected a builtin: {', '.join(BUILTINS)}; or package.module:callable)")


def _head_dim(n: _Node) -> int:
    v = _int(n, minimum=1)
    if v % 2:
        raise n.where.error(f"head_dim must be even (RoPE rotate-half splits it in two), got {v}")
    return v


def _simple(parse: Callable[[_Node], Any]) -> Callable[[_Node], tuple[Any, Any]]:
    """A parser whose plain form is the scalar as written (numbers stay numbers)."""
    def run(n: _Node) -> tuple[Any, Any]:
        return parse(n), n.value
    return run


def _rendered(parse: Callable[[_Node], Any]) -> Callable[[_Node], tuple[Any, Any]]:
    """A parser whose plain form is the parsed value's normalised string (``uniform(1,3756)``)."""
    def run(n: _Node) -> tuple[Any, Any]:
        parsed = parse(n)
        return parsed, str(parsed)
    return run


def _env_value(n: _Node) -> tuple[dict[str, str], dict[str, str]]:
    env = _env(n)
    return env, dict(env)


TIERS = ("ci", "device")
_GEOMETRY_FLOATS = ("rope_theta", "eps")

# key -> node -> (parsed, plain)
_PARSERS: dict[str, Callable[[_Node], tuple[Any, Any]]] = {
    "op": _simple(lambda n: _choice(n, OPS, "op")),
    "kernel": _simple(_kernel),
    "geometry": _simple(lambda n: _choice(n, PRESETS, "geometry preset")),
    **{f: _simple(lambda n: _int(n, minimum=1)) for f in GEOMETRY_FIELDS if f not in _GEOMETRY_FLOATS},
    "head_dim": _simple(_head_dim),
    **{f: _simple(lambda n: _float(n, positive=True)) for f in _GEOMETRY_FLOATS},
    "seq_lens": _rendered(_seq_lens),
    "slot_mode": _rendered(_slot_mode),
    "chunk_size": _simple(lambda n: _int(n, minimum=1)),
    "block_value": _simple(lambda n: _int(n, minimum=0)),
    "scratch_pages": _simple(lambda n: _int(n, minimum=1)),
    "seed": _simple(lambda n: _int(n, minimum=0)),
    "tolerance": _tolerance,
    "timeout_s": _simple(lambda n: _float(n, positive=True)),
    "env": _env_value,
    "tier": _simple(lambda n: _choice(n, TIERS, "tier")),
}

CASE_KEYS: tuple[str, ...] = (
    "op", "kernel", "geometry", *GEOMETRY_FIELDS,
    "seq_lens", "slot_mode", "chunk_size", "block_value", "scratch_pages", "seed",
    "tolerance", "timeout_s", "env", "tier",
)
TOP_KEYS: tuple[str, ...] = ("name", *CASE_KEYS, "matrix", "exclude", "include")
INCLUDE_KEYS: tuple[str, ...] = ("name", *CASE_KEYS)

# The plain form of each key's default (geometry fields come from the preset).
_DEFAULT_PLAIN: dict[str, Any] = {
    "op": None, "kernel": "reference", "geometry": "tiny", "seq_lens": "const(1)", "slot_mode": "arange",
    "chunk_size": None, "block_value": None, "scratch_pages": None, "seed": 0, "tolerance": None,
    "timeout_s": 60.0, "env": {}, "tier": "ci",
}


def _value(key: str, n: _Node) -> _Value:
    parsed, plain = _PARSERS[key](n)
    return _Value(key, parsed, plain, n.where)


# ---------------------------------------------------------------------------
# The file: top level, matrix, exclude, include
# ---------------------------------------------------------------------------

@dataclass
class _Spec:
    path: str
    name: str
    root: Where
    base: dict[str, _Value]                     # top-level case values, file order
    axes: list[tuple[str, list[_Value]]] | None   # None: no `matrix` key
    matrix_where: Where | None
    excludes: list[tuple[Where, dict[str, _Value]]]
    includes: list[tuple[Where, str | None, dict[str, _Value]]]


@dataclass
class _Draft:
    values: dict[str, _Value]
    origin: Where                   # the `matrix` key, the include entry, or the top-level mapping
    case_id: str = ""


def _stem_name(path: str) -> str:
    stem = Path(path).stem
    return re.sub(r"[^A-Za-z0-9_.+-]", "-", stem) or "cases"


def _read_spec(root: _Node, path: str) -> _Spec:
    if root.kind != "map":
        raise root.where.error(f"a case file must be a mapping of keys (op, matrix, ...), got {root.describe()}")
    _check_keys(root, TOP_KEYS)
    name = _name(root.value["name"]) if "name" in root.value else _stem_name(path)
    base = {k: _value(k, child) for k, child in root.value.items() if k in CASE_KEYS}

    axes = None
    matrix_where = None
    if "matrix" in root.value:
        m = root.value["matrix"]
        matrix_where = root.keys["matrix"]
        if m.kind != "map":
            raise m.where.error(f"expected a mapping of axis name to a list of values, got {m.describe()}")
        if not m.value:
            raise m.where.error("empty matrix: give at least one axis, or drop the key")
        _check_keys(m, CASE_KEYS)
        axes = []
        for key, child in m.value.items():
            if key in base:
                raise m.keys[key].error(
                    f"'{key}' is set both at top level (line {base[key].where.line}) and as a matrix axis")
            if child.kind != "list":
                raise child.where.error(f"expected a non-empty list of values, got {child.describe()}")
            if not child.value:
                raise child.where.error("empty axis: an axis needs at least one value")
            values = [_value(key, item) for item in child.value]
            seen: dict[str, _Value] = {}
            for v in values:
                ident = _id_value(v.plain)
                if ident in seen:
                    raise v.where.error(
                        f"duplicate value {ident} (same as {seen[ident].where.field} at line {seen[ident].where.line})")
                seen[ident] = v
            axes.append((key, values))

    excludes = []
    if "exclude" in root.value:
        ex = root.value["exclude"]
        if ex.kind != "list":
            raise ex.where.error(f"expected a list of partial mappings, got {ex.describe()}")
        if axes is None:
            raise root.keys["exclude"].error("exclude needs a matrix to exclude from")
        for entry in ex.value:
            if entry.kind != "map":
                raise entry.where.error(f"expected a mapping of key to value, got {entry.describe()}")
            if not entry.value:
                raise entry.where.error("an empty exclude entry would drop every case")
            _check_keys(entry, CASE_KEYS)
            excludes.append((entry.where, {k: _value(k, c) for k, c in entry.value.items()}))

    includes = []
    if "include" in root.value:
        inc = root.value["include"]
        if inc.kind != "list":
            raise inc.where.error(f"expected a list of mappings, got {inc.describe()}")
        for entry in inc.value:
            if entry.kind != "map":
                raise entry.where.error(f"expected a mapping of key to value, got {entry.describe()}")
            _check_keys(entry, INCLUDE_KEYS)
            inc_name = _name(entry.value["name"]) if "name" in entry.value else None
            includes.append((entry.where, inc_name,
                             {k: _value(k, c) for k, c in entry.value.items() if k != "name"}))

    return _Spec(path, name, root.where, base, axes, matrix_where, excludes, includes)


def _effective(values: dict[str, _Value], key: str) -> Any:
    """The plain value a case has for ``key``: given, or the default (geometry fields: the preset's)."""
    if key in values:
        return values[key].plain
    if key in GEOMETRY_FIELDS:
        preset = values["geometry"].parsed if "geometry" in values else "tiny"
        return getattr(PRESETS[preset], key)
    return _DEFAULT_PLAIN[key]


def _expand(spec: _Spec) -> list[_Draft]:
    drafts: list[_Draft] = []
    if spec.axes is not None:
        keys = [k for k, _ in spec.axes]
        varying = [k for k, vals in spec.axes if len(vals) > 1]
        hits = [0] * len(spec.excludes)
        for combo in itertools.product(*(vals for _, vals in spec.axes)):
            values = {**spec.base, **dict(zip(keys, combo))}
            dropped = False
            for i, (_, entry) in enumerate(spec.excludes):
                if all(_effective(values, k) == v.plain for k, v in entry.items()):
                    hits[i] += 1
                    dropped = True
            if dropped:
                continue
            parts = [f"{k}={_id_value(values[k].plain)}" for k in varying]
            drafts.append(_Draft(values, spec.matrix_where, _case_id(spec.name, parts)))
        for (where, _), n in zip(spec.excludes, hits):
            if n == 0:
                raise where.error("exclude entry matches no case of the matrix")
        if not drafts:
            raise spec.matrix_where.error("empty matrix: every case is excluded")
    elif not spec.includes:
        drafts.append(_Draft(dict(spec.base), spec.root, spec.name))

    for where, inc_name, entry in spec.includes:
        values = {**spec.base, **entry}
        if inc_name is not None:
            case_id = f"{spec.name}[{inc_name}]"
        else:
            parts = [f"{k}={_id_value(v.plain)}" for k, v in entry.items()
                     if v.plain != _effective(spec.base, k)]
            case_id = _case_id(spec.name, parts)
        drafts.append(_Draft(values, where, case_id))

    first: dict[str, _Draft] = {}
    for d in drafts:
        if d.case_id in first:
            raise d.origin.error(f"duplicate case id '{d.case_id}' (also defined at line {first[d.case_id].origin.line})")
        first[d.case_id] = d
    return drafts


# ---------------------------------------------------------------------------
# Ids
# ---------------------------------------------------------------------------

def _id_value(plain: Any) -> str:
    if isinstance(plain, bool):
        return "true" if plain else "false"
    if isinstance(plain, float):
        return repr(plain)
    if isinstance(plain, Mapping):
        return "{" + ",".join(f"{k}:{_id_value(v)}" for k, v in plain.items()) + "}"
    if isinstance(plain, (list, tuple)):
        return "[" + ",".join(_id_value(v) for v in plain) + "]"
    return str(plain)


def _case_id(name: str, parts: list[str]) -> str:
    case_id = f"{name}[{','.join(parts)}]" if parts else name
    case_id = re.sub(r"\s+", "", case_id)
    return case_id.replace("/", "%2F").replace("::", ":%3A")


# ---------------------------------------------------------------------------
# Cases: resolve and check each expanded case as a whole
# ---------------------------------------------------------------------------

def _blame(draft: _Draft, *keys: str) -> Where:
    for key in keys:
        if key in draft.values:
            return draft.values[key].where
    return draft.origin


def _build_case(spec: _Spec, draft: _Draft) -> Case:
    values = draft.values
    in_case = f" (case {draft.case_id})"

    def get(key: str, default: Any = None) -> Any:
        return values[key].parsed if key in values else default

    def fail(message: str, *keys: str) -> MatrixError:
        return _blame(draft, *keys).error(message + in_case)

    op = get("op")
    if op is None:
        raise draft.origin.error(
            f"no op given: set `op` at top level, as a matrix axis or in the include (ops: {', '.join(OPS)})"
            + in_case)
    kernel = get("kernel", "reference")
    if kernel in BUILTINS and op not in BUILTINS[kernel]:
        raise fail(f"kernel '{kernel}' does not implement op '{op}' "
                   f"(it implements: {', '.join(BUILTINS[kernel])})", "kernel", "op")

    geometry: Geometry = replace(PRESETS[get("geometry", "tiny")],
                                 **{f: values[f].parsed for f in GEOMETRY_FIELDS if f in values})
    g = geometry
    if g.num_heads % g.num_kv_heads:
        raise fail(f"num_heads {g.num_heads} is not a multiple of num_kv_heads {g.num_kv_heads}",
                   "num_kv_heads", "num_heads", "geometry")

    seq_lens: SeqLens = get("seq_lens", SeqLens("const", (1,)))
    if seq_lens.kind == "list" and len(seq_lens.values) != g.batch:
        raise fail(f"explicit seq_lens has {len(seq_lens.values)} lengths but batch is {g.batch}",
                   "seq_lens", "batch")
    slot_mode: SlotMode = get("slot_mode", SlotMode("arange"))

    chunk_size = get("chunk_size")
    if chunk_size is not None and op != "prefill_attention":
        raise fail(f"chunk_size applies to op prefill_attention only, not {op}", "chunk_size")

    spec_ops = OPS[op]
    tolerance = _resolve_tolerance(get("tolerance"), spec_ops.outputs + spec_ops.caches, op, in_case)

    case = Case(
        case_id=draft.case_id,
        matrix=spec.name,
        source=f"{spec.path}:{draft.origin.line}",
        op=op,
        kernel=kernel,
        geometry=geometry,
        seq_lens=seq_lens,
        slot_mode=slot_mode,
        seed=get("seed", 0),
        tolerance=tolerance,
        chunk_size=chunk_size,
        block_value=get("block_value"),
        scratch_pages=get("scratch_pages"),
        timeout_s=float(get("timeout_s", 60.0)),
        env=dict(get("env", {})),
        tier=get("tier", "ci"),
        params={k: copy.deepcopy(v.plain) for k, v in values.items()},
    )

    pages = case.num_pages
    slots = pages * g.page_size
    writes = spec_ops.writes_cache
    # The most rows one launch writes: batch rows, or for prefill every token of the chunks.
    longest_chunk = min(chunk_size or seq_lens.max_len(g.page_size), seq_lens.max_len(g.page_size))
    rows_per_seq = longest_chunk if op == "prefill_attention" else 1
    if slot_mode.kind == "const" and slot_mode.value >= 0:
        if writes and g.batch * rows_per_seq > 1:
            raise fail(f"slot_mode {slot_mode} writes up to {g.batch * rows_per_seq} rows to the same slot "
                       f"(use const(v) with v < 0, or one written row)", "slot_mode")
        if slot_mode.value >= slots:
            raise fail(f"slot_mode {slot_mode} is beyond the cache ({pages} pages of {g.page_size} = {slots} slots)",
                       "slot_mode")
    if case.block_value is not None:
        if case.block_value >= pages:
            raise fail(f"block_value {case.block_value} is not a page of the cache (it has {pages} pages)",
                       "block_value", "scratch_pages", "num_pages")
        collide = g.batch > 1 or rows_per_seq > g.page_size
        if writes and collide and not (slot_mode.kind == "const" and slot_mode.value < 0):
            raise fail(f"block_value with batch {g.batch} needs slot_mode const(v) with v < 0, got {slot_mode} "
                       f"(every block maps to page {case.block_value}, so valid slots would collide)",
                       "slot_mode", "block_value")
    else:
        needed = g.batch * case.max_blocks
        if needed > pages:
            raise fail(f"seq_lens need up to {needed} pages but the cache has {pages}",
                       "scratch_pages", "num_pages", "seq_lens", "batch", "page_size")
    return case


def _resolve_tolerance(spec: _ToleranceSpec | None, args, op: str, in_case: str) -> dict[str, Tolerance]:
    if spec is None:
        return {}
    names = [a.name for a in args]

    def resolved(name: str, fields: dict[str, float]) -> Tolerance:
        return replace(default_tolerance(op, name), **fields)

    if spec.flat is not None:
        fields = dict(spec.flat)
        if "argmax_margin" in fields and "logits" not in names:
            raise spec.name_where["argmax_margin"].error(
                f"argmax_margin applies to logits only, and op {op} has no logits" + in_case)
        margin = fields.pop("argmax_margin", None)
        out = {}
        for name in names:
            extra = {"argmax_margin": margin} if name == "logits" and margin is not None else {}
            out[name] = resolved(name, {**fields, **extra})
        return out
    out = {}
    for name, fields in spec.per.items():
        if name not in names:
            raise spec.name_where[name].error(
                f"op {op} has no output or cache '{name}'{_did_you_mean(name, names)} "
                f"(valid: {', '.join(names)})" + in_case)
        out[name] = resolved(name, fields)
    return out


# ---------------------------------------------------------------------------
# Public entry points
# ---------------------------------------------------------------------------

def load_matrix(path: "str | os.PathLike[str]") -> list[Case]:
    """One YAML case file -> its expanded, validated cases, in file order."""
    shown = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise MatrixError(shown, None, None, "", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise MatrixError(shown, None, None, "", f"cannot read: {exc.strerror or exc}") from None
    node, loader = _compose(text, shown)
    if node is None:
        raise MatrixError(shown, None, None, "", "empty case file (expected a mapping with at least `op`)")
    try:
        root = _tree(loader, node, Where(shown))
    except yaml.MarkedYAMLError as exc:        # e.g. a bad merge key
        raise _yaml_error(exc, shown, text) from None
    spec = _read_spec(root, shown)
    cases = [_build_case(spec, draft) for draft in _expand(spec)]
    _refuse_identical_cases(cases)
    return cases


def _refuse_identical_cases(cases: list[Case]) -> None:
    """Two ids for one case (an include that repeats a matrix case) would run it twice."""
    first: dict[str, Case] = {}
    for case in cases:
        wire = case.to_wire()
        for key in ("case_id", "source", "params"):
            wire.pop(key)
        ident = repr(sorted(wire.items()))
        if ident in first:
            path, _, line = case.source.rpartition(":")
            raise MatrixError(path, int(line), None, "",
                              f"case '{case.case_id}' is the same case as '{first[ident].case_id}' "
                              f"({first[ident].source})")
        first[ident] = case


def _case_files(path: Path) -> list[Path]:
    if path.is_dir():
        found = []
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            found += [Path(dirpath) / f for f in filenames
                      if not f.startswith(".") and f.endswith((".yaml", ".yml"))]
        if not found:
            raise MatrixError(os.fspath(path), None, None, "", "no case files (*.yaml, *.yml) in this directory")
        return sorted(found)
    if path.is_file():
        return [path]
    raise MatrixError(os.fspath(path), None, None, "", "no such file or directory")


def load_paths(paths: "Iterable[str | os.PathLike[str]] | str | os.PathLike[str]") -> list[Case]:
    """Files and directories (``*.yaml``/``*.yml``, recursively, sorted) -> all their cases, in order.

    A file reached twice is loaded once; the same case id in two files is an error.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: list[Path] = []
    seen: set[Path] = set()
    for p in paths:
        for f in _case_files(Path(p)):
            key = f.resolve()
            if key not in seen:
                seen.add(key)
                files.append(f)
    cases: list[Case] = []
    first: dict[str, Case] = {}
    for f in files:
        for case in load_matrix(f):
            if case.case_id in first:
                path, _, line = case.source.rpartition(":")
                raise MatrixError(path, int(line), None, "",
                                  f"duplicate case id '{case.case_id}' (also defined at {first[case.case_id].source}; "
                                  f"set `name:` to tell the files apart)")
            first[case.case_id] = case
            cases.append(case)
    return cases


# ---------------------------------------------------------------------------
# -k selection
# ---------------------------------------------------------------------------
#
#   expr := and_expr ('or' and_expr)*
#   and_expr := not_expr ('and' not_expr)*
#   not_expr := 'not' not_expr | '(' expr ')' | WORD
#
# A WORD is a case-insensitive substring of the case id: a run of characters
# other than whitespace and parentheses, or a quoted string ('...' or "...").
# A parenthesised group glued to a word (no spaces), as in uniform(1,3756), is
# part of the word.

_KEYWORDS = ("and", "or", "not")
_MAX_DEPTH = 100


@dataclass(frozen=True)
class _Token:
    kind: str       # word | and | or | not | ( | ) | end
    text: str
    column: int     # 1-based


def _tokens(expr: str) -> list[_Token]:
    out: list[_Token] = []
    i, n = 0, len(expr)
    while i < n:
        c = expr[i]
        if c.isspace():
            i += 1
        elif c in "()":
            out.append(_Token(c, c, i + 1))
            i += 1
        elif c in "'\"":
            end = expr.find(c, i + 1)
            if end < 0:
                raise ExpressionError(expr, i + 1, "unterminated quoted string")
            if end == i + 1:
                raise ExpressionError(expr, i + 1, "empty quoted string")
            out.append(_Token("word", expr[i + 1:end], i + 1))
            i = end + 1
        else:
            start = i
            while i < n and not expr[i].isspace() and expr[i] not in "()":
                i += 1
                if i < n and expr[i] == "(" and expr[start:i] not in _KEYWORDS:
                    close = _glued_group_end(expr, i)
                    if close is not None:
                        i = close
            word = expr[start:i]
            out.append(_Token(word if word in _KEYWORDS else "word", word, start + 1))
    out.append(_Token("end", "", n + 1))
    return out


def _glued_group_end(expr: str, i: int) -> int | None:
    """Index after the ``)`` closing the group that opens at ``expr[i]``, if it holds no whitespace."""
    depth = 0
    for j in range(i, len(expr)):
        c = expr[j]
        if c.isspace():
            return None
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j + 1
    return None


class _Parser:
    def __init__(self, expr: str):
        self.expr = expr
        self.tokens = _tokens(expr)
        self.pos = 0

    def peek(self) -> _Token:
        return self.tokens[self.pos]

    def take(self) -> _Token:
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok

    def fail(self, tok: _Token, expected: str) -> ExpressionError:
        got = "end of input" if tok.kind == "end" else repr(tok.text)
        return ExpressionError(self.expr, tok.column, f"expected {expected}; got {got}")

    def parse(self) -> Callable[[str], bool]:
        fn = self.or_expr(0)
        if self.peek().kind != "end":
            raise self.fail(self.peek(), "'and', 'or' or end of input")
        return fn

    def or_expr(self, depth: int) -> Callable[[str], bool]:
        parts = [self.and_expr(depth)]
        while self.peek().kind == "or":
            self.take()
            parts.append(self.and_expr(depth))
        return parts[0] if len(parts) == 1 else (lambda s, ps=tuple(parts): any(p(s) for p in ps))

    def and_expr(self, depth: int) -> Callable[[str], bool]:
        parts = [self.not_expr(depth)]
        while self.peek().kind == "and":
            self.take()
            parts.append(self.not_expr(depth))
        return parts[0] if len(parts) == 1 else (lambda s, ps=tuple(parts): all(p(s) for p in ps))

    def not_expr(self, depth: int) -> Callable[[str], bool]:
        tok = self.peek()
        if depth > _MAX_DEPTH:
            raise ExpressionError(self.expr, tok.column, "expression nested too deeply")
        if tok.kind == "not":
            self.take()
            inner = self.not_expr(depth + 1)
            return lambda s: not inner(s)
        if tok.kind == "(":
            self.take()
            inner = self.or_expr(depth + 1)
            if self.peek().kind != ")":
                raise self.fail(self.peek(), "')'")
            self.take()
            return inner
        if tok.kind == "word":
            self.take()
            needle = tok.text.lower()
            return lambda s: needle in s
        raise self.fail(tok, "a substring, 'not' or '('")


def compile_expression(expr: str) -> Callable[[str], bool]:
    """A ``-k`` expression -> a predicate on case ids (case-insensitive). Raises ``ExpressionError``."""
    match = _Parser(expr).parse()
    return lambda case_id: match(case_id.lower())


def select(cases: Iterable[Case], expr: str | None) -> list[Case]:
    """The cases whose id matches a pytest-style ``-k`` expression; an empty expression keeps all."""
    cases = list(cases)
    if expr is None or not expr.strip():
        return cases
    match = compile_expression(expr)
    return [c for c in cases if match(c.case_id)]
