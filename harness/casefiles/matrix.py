"""Kernel matrix case files (``op:``; docs/cases.md): validated and expanded ``Case`` objects out.

``harness.casefiles.loader`` reads the file as located YAML (``located``: every node knows
its file, line, column and field path) and hands a kernel matrix here; each case key's value
is parsed by its own parser (``values``).  This module does the rest: the matrix is expanded
(cartesian product in file order, then excludes, then includes), ids are built (``ids``),
and every case is checked as a whole (heads vs KV heads, cache capacity, slot collisions,
its size against ``bounds``, ...).  A cross-field error blames the most specific value that
was given and names the case.

Every error is a ``CaseFileError``: one line, ``<path>:<line>:<col>: <field>: <what>``.
"""
from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass, replace
from typing import Any

from harness import packs
from harness.case import DEFAULT_ATTENTION, DEFAULT_DTYPE, DEFAULT_PRECISION, GEOMETRY_FIELDS, PRESETS, Case, Geometry, SeqLens, SlotMode, Tolerance, default_tolerance
from harness.casefiles.bounds import MAX_CASE_BYTES, case_bytes, host_total, machine_bound
from harness.casefiles.ids import case_id_of, id_text, refuse_identical_cases, stem_name
from harness.casefiles.latency import parse_latency
from harness.casefiles.located import Node, Where, did_you_mean
from harness.casefiles.values import (
    CASE_KEYS,
    CaseFileError,
    ToleranceSpec,
    Value,
    case_name,
    check_keys,
    effective,
    parse_value,
)
from harness.memory_plan import human_bytes
from harness.ops import OPS
from harness.ops.registry import BUILTINS

__all__ = ["INCLUDE_KEYS", "TOP_KEYS", "load_kernel_matrix"]


TOP_KEYS: tuple[str, ...] = ("name", *CASE_KEYS, "matrix", "exclude", "include", "latency")
INCLUDE_KEYS: tuple[str, ...] = ("name", *CASE_KEYS)


# ---------------------------------------------------------------------------
# The file: top level, matrix, exclude, include
# ---------------------------------------------------------------------------

@dataclass
class _Spec:
    path: str
    name: str
    root: Where
    base: dict[str, Value]                      # top-level case values, file order
    axes: list[tuple[str, list[Value]]] | None  # None: no `matrix` key
    matrix_where: Where | None
    excludes: list[tuple[Where, dict[str, Value]]]
    includes: list[tuple[Where, str | None, dict[str, Value]]]


@dataclass
class _Draft:
    values: dict[str, Value]
    origin: Where                   # the `matrix` key, the include entry, or the top-level mapping
    case_id: str = ""


def _read_spec(root: Node, path: str) -> _Spec:
    if root.kind != "map":
        raise CaseFileError.at(
            root.where, f"a case file must be a mapping of keys (op, matrix, ...), got {root.describe()}")
    check_keys(root, TOP_KEYS)
    name = case_name(root.value["name"]) if "name" in root.value else stem_name(path)
    base = {k: parse_value(k, child) for k, child in root.value.items() if k in CASE_KEYS}

    axes = None
    matrix_where = None
    if "matrix" in root.value:
        m = root.value["matrix"]
        matrix_where = root.keys["matrix"]
        if m.kind != "map":
            raise CaseFileError.at(m.where, f"expected a mapping of axis name to a list of values, got {m.describe()}")
        if not m.value:
            raise CaseFileError.at(m.where, "empty matrix: give at least one axis, or drop the key")
        check_keys(m, CASE_KEYS)
        axes = []
        for key, child in m.value.items():
            if key in base:
                raise CaseFileError.at(
                    m.keys[key],
                    f"'{key}' is set both at top level (line {base[key].where.line}) and as a matrix axis")
            if child.kind != "list":
                raise CaseFileError.at(child.where, f"expected a non-empty list of values, got {child.describe()}")
            if not child.value:
                raise CaseFileError.at(child.where, "empty axis: an axis needs at least one value")
            values = [parse_value(key, item) for item in child.value]
            seen: dict[str, Value] = {}
            for v in values:
                ident = id_text(v.plain)
                if ident in seen:
                    raise CaseFileError.at(
                        v.where,
                        f"duplicate value {ident} (same as {seen[ident].where.field} at line {seen[ident].where.line})")
                seen[ident] = v
            axes.append((key, values))

    excludes = []
    if "exclude" in root.value:
        ex = root.value["exclude"]
        if ex.kind != "list":
            raise CaseFileError.at(ex.where, f"expected a list of partial mappings, got {ex.describe()}")
        if axes is None:
            raise CaseFileError.at(root.keys["exclude"], "exclude needs a matrix to exclude from")
        for entry in ex.value:
            if entry.kind != "map":
                raise CaseFileError.at(entry.where, f"expected a mapping of key to value, got {entry.describe()}")
            if not entry.value:
                raise CaseFileError.at(entry.where, "an empty exclude entry would drop every case")
            check_keys(entry, CASE_KEYS)
            excludes.append((entry.where, {k: parse_value(k, c) for k, c in entry.value.items()}))

    includes = []
    if "include" in root.value:
        inc = root.value["include"]
        if inc.kind != "list":
            raise CaseFileError.at(inc.where, f"expected a list of mappings, got {inc.describe()}")
        for entry in inc.value:
            if entry.kind != "map":
                raise CaseFileError.at(entry.where, f"expected a mapping of key to value, got {entry.describe()}")
            check_keys(entry, INCLUDE_KEYS)
            inc_name = case_name(entry.value["name"]) if "name" in entry.value else None
            includes.append((entry.where, inc_name,
                             {k: parse_value(k, c) for k, c in entry.value.items() if k != "name"}))

    return _Spec(path, name, root.where, base, axes, matrix_where, excludes, includes)



def _expand(spec: _Spec, max_cases: int) -> list[_Draft]:
    drafts: list[_Draft] = []
    count = math.prod(len(vals) for _, vals in spec.axes or ()) + len(spec.includes)
    if count > max_cases:
        raise CaseFileError.at(spec.matrix_where or spec.root,
                               f"expands to {count} cases, more than the cap of {max_cases} (--max-cases)")
    if spec.axes is not None:
        keys = [k for k, _ in spec.axes]
        varying = [k for k, vals in spec.axes if len(vals) > 1]
        hits = [0] * len(spec.excludes)
        for combo in itertools.product(*(vals for _, vals in spec.axes)):
            values = {**spec.base, **dict(zip(keys, combo))}
            dropped = False
            for i, (_, entry) in enumerate(spec.excludes):
                if all(effective(values, k) == v.plain for k, v in entry.items()):
                    hits[i] += 1
                    dropped = True
            if dropped:
                continue
            parts = [f"{k}={id_text(values[k].plain)}" for k in varying]
            drafts.append(_Draft(values, spec.matrix_where, case_id_of(spec.name, parts)))
        for (where, _), n in zip(spec.excludes, hits):
            if n == 0:
                raise CaseFileError.at(where, "exclude entry matches no case of the matrix")
        if not drafts:
            raise CaseFileError.at(spec.matrix_where, "empty matrix: every case is excluded")
    elif not spec.includes:
        drafts.append(_Draft(dict(spec.base), spec.root, spec.name))

    for where, inc_name, entry in spec.includes:
        values = {**spec.base, **entry}
        if inc_name is not None:
            case_id = f"{spec.name}[{inc_name}]"
        else:
            parts = [f"{k}={id_text(v.plain)}" for k, v in entry.items()
                     if v.plain != effective(spec.base, k)]
            case_id = case_id_of(spec.name, parts)
        drafts.append(_Draft(values, where, case_id))

    first: dict[str, _Draft] = {}
    for d in drafts:
        if d.case_id in first:
            raise CaseFileError.at(
                d.origin, f"duplicate case id '{d.case_id}' (also defined at line {first[d.case_id].origin.line})")
        first[d.case_id] = d
    return drafts


# ---------------------------------------------------------------------------
# Cases: resolve and check each expanded case as a whole
# ---------------------------------------------------------------------------

def _blame(draft: _Draft, *keys: str) -> Where:
    for key in keys:
        if key in draft.values:
            return draft.values[key].where
    return draft.origin


def _op_keys() -> tuple[str, ...]:
    """The case-file keys some op takes as its own (``OpEntry.case_keys``), in the packs' order."""
    return tuple(dict.fromkeys(key for e in packs.ops().values() for key in e.case_keys))


def _build_case(spec: _Spec, draft: _Draft) -> Case:
    values = draft.values
    in_case = f" (case {draft.case_id})"

    def get(key: str, default: Any = None) -> Any:
        return values[key].parsed if key in values else default

    def fail(message: str, *keys: str) -> CaseFileError:
        return CaseFileError.at(_blame(draft, *keys), message + in_case)

    op = get("op")
    if op is None:
        raise CaseFileError.at(
            draft.origin,
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

    entry = packs.entry(op)
    for key in _op_keys():      # a key some op declares its own (OpEntry.case_keys), given to another
        if key in values and values[key].parsed is not None and key not in entry.case_keys:
            takers = [name for name, e in packs.ops().items() if key in e.case_keys]
            raise fail(f"{key} applies to op{'s' if len(takers) > 1 else ''} {', '.join(takers)} only, "
                       f"not {op}", key)
    chunk_size = get("chunk_size")

    spec_ops = OPS[op]
    precision = get("precision", DEFAULT_PRECISION)
    tolerance = _resolve_tolerance(get("tolerance"), spec_ops.outputs + spec_ops.caches, op, in_case, precision)

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
        attention=get("attention", DEFAULT_ATTENTION),
        precision=precision,
        dtype=get("dtype", DEFAULT_DTYPE),
    )

    pages = case.num_pages
    slots = pages * g.page_size
    writes = spec_ops.writes_cache
    # The most rows one launch writes: batch rows, or for an op whose rows belong to sequences
    # every token of the chunks.
    longest_chunk = min(chunk_size or seq_lens.max_len(g.page_size), seq_lens.max_len(g.page_size))
    rows_per_seq = longest_chunk if entry.rows_by_sequence else 1
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
    need = case_bytes(case)
    bound = machine_bound()
    if need > bound:
        given = [k for k in (*GEOMETRY_FIELDS, "seq_lens", "scratch_pages", "chunk_size") if k in values]
        biggest = max(given, key=lambda k: _size_of(values[k].parsed, g.page_size), default="geometry")
        raise fail(f"the case needs {human_bytes(need)}, more than any machine holds (this host has "
                   f"{human_bytes(host_total())} in all; no device holds more than {human_bytes(MAX_CASE_BYTES)})",
                   biggest, "geometry")
    return case


def _size_of(parsed: Any, page_size: int) -> float:
    if isinstance(parsed, SeqLens):
        return parsed.max_len(page_size)
    return parsed if isinstance(parsed, (int, float)) else 0


def _resolve_tolerance(spec: ToleranceSpec | None, args, op: str, in_case: str,
                       precision: str = DEFAULT_PRECISION) -> dict[str, Tolerance]:
    if spec is None:
        return {}
    names = [a.name for a in args]

    def resolved(name: str, fields: dict[str, float | None]) -> Tolerance:
        if "atol" in fields and "atol_rms" not in fields:      # an atol given is the atol: not scaled
            fields = {**fields, "atol_rms": None}
        return replace(default_tolerance(op, name, precision), **fields)

    if spec.flat is not None:
        fields = dict(spec.flat)
        if "argmax_margin" in fields and "logits" not in names:
            raise CaseFileError.at(
                spec.name_where["argmax_margin"],
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
            raise CaseFileError.at(
                spec.name_where[name],
                f"op {op} has no output or cache '{name}'{did_you_mean(name, names)} "
                f"(valid: {', '.join(names)})" + in_case)
        out[name] = resolved(name, fields)
    return out


# ---------------------------------------------------------------------------
# Public entry point (harness.casefiles.loader hands a kernel matrix file here)
# ---------------------------------------------------------------------------

def load_kernel_matrix(root: Node, path: str, max_cases: int) -> list[Case]:
    """A kernel matrix file's node tree (``op:``) -> its expanded, validated cases, in file order."""
    spec = _read_spec(root, path)
    cases = [_build_case(spec, draft) for draft in _expand(spec, max_cases)]
    refuse_identical_cases(cases)
    if root.kind == "map" and "latency" in root.value:      # the whole file's timing settings (docs/latency.md)
        timed = parse_latency(root.value["latency"])
        cases = [c.with_latency(timed) for c in cases]
    return cases
