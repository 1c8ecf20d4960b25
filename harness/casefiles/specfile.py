"""Case files that name a TensorSpec module (``spec:``; docs/specs.md): read, checked, expanded.

``harness.casefiles.loader.load_matrix`` hands a file here when its top level has ``spec``.
The keys are checked here, each error one located line; what needs the module (it imports,
``build_tensor_specs`` takes the params and returns good specs, the golden exists, every
``compare:`` names an output and a function) is checked in a short-lived interpreter
(``harness.worker.spec_check``) with ``--kernel-path`` on its path, before any case runs: the
front end imports neither torch nor the module.  A load of several spec files checks them in one
interpreter (``collecting``, then ``answered``), and an unchanged module's answer is read from the
load-time cache (``harness.casefiles.spec_cache``) without starting one.  Its errors are located at the
key they concern (``spec``, ``golden``, ``params``, ``compare.<output>``).
"""
from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import re
import subprocess
import sys
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterator, Sequence

from harness.case import PRESETS, Case, SeqLens, SlotMode, Tolerance
from harness.casefiles import spec_cache
from harness.casefiles.bounds import case_bytes, machine_bound
from harness.casefiles.ids import case_id_of, id_text, refuse_identical_cases, stem_name
from harness.casefiles.located import Node, Where
from harness.casefiles.values import MAX_SEED, MAX_TIMEOUT_S, CaseFileError, case_name, check_keys, parse_value
from harness.comparators import parse_comparator
from harness.memory_plan import human_bytes
from harness.ops import OPS
from harness.ops.registry import is_import_path, is_module_path

TOP_KEYS = ("name", "spec", "golden", "kernel", "params", "seeds", "seed", "matrix", "rtol", "atol",
            "max_error_ratio", "compare", "tier", "timeout_s", "env")
SPEC_CHECK_TIMEOUT_S = 120.0
DEFAULT_RTOL = 3e-3
DEFAULT_ATOL = 3e-3
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_spec_file(root: Node) -> bool:
    return root.kind == "map" and "spec" in root.value


def _fail(where: Where, message: str) -> CaseFileError:
    return CaseFileError.at(where, message)


def _str(n: Node, what: str) -> str:
    if n.kind != "scalar" or not isinstance(n.value, str) or not n.value.strip():
        raise _fail(n.where, f"expected {what}, got {n.describe()}")
    return n.value.strip()


def _plain(n: Node) -> Any:
    if n.kind == "list":
        return [_plain(c) for c in n.value]
    if n.kind == "map":
        return {k: _plain(c) for k, c in n.value.items()}
    return n.value


def _number(n: Node, maximum: float | None = None) -> float:
    v = n.value
    if n.kind != "scalar" or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise _fail(n.where, f"expected a finite number >= 0, got {n.describe()}")
    if maximum is not None and v > maximum:
        raise _fail(n.where, f"must be <= {maximum:g}, got {n.describe()}")
    return float(v)


def _seed(n: Node) -> int:
    v = n.value
    if n.kind != "scalar" or isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_SEED:
        raise _fail(n.where, f"a seed is an integer 0..{MAX_SEED}, got {n.describe()}")
    return v


def _axis(n: Node, key: str) -> list[tuple[Any, Node]]:
    """An axis: a list of values (each one case's), or one value (a one-value axis)."""
    items = n.value if n.kind == "list" else [n]
    if n.kind == "list" and not items:
        raise _fail(n.where, f"empty axis: {key} needs at least one value")
    seen: dict[str, Node] = {}
    out = []
    for item in items:
        value = _plain(item)
        ident = json.dumps(value, sort_keys=True, default=str)
        if ident in seen:
            raise _fail(item.where, f"duplicate value {id_text(value)} (line {seen[ident].where.line})")
        seen[ident] = item
        out.append((value, item))
    return out


def load_spec_matrix(root: Node, path: str, max_cases: int, kernel_paths: Sequence[str] = ()) -> list[Case]:
    """A spec case file's node tree -> its cases (params axes in file order, then seeds)."""
    top = root.value
    if "op" in top:
        raise _fail(root.keys["op"], "a case has either `spec` (a TensorSpec module) or `op`, not both")
    check_keys(root, TOP_KEYS)
    name = case_name(top["name"]) if "name" in top else stem_name(path)
    module = _str(top["spec"], "a module name (package.module)")
    if not is_module_path(module):
        raise _fail(top["spec"].where, f"{module!r} is not a module name (package.module)")
    golden = None
    if "golden" in top:
        golden = _str(top["golden"], "the name of the module's golden function")
        if not _IDENT.fullmatch(golden):
            raise _fail(top["golden"].where, f"{golden!r} is not a function name")
    if "kernel" not in top:
        raise _fail(root.where, "no kernel given: set `kernel: package.module:function` (called as fn(**tensors))")
    kernel = _str(top["kernel"], "package.module:function")
    if not is_import_path(kernel):
        raise _fail(top["kernel"].where, f"{kernel!r} is not package.module:function")

    axes: list[tuple[str, list[tuple[Any, Node]]]] = []
    if "params" in top:
        p = top["params"]
        if p.kind != "map":
            raise _fail(p.where, f"expected a mapping of build_tensor_specs parameter to its values, got {p.describe()}")
        for key, child in p.value.items():
            if not _IDENT.fullmatch(key):
                raise _fail(p.keys[key], f"'{key}' is not a parameter name")
            axes.append((key, _axis(child, key)))
    seeds: list[tuple[int, Node]] = []
    seed_keys = [k for k in ("seeds", "seed") if k in top]
    if "matrix" in top:
        m = top["matrix"]
        if m.kind != "map":
            raise _fail(m.where, f"expected a mapping with `seed: [...]`, got {m.describe()}")
        check_keys(m, ("seed",))
        seed_keys.append("matrix.seed")
    if len(seed_keys) > 1:
        raise _fail(root.where, f"seeds are given twice ({' and '.join(seed_keys)}): give one of them")
    if "seeds" in top or "matrix" in top:
        n = top["seeds"] if "seeds" in top else top["matrix"].value["seed"]
        if n.kind != "list" or not n.value:
            raise _fail(n.where, f"expected a non-empty list of seeds, got {n.describe()}")
        seen: dict[int, Node] = {}
        for item in n.value:
            s = _seed(item)
            if s in seen:
                raise _fail(item.where, f"duplicate seed {s} (line {seen[s].where.line})")
            seen[s] = item
            seeds.append((s, item))
    else:
        seeds = [(_seed(top["seed"]) if "seed" in top else 0, top.get("seed", top["spec"]))]
    rtol = _number(top["rtol"]) if "rtol" in top else DEFAULT_RTOL
    atol = _number(top["atol"]) if "atol" in top else DEFAULT_ATOL
    max_error_ratio = _number(top["max_error_ratio"], 1.0) if "max_error_ratio" in top else 0.0
    compare: dict[str, str] = {}
    if "compare" in top:
        c = top["compare"]
        if c.kind != "map":
            raise _fail(c.where, f"expected a mapping of output name to comparator, got {c.describe()}")
        for out, child in c.value.items():
            text = _str(child, "a comparator")
            try:
                parse_comparator(text)
            except ValueError as exc:
                raise _fail(child.where, str(exc)) from None
            compare[out] = text
    env = parse_value("env", top["env"]).parsed if "env" in top else {}
    tier = parse_value("tier", top["tier"]).parsed if "tier" in top else "ci"
    timeout_s = float(parse_value("timeout_s", top["timeout_s"]).parsed) if "timeout_s" in top else 60.0
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise _fail(top["timeout_s"].where, f"must be in (0, {MAX_TIMEOUT_S:g}]")

    combos = list(itertools.product(*(values for _, values in axes)))
    count = len(combos) * len(seeds)
    if count > max_cases:
        raise _fail(root.where, f"expands to {count} cases, more than the cap of {max_cases} (--max-cases)")
    params_list = [{k: v for (k, _), (v, _) in zip(axes, combo)} for combo in combos]
    checked = _check_module(module, golden, params_list, seeds[0][0], compare, kernel_paths)
    if "error" in checked:
        raise _located(checked["error"], root, top, axes, combos, path)
    golden = checked["golden"]
    op = golden.removeprefix("golden_") or golden
    if op in OPS:           # never mistaken for a builtin op
        op = module
    varying = [k for k, values in axes if len(values) > 1]
    cases = []
    for combo, table in zip(combos, checked["tables"]):
        params = {k: v for (k, _), (v, _) in zip(axes, combo)}
        outputs = [row["name"] for row in table if row["role"] == "output"]
        tolerance = {o: Tolerance(atol=atol, rtol=rtol, max_error_ratio=max_error_ratio) for o in outputs}
        wire = {"op": op, "module": module, "golden": golden, "params": params, "compare": dict(compare),
                "args": table, "intermediates": checked.get("intermediates") or []}
        for seed, seed_node in seeds:
            parts = [f"{k}={id_text(params[k])}" for k in varying] + ([f"seed={seed}"] if len(seeds) > 1 else [])
            case = Case(
                case_id=case_id_of(name, parts), matrix=name, source=f"{path}:{seed_node.where.line or root.where.line}",
                op=op, kernel=kernel, geometry=PRESETS["tiny"], seq_lens=SeqLens("const", (1,)),
                slot_mode=SlotMode("arange"), seed=seed, tolerance=tolerance, timeout_s=timeout_s, env=dict(env),
                tier=tier, params={"spec": module, "golden": golden, **params, "seed": seed, "rtol": rtol, "atol": atol},
                spec=wire)
            need = case_bytes(case)
            if need > machine_bound():
                raise _fail(top["params"].where if "params" in top else top["spec"].where,
                            f"spec module {module}: the case {case.case_id} needs {human_bytes(need)}, more than "
                            f"any machine holds")
            cases.append(case)
    refuse_identical_cases(cases)
    return cases


def _located(error: dict, root: Node, top: dict, axes, combos, path: str) -> CaseFileError:
    field, message = error.get("field"), error.get("message", "")
    if field == "compare" and "compare" in top:
        c = top["compare"]
        name = error.get("name")
        where = (c.keys.get(name) if error.get("key") else c.value[name].where) if name in c.value else c.where
        return _fail(where, message)
    if field == "golden" and "golden" in top:
        return _fail(top["golden"].where, message)
    if field in ("params", "spec") and "params" in top and error.get("index") is not None and axes:
        combo = combos[error["index"]]
        shown = ", ".join(f"{k}={id_text(v)}" for (k, _), (v, _) in zip(axes, combo))
        p = top["params"]
        if field == "params":
            bad = next((k for k in p.value if f"'{k}'" in message), None)
            return _fail(p.keys[bad] if bad else p.where, message)
        return _fail(p.where, f"{message} (params {shown})")
    return _fail(top["spec"].where, message)


def _import_path(kernel_paths: Sequence[str]) -> list[str]:
    """The check's (and the workers') import path: ``--kernel-path`` dirs, ``PYTHONPATH``, the harness."""
    paths = [os.path.abspath(p) for p in kernel_paths] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                         if p]
    paths.append(str(Path(__file__).resolve().parents[2]))
    return list(dict.fromkeys(paths))


class Collected(Exception):
    """Raised in the collecting pass of a batch load (``collecting``), once a file's request is known."""


# A batch load (harness.casefiles.loader): the first pass collects each spec file's request
# (``collecting``), one interpreter answers every request the cache does not hold (``answered``),
# the second pass reads the answers.
_COLLECT: ContextVar[list | None] = ContextVar("spec_collect", default=None)
_ANSWERS: ContextVar[dict | None] = ContextVar("spec_answers", default=None)


def _check_module(module: str, golden: str | None, params_list: list[dict], seed: int, compare: dict[str, str],
                  kernel_paths: Sequence[str]) -> dict:
    """What ``harness.worker.spec_check`` found (or found before, ``spec_cache``), run with the workers' PYTHONPATH."""
    request = {"module": module, "golden": golden, "params": params_list, "seed": seed, "compare": compare}
    paths = _import_path(kernel_paths)
    k = spec_cache.key(request, paths)
    collecting = _COLLECT.get()
    if collecting is not None:
        collecting.append((k, request, paths))
        raise Collected
    answers = _ANSWERS.get()
    if answers is not None and k in answers:
        return answers[k]
    cached = spec_cache.read(k, module, paths)
    if cached is not None:
        return cached
    return _run_checks([(k, request)], paths)[k]


def _run_checks(requests: list[tuple[str, dict]], paths: list[str]) -> dict[str, dict]:
    """Key -> answer of each request, from one ``spec_check`` interpreter; clean answers cached."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    body = json.dumps({"requests": [r for _, r in requests]})
    modules = ", ".join(dict.fromkeys(r["module"] for _, r in requests))

    def failed(message: str) -> dict[str, dict]:
        return {k: {"error": {"field": "spec", "message": f"spec module {r['module']}: {message}"}} for k, r in requests}
    try:
        done = subprocess.run([sys.executable, "-m", "harness.worker.spec_check"], input=body, env=env,
                              capture_output=True, text=True, timeout=SPEC_CHECK_TIMEOUT_S * len(requests))
    except subprocess.TimeoutExpired:
        return failed(f"checking {modules} took over {SPEC_CHECK_TIMEOUT_S * len(requests):g} s")
    lines = done.stdout.strip().splitlines()
    try:
        reply = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        reply = None
    got = reply.get("answers") if isinstance(reply, dict) else None
    if not isinstance(got, list) or len(got) != len(requests) or not all(
            isinstance(a, dict) and isinstance(a.get("answer"), dict) for a in got):
        tail = " ".join(done.stderr.split()[-30:])
        return failed(f"checking it ended the interpreter (exit {done.returncode}): {tail}")
    out = {}
    for (k, request), a in zip(requests, got):
        out[k] = a["answer"]
        spec_cache.write(k, request["module"], paths, a["answer"], [s for s in a.get("sources") or []
                                                                    if isinstance(s, str)])
    return out


def may_be_spec_file(path: "str | os.PathLike[str]") -> bool:
    """A cheap look before a batch load's collecting pass loads a file: a line starting ``spec:``."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return bool(_SPEC_KEY.search(text))


@contextlib.contextmanager
def collecting() -> Iterator[list]:
    """The first pass of a batch load: within the block, loading a spec file raises ``Collected``
    once its check request is known, and the request joins the list yielded (``answered`` takes it)."""
    collected: list = []
    token = _COLLECT.set(collected)
    try:
        yield collected
    finally:
        _COLLECT.reset(token)


@contextlib.contextmanager
def answered(collected: list) -> Iterator[None]:
    """The second pass: within the block, the ``collected`` requests are answered before any spec
    file is loaded, from the cache or by one interpreter for all it lacks: a load of many spec
    files pays one torch import."""
    answers: dict[str, dict] = {}
    missing: dict[tuple, list[tuple[str, dict]]] = {}
    for k, request, paths in collected:
        cached = spec_cache.read(k, request["module"], paths)
        if cached is not None:
            answers[k] = cached
        elif k not in answers:
            missing.setdefault(tuple(paths), []).append((k, request))
    for paths, requests in missing.items():
        if len(requests) > 1:          # one request alone is checked when the real load reaches it
            answers.update(_run_checks(requests, list(paths)))
    token = _ANSWERS.set(answers)
    try:
        yield
    finally:
        _ANSWERS.reset(token)


_SPEC_KEY = re.compile(r"^spec\s*:", re.MULTILINE)


__all__ = ["TOP_KEYS", "Collected", "answered", "collecting", "is_spec_file", "load_spec_matrix", "may_be_spec_file"]
