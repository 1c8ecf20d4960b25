"""Case-file values: one parser per case key, from a located node to the parsed value.

A parser turns a node into a ``Value``: the parsed object (``SeqLens``,
``Geometry`` field, ...) plus a normalised plain form (``"uniform(1,3756)"``)
used for ids, ``Case.params`` and ``exclude`` matching.  Each parser checks only
its own value, and an error points at it; cross-field checks are the matrix's
(``harness.casefiles.matrix``).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from harness.case import ATTENTION_SPREADS, DEFAULT_ATTENTION, DEFAULT_DTYPE, DEFAULT_PRECISION, DTYPES, GEOMETRY_FIELDS, PRECISIONS, PRESETS, SeqLens, SlotMode
from harness.casefiles.located import LocatedError, Node, Where, did_you_mean, refuse_long_integer, wrap
from harness.ops import OPS
from harness.ops.registry import BUILTINS, is_import_path

__all__ = [
    "CASE_KEYS",
    "MAX_SEED",
    "MAX_SIZE",
    "MAX_TIMEOUT_S",
    "TIERS",
    "TOLERANCE_FIELDS",
    "CaseFileError",
    "ToleranceSpec",
    "Value",
    "case_name",
    "check_keys",
    "effective",
    "parse_seq_lens",
    "parse_slot_mode",
    "parse_value",
]


class CaseFileError(LocatedError):
    """A bad case file (or case value given on the command line), one line with its place."""


def _as_where(where: Where | str) -> Where:
    return where if isinstance(where, Where) else Where(str(where))


# ---------------------------------------------------------------------------
# Scalar checks
# ---------------------------------------------------------------------------

def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# Bounds that no real case comes near: sizes and indices are int32 in the kernel ABI, seeds
# are what torch.manual_seed takes, a timeout past a week is a typo (and 1e308 overflows
# the clock arithmetic).
MAX_SIZE = 2**31 - 1
MAX_SEED = 2**63 - 1
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_LAYERS = 4096           # no model comes near; layers cost time, not bytes, so the byte bound misses them


def _int(n: Node, minimum: int | None = None, maximum: int = MAX_SIZE) -> int:
    if n.kind != "scalar" or not _is_int(n.value):
        raise CaseFileError.at(n.where, f"expected an integer, got {n.describe()}")
    if minimum is not None and n.value < minimum:
        raise CaseFileError.at(n.where, f"must be >= {minimum}, got {n.value}")
    if n.value > maximum:
        raise CaseFileError.at(n.where, f"must be <= {maximum}, got {n.value}")
    return n.value


def _float(n: Node, minimum: float | None = None, maximum: float | None = None,
           positive: bool = False) -> float:
    if n.kind != "scalar" or not _is_number(n.value):
        raise CaseFileError.at(n.where, f"expected a number, got {n.describe()}")
    v = float(n.value)
    if not math.isfinite(v):
        raise CaseFileError.at(n.where, f"must be finite, got {n.describe()}")
    if positive and v <= 0:
        raise CaseFileError.at(n.where, f"must be > 0, got {n.describe()}")
    if minimum is not None and v < minimum:
        raise CaseFileError.at(n.where, f"must be >= {minimum:g}, got {n.describe()}")
    if maximum is not None and v > maximum:
        raise CaseFileError.at(n.where, f"must be <= {maximum:g}, got {n.describe()}")
    return v


def _str(n: Node) -> str:
    if n.kind != "scalar" or not isinstance(n.value, str):
        raise CaseFileError.at(n.where, f"expected a string, got {n.describe()}")
    return n.value


def _choice(n: Node, choices: Iterable[str], what: str) -> str:
    choices = tuple(choices)
    v = _str(n)
    if v not in choices:
        raise CaseFileError.at(
            n.where, f"unknown {what} '{v}'{did_you_mean(v, choices)} (expected one of: {', '.join(choices)})")
    return v


def check_keys(n: Node, valid: tuple[str, ...], what: str = "key") -> None:
    for key, kw in n.keys.items():
        if key not in valid:
            raise CaseFileError.at(
                kw, f"unknown {what} '{key}'{did_you_mean(key, valid)} (valid: {', '.join(valid)})")


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
    return _seq_lens(wrap(value, _as_where(where), CaseFileError))


def _seq_lens(n: Node) -> SeqLens:
    w = n.where
    if n.kind == "list":
        if not n.value:
            raise CaseFileError.at(w, "an explicit seq_lens list must not be empty")
        lengths = tuple(_positive_len(item) for item in n.value)
        return SeqLens("list", lengths)
    if n.kind != "scalar" or not isinstance(n.value, str):
        raise CaseFileError.at(w, f"expected seq_lens as {_SEQ_LENS_FORMS}; got {n.describe()}")
    text = n.value.strip()
    if text == "multi_block":
        return SeqLens("multi_block")
    if m := _CONST_RE.fullmatch(text):
        return SeqLens("const", (_len_value(_whole(m[1], w), w),))
    if m := _UNIFORM_RE.fullmatch(text):
        lo, hi = _len_value(_whole(m[1], w), w), _len_value(_whole(m[2], w), w)
        if lo > hi:
            raise CaseFileError.at(w, f"uniform(lo, hi) needs lo <= hi, got uniform({lo}, {hi})")
        return SeqLens("uniform", (lo, hi))
    if m := _LIST_RE.fullmatch(text):
        return SeqLens("list", tuple(_len_value(_whole(v, w), w) for v in m[1].split(",")))
    raise CaseFileError.at(w, f"unknown seq_lens '{n.value}' (expected {_SEQ_LENS_FORMS})")


def _positive_len(n: Node) -> int:
    if n.kind != "scalar" or not _is_int(n.value):
        raise CaseFileError.at(n.where, f"expected a sequence length (an integer), got {n.describe()}")
    return _len_value(n.value, n.where)


def _whole(text: str, where: Where) -> int:
    """An integer written inside a string (``const(5)``), its digits bounded before ``int`` reads it."""
    refuse_long_integer(text, where, CaseFileError)
    return int(text)


def _len_value(v: int, where: Where) -> int:
    if v < 1:
        raise CaseFileError.at(where, f"sequence lengths must be >= 1, got {v}")
    if v > MAX_SIZE:
        raise CaseFileError.at(where, f"sequence lengths must be <= {MAX_SIZE}, got {v}")
    return v


def parse_slot_mode(value: Any, where: "Where | str") -> SlotMode:
    """``"arange"``, ``"random"``, ``"const(v)"`` (any int; ``< 0``: do not write), ``"padded(f)"``, 0 <= f <= 1."""
    return _slot_mode(wrap(value, _as_where(where), CaseFileError))


def _slot_mode(n: Node) -> SlotMode:
    w = n.where
    if n.kind != "scalar" or not isinstance(n.value, str):
        raise CaseFileError.at(w, f"expected a slot mode ({_SLOT_MODE_FORMS}), got {n.describe()}")
    text = n.value.strip()
    if text in ("arange", "random"):
        return SlotMode(text)
    if m := _CONST_RE.fullmatch(text):
        if abs(_whole(m[1], w)) > MAX_SIZE:
            raise CaseFileError.at(w, f"const(v) needs |v| <= {MAX_SIZE} (slots are int32), got {m[1]}")
        return SlotMode("const", int(m[1]))
    if m := _PADDED_RE.fullmatch(text):
        f = float(m[1])
        if not 0.0 <= f <= 1.0:
            raise CaseFileError.at(w, f"padded(f) needs 0 <= f <= 1, got {m[1]}")
        return SlotMode("padded", f)
    raise CaseFileError.at(w, f"unknown slot mode '{n.value}' (expected {_SLOT_MODE_FORMS})")


# ---------------------------------------------------------------------------
# Values: one parser per case key
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Value:
    key: str
    parsed: Any          # what the Case field gets (before cross-field resolution)
    plain: Any           # normalised JSON-plain form: params, ids, exclude matching
    where: Where


TOLERANCE_FIELDS = ("atol", "rtol", "max_error_ratio", "argmax_margin", "atol_rms")


@dataclass(frozen=True)
class ToleranceSpec:
    flat: dict[str, float | None] | None                 # one set of fields for every output and cache
    per: dict[str, dict[str, float]] | None       # output/cache name -> fields
    where: Where
    name_where: dict[str, Where]                  # per: where each name is; flat: where each field is


def _tolerance_fields(n: Node) -> tuple[dict[str, float], dict[str, Any]]:
    if n.kind != "map":
        raise CaseFileError.at(n.where, f"expected a mapping of {', '.join(TOLERANCE_FIELDS)}, got {n.describe()}")
    check_keys(n, TOLERANCE_FIELDS, "tolerance field")
    fields: dict[str, float] = {}
    plain: dict[str, Any] = {}
    for key, child in n.value.items():
        if key == "max_error_ratio":
            fields[key] = _float(child, minimum=0.0, maximum=1.0)
        elif key == "atol_rms":          # null: atol as given, not scaled to the signal
            fields[key] = None if child.kind == "scalar" and child.value is None else _float(child, positive=True)
        else:
            fields[key] = _float(child, minimum=0.0)
        plain[key] = child.value
    return fields, plain


def _tolerance(n: Node) -> tuple[ToleranceSpec, Any]:
    if n.kind != "map":
        raise CaseFileError.at(
            n.where,
            f"expected {{atol, rtol, max_error_ratio}} or a mapping of output name to those, got {n.describe()}")
    as_fields = [k for k, child in n.value.items() if child.kind != "map"]
    as_names = [k for k, child in n.value.items() if child.kind == "map"]
    if as_names and as_fields:
        k = as_fields[0] if as_fields[0] not in TOLERANCE_FIELDS else as_names[0]
        raise CaseFileError.at(
            n.keys[k],
            "mixes tolerance fields and per-output mappings; give either "
            "{atol, rtol, max_error_ratio} or {output: {atol, ...}, ...}")
    if not as_names:
        fields, plain = _tolerance_fields(n)
        return ToleranceSpec(fields, None, n.where, dict(n.keys)), plain
    per: dict[str, dict[str, float]] = {}
    plain_per: dict[str, Any] = {}
    for name, child in n.value.items():
        fields, plain = _tolerance_fields(child)
        if "argmax_margin" in fields and name != "logits":
            raise CaseFileError.at(child.keys["argmax_margin"], "argmax_margin applies to logits only")
        per[name], plain_per[name] = fields, plain
    return ToleranceSpec(None, per, n.where, dict(n.keys)), plain_per


_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env(n: Node) -> dict[str, str]:
    if n.kind != "map":
        raise CaseFileError.at(n.where, f"expected a mapping of variable name to value, got {n.describe()}")
    env: dict[str, str] = {}
    for name, child in n.value.items():
        if not _ENV_NAME_RE.fullmatch(name):
            raise CaseFileError.at(n.keys[name], f"'{name}' is not a valid environment variable name")
        v = child.value
        if child.kind != "scalar" or not (isinstance(v, str) or _is_number(v)):
            hint = "; quote it" if child.kind == "scalar" and child.text is not None else ""
            raise CaseFileError.at(
                child.where, f"environment values must be strings or numbers, got {child.describe()}{hint}")
        value = v if isinstance(v, str) else (child.text if child.text is not None else str(v))
        if "\0" in value:     # the OS cannot hold it: the worker would die starting
            raise CaseFileError.at(child.where, "environment values cannot hold a NUL byte")
        env[name] = value
    return env


_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


def case_name(n: Node) -> str:
    v = _str(n)
    if not _NAME_RE.fullmatch(v):
        raise CaseFileError.at(n.where, f"name '{v}' is not usable in a test id (use letters, digits and _ . + -)")
    return v


def _kernel(n: Node) -> str:
    v = _str(n)
    if v in BUILTINS or is_import_path(v):
        return v
    raise CaseFileError.at(
        n.where,
        f"unknown kernel '{v}'{did_you_mean(v, BUILTINS)} "
        f"(expected a builtin: {', '.join(BUILTINS)}; or package.module:callable)")


def _head_dim(n: Node) -> int:
    v = _int(n, minimum=1)
    if v % 2:
        raise CaseFileError.at(n.where, f"head_dim must be even (RoPE rotate-half splits it in two), got {v}")
    return v


def _simple(parse: Callable[[Node], Any]) -> Callable[[Node], tuple[Any, Any]]:
    """A parser whose plain form is the scalar as written (numbers stay numbers)."""
    def run(n: Node) -> tuple[Any, Any]:
        return parse(n), n.value
    return run


def _rendered(parse: Callable[[Node], Any]) -> Callable[[Node], tuple[Any, Any]]:
    """A parser whose plain form is the parsed value's normalised string (``uniform(1,3756)``)."""
    def run(n: Node) -> tuple[Any, Any]:
        parsed = parse(n)
        return parsed, str(parsed)
    return run


def _env_value(n: Node) -> tuple[dict[str, str], dict[str, str]]:
    env = _env(n)
    return env, dict(env)


TIERS = ("ci", "device")
_GEOMETRY_FLOATS = ("rope_theta", "eps")

# key -> node -> (parsed, plain)
_PARSERS: dict[str, Callable[[Node], tuple[Any, Any]]] = {
    "op": _simple(lambda n: _choice(n, OPS, "op")),
    "kernel": _simple(_kernel),
    "geometry": _simple(lambda n: _choice(n, PRESETS, "geometry preset")),
    **{f: _simple(lambda n: _int(n, minimum=1)) for f in GEOMETRY_FIELDS if f not in _GEOMETRY_FLOATS},
    "num_layers": _simple(lambda n: _int(n, minimum=1, maximum=MAX_LAYERS)),
    "head_dim": _simple(_head_dim),
    **{f: _simple(lambda n: _float(n, positive=True)) for f in _GEOMETRY_FLOATS},
    "seq_lens": _rendered(_seq_lens),
    "slot_mode": _rendered(_slot_mode),
    "chunk_size": _simple(lambda n: _int(n, minimum=1)),
    "block_value": _simple(lambda n: _int(n, minimum=0)),
    "scratch_pages": _simple(lambda n: _int(n, minimum=1)),
    "seed": _simple(lambda n: _int(n, minimum=0, maximum=MAX_SEED)),
    "tolerance": _tolerance,
    "timeout_s": _simple(lambda n: _float(n, positive=True, maximum=MAX_TIMEOUT_S)),
    "env": _env_value,
    "tier": _simple(lambda n: _choice(n, TIERS, "tier")),
    "attention": _simple(lambda n: _choice(n, ATTENTION_SPREADS, "attention")),
    "precision": _simple(lambda n: _choice(n, PRECISIONS, "precision")),
    "dtype": _simple(lambda n: _choice(n, DTYPES, "dtype")),
}

CASE_KEYS: tuple[str, ...] = (
    "op", "kernel", "geometry", *GEOMETRY_FIELDS,
    "seq_lens", "slot_mode", "chunk_size", "block_value", "scratch_pages", "seed",
    "tolerance", "timeout_s", "env", "tier", "attention", "precision", "dtype",
)

# The plain form of each key's default (geometry fields come from the preset).
_DEFAULT_PLAIN: dict[str, Any] = {
    "op": None, "kernel": "reference", "geometry": "tiny", "seq_lens": "const(1)", "slot_mode": "arange",
    "chunk_size": None, "block_value": None, "scratch_pages": None, "seed": 0, "tolerance": None,
    "timeout_s": 60.0, "env": {}, "tier": "ci", "attention": DEFAULT_ATTENTION, "precision": DEFAULT_PRECISION,
    "dtype": DEFAULT_DTYPE,
}


def parse_value(key: str, n: Node) -> Value:
    parsed, plain = _PARSERS[key](n)
    return Value(key, parsed, plain, n.where)


def effective(values: dict[str, Value], key: str) -> Any:
    """The plain value a case has for ``key``: given, or the default (geometry fields: the preset's)."""
    if key in values:
        return values[key].plain
    if key in GEOMETRY_FIELDS:
        preset = values["geometry"].parsed if "geometry" in values else "tiny"
        return getattr(PRESETS[preset], key)
    return _DEFAULT_PLAIN[key]
