"""A user's TensorSpec module, read as it is (docs/specs.md): imported, its specs built and
checked, its tensors created from the case's seed.

Runs where tensors are made: the device worker, the golden process, and the short-lived
interpreter that checks a spec case file at load time (``harness.worker.spec_check``); never
in the front end.  Spec objects are duck-typed: a tensor spec is anything with ``name``,
``shape``, ``dtype``, ``init_value`` and ``is_output``; a scalar spec anything with ``name``,
``dtype`` and ``value`` (and no ``shape``).  Optional: ``dims`` (a tensor's dim names, for
localisation).

Seeding (``seed_all``), in this order, in the process that creates the tensors and before
``build_tensor_specs`` is called: ``random.seed(seed)``, ``numpy.random.seed(seed % 2**32)``,
``torch.manual_seed(seed)``.  Then ``build_tensor_specs(**params)`` runs, then each spec's
``init_value`` is resolved in the module's order (None: zeros; a number: filled; a tensor:
copied; a callable: called with no arguments, its tensor used).  So a case id gives the same
bytes in every process and on every machine, as long as the module draws only from those
three generators.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import os
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy
import torch

# How the tensors are made from a seed: part of the golden cache key, so a change here is a new key.
SEEDING = "random,numpy,torch;v1"
# One tensor's elements at most (the 10^9-element spec is refused by name); the case's
# whole memory plan is bounded by the case-file loader as any case's is.
MAX_ELEMENTS = 1 << 29

_DTYPE_NAMES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "float64": torch.float64, "fp64": torch.float64, "double": torch.float64,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16, "int32": torch.int32,
    "int64": torch.int64, "long": torch.int64, "int": torch.int32, "bool": torch.bool,
}
for _name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
    if hasattr(torch, _name):
        _DTYPE_NAMES[_name] = getattr(torch, _name)
_SCALAR_TYPES = {"float": float, "float32": float, "fp32": float, "float64": float, "fp64": float,
                 "int": int, "int32": int, "int64": int, "bool": bool}


class SpecError(Exception):
    """The spec module (not the kernel, not the harness) is wrong: one line naming the module and spec."""


@dataclass(frozen=True)
class TensorEntry:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    init: Any
    is_output: bool
    dims: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ScalarEntry:
    name: str
    dtype: str          # int | float | bool: the Python type the kernel and the golden get
    value: Any


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def torch_dtype(value: Any, where: str) -> torch.dtype:
    """A spec's dtype: a torch dtype, or its name (``"bf16"``, ``"torch.int8"``, ``"int32"``)."""
    if isinstance(value, torch.dtype):
        if value not in _DTYPE_NAMES.values():
            raise SpecError(f"{where}: dtype {value} is not one the harness compares")
        return value
    if isinstance(value, str):
        key = value.removeprefix("torch.")
        if key in _DTYPE_NAMES:
            return _DTYPE_NAMES[key]
    known = ", ".join(sorted({dtype_name(d) for d in _DTYPE_NAMES.values()}))
    raise SpecError(f"{where}: unknown dtype {value!r} (known: {known})")


# The golden process's kernel paths (harness/run/golden_process.py): put on sys.path for spec
# modules only; a device worker has them on PYTHONPATH already.
SPEC_PATH_VAR = "HARNESS_SPEC_PATH"


def import_module(name: str):
    """The spec module, imported once per process (``--kernel-path`` is on ``sys.path`` there, or
    in ``$HARNESS_SPEC_PATH`` in the golden process, added to ``sys.path`` here)."""
    extra = [p for p in os.environ.get(SPEC_PATH_VAR, "").split(os.pathsep) if p and p not in sys.path]
    sys.path[:0] = extra
    try:
        return importlib.import_module(name)
    except SpecError:
        raise
    except BaseException as exc:  # noqa: BLE001 (a SystemExit at import is a broken module too)
        raise SpecError(f"spec module {name}: does not import: {type(exc).__name__}: {exc}") from exc


def golden_function(module, name: str | None) -> tuple[str, Callable]:
    """``(name, fn)``: the golden named, or the module's only ``golden_*`` function."""
    mod = module.__name__
    if name is not None:
        fn = getattr(module, name, None)
        if not callable(fn):
            raise SpecError(f"spec module {mod}: has no golden function {name!r}")
        return name, fn
    found = sorted(n for n, v in vars(module).items() if n.startswith("golden_") and callable(v))
    if len(found) != 1:
        what = f"{len(found)} ({', '.join(found)})" if found else "none"
        raise SpecError(f"spec module {mod}: name the golden with `golden:`; it has {what} golden_* functions")
    return found[0], getattr(module, found[0])


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*")


def declared_intermediates(module) -> list[list]:
    """The module's ``INTERMEDIATES`` as ``[name, upstream]`` pairs in dataflow order (``[]`` when it
    has none).  An entry is a name (it consumes the entry before it: a chain), or ``(name,
    [names])`` naming the earlier intermediates it consumes directly (``[]``: the inputs only)."""
    mod = module.__name__
    found = getattr(module, "INTERMEDIATES", None)
    if found is None:
        return []
    where = f"spec module {mod}: INTERMEDIATES"
    if not isinstance(found, (list, tuple)) or not found:
        raise SpecError(f"{where} is a {type(found).__name__}; expected a non-empty list of names in dataflow order")
    pairs: list[list] = []
    for i, entry in enumerate(found):
        if isinstance(entry, str):
            name, upstream = entry, [pairs[-1][0]] if pairs else []
        elif isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[0], str) \
                and isinstance(entry[1], (list, tuple)) and all(isinstance(u, str) for u in entry[1]):
            name, upstream = entry[0], list(entry[1])
        else:
            raise SpecError(f"{where}[{i}] is {entry!r}; expected a name or (name, [names it consumes])")
        if not _NAME.fullmatch(name):
            raise SpecError(f"{where}[{i}]: {name!r} is not a name (letters, digits, _ and dots; a file name too)")
        if any(p[0] == name for p in pairs):
            raise SpecError(f"{where}: {name!r} is listed twice")
        later = [u for u in upstream if all(p[0] != u for p in pairs)]
        if later:
            raise SpecError(f"{where}: {name!r} consumes {later[0]!r}, which is not listed before it "
                            f"(dataflow order)")
        pairs.append([name, upstream])
    return pairs


def source_hash(module) -> str:
    """sha256 (16 hex) of the module's source file: the golden cache key follows the module's code."""
    path = getattr(module, "__file__", None)
    data = Path(path).read_bytes() if path and Path(path).is_file() else module.__name__.encode()
    return hashlib.sha256(data).hexdigest()[:16]


def _is_tensor_spec(obj: Any) -> bool:
    return all(hasattr(obj, a) for a in ("name", "shape", "dtype"))


def _is_scalar_spec(obj: Any) -> bool:
    return all(hasattr(obj, a) for a in ("name", "dtype", "value")) and not hasattr(obj, "shape")


def build(module, params: Mapping[str, Any]) -> list[TensorEntry | ScalarEntry]:
    """``build_tensor_specs(**params)``, each spec read and checked (not yet created)."""
    mod = module.__name__
    fn = getattr(module, "build_tensor_specs", None)
    if not callable(fn):
        raise SpecError(f"spec module {mod}: has no build_tensor_specs function")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    if sig is not None and not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        for key in params:
            if key not in sig.parameters:
                takes = ", ".join(sig.parameters) or "no parameters"
                raise SpecError(f"spec module {mod}: build_tensor_specs does not take parameter {key!r} "
                                f"(it takes: {takes})")
    try:
        specs = fn(**params)
    except SpecError:
        raise
    except Exception as exc:
        raise SpecError(f"spec module {mod}: build_tensor_specs({_params_text(params)}) raised "
                        f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(specs, (list, tuple)):
        raise SpecError(f"spec module {mod}: build_tensor_specs returned {type(specs).__name__}, not a list of specs")
    if not specs:
        raise SpecError(f"spec module {mod}: build_tensor_specs returned an empty list")
    entries: list[TensorEntry | ScalarEntry] = []
    seen: set[str] = set()
    for i, obj in enumerate(specs):
        where = f"spec module {mod}: spec {i}"
        if _is_scalar_spec(obj):
            entries.append(_scalar(obj, where))
        elif _is_tensor_spec(obj):
            entries.append(_tensor(obj, where))
        else:
            raise SpecError(f"{where}: {type(obj).__name__} is neither a tensor spec (name, shape, dtype, "
                            f"init_value, is_output) nor a scalar spec (name, dtype, value)")
        name = entries[-1].name
        if name in seen:
            raise SpecError(f"spec module {mod}: two specs are named {name!r}")
        seen.add(name)
    if not any(isinstance(e, TensorEntry) and e.is_output for e in entries):
        raise SpecError(f"spec module {mod}: no spec has is_output=True (nothing to compare)")
    return entries


def _name(obj: Any, where: str) -> str:
    name = getattr(obj, "name")
    if not isinstance(name, str) or not name.isidentifier():
        raise SpecError(f"{where}: name {name!r} is not a Python identifier (the kernel takes it as a keyword)")
    return name


def _tensor(obj: Any, where: str) -> TensorEntry:
    name = _name(obj, where)
    where = f"{where} ({name})"
    shape = getattr(obj, "shape")
    if isinstance(shape, torch.Size):
        shape = tuple(shape)
    if not isinstance(shape, (list, tuple)) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise SpecError(f"{where}: shape {shape!r} is not a list of non-negative ints")
    shape = tuple(int(n) for n in shape)
    numel = 1
    for n in shape:
        numel *= n
    if numel > MAX_ELEMENTS:
        raise SpecError(f"{where}: shape {list(shape)} has {numel} elements, more than the {MAX_ELEMENTS} "
                        f"one spec tensor may have")
    dtype = torch_dtype(getattr(obj, "dtype"), where)
    init = getattr(obj, "init_value", None)
    if not (init is None or callable(init) or isinstance(init, torch.Tensor)
            or (isinstance(init, (int, float, bool)))):
        raise SpecError(f"{where}: init_value is a {type(init).__name__}; expected None, a number, a tensor "
                        f"or a callable returning a tensor")
    if isinstance(init, torch.Tensor):
        _check_init(init, shape, where)
    dims = getattr(obj, "dims", None)
    if dims is not None:
        if not isinstance(dims, (list, tuple)) or len(dims) != len(shape) or not all(
                isinstance(d, str) for d in dims):
            raise SpecError(f"{where}: dims {dims!r} must name each of its {len(shape)} dims")
        dims = tuple(dims)
    is_output = bool(getattr(obj, "is_output", False))
    return TensorEntry(name, shape, dtype, init, is_output, dims)


def _scalar(obj: Any, where: str) -> ScalarEntry:
    name = _name(obj, where)
    value = getattr(obj, "value")
    dtype = getattr(obj, "dtype")
    text = dtype_name(dtype) if isinstance(dtype, torch.dtype) else dtype if isinstance(dtype, str) else None
    kind = _SCALAR_TYPES.get((text or "").removeprefix("torch."))
    if kind is None:
        raise SpecError(f"{where} ({name}): scalar dtype {dtype!r} is not one of {', '.join(_SCALAR_TYPES)}")
    if isinstance(value, bool) and kind is not bool or not isinstance(value, (int, float, bool)):
        raise SpecError(f"{where} ({name}): scalar value {value!r} is not a number")
    return ScalarEntry(name, kind.__name__, kind(value))


def _check_init(t: Any, shape: tuple[int, ...], where: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise SpecError(f"{where}: init_value returned {type(t).__name__}, not a tensor")
    if tuple(t.shape) != shape and t.numel() != 1:
        raise SpecError(f"{where}: init_value has shape {list(t.shape)}, the spec says {list(shape)}")


def _host_only() -> bool:
    """No accelerator this process could ever draw on.  Then ``torch.manual_seed`` is its CPU
    generator's seeding plus queued lazy seedings of devices that cannot start, each capturing a
    stack trace: 1-2 ms a case, most of a tiny spec op's creation (bench/bench_spec_ops.py).
    An out-of-tree device module registered on torch (``torch.npu``) is seeded as torch seeds it;
    asked each time, as a kernel may import one late."""
    if hasattr(torch, torch._C._get_privateuse1_backend_name()):
        return False
    return _no_builtin_accelerator()


@functools.lru_cache(maxsize=1)
def _no_builtin_accelerator() -> bool:
    checks = (torch.cuda.is_available, getattr(getattr(torch, "xpu", None), "is_available", None),
              getattr(getattr(torch, "mtia", None), "is_available", None), torch.backends.mps.is_available)
    try:
        return not any(check() for check in checks if check is not None)
    except Exception:  # noqa: BLE001 (a runtime that cannot say: seed everything, as torch.manual_seed does)
        return False


def seed_all(seed: int) -> None:
    """Every global generator a spec's callables may draw from, from the case's seed (this order).
    ``torch.manual_seed`` in full where an accelerator exists; else its CPU generator alone, the
    same bytes."""
    random.seed(seed)
    numpy.random.seed(seed % 2**32)
    if _host_only():
        torch.default_generator.manual_seed(seed)
    else:
        torch.manual_seed(seed)


def create(entries: list, seed_used: int) -> dict[str, Any]:
    """Each entry's value, in order: tensors on the host in the spec's dtype and shape (outputs as
    their spec initialises them), scalars as their Python value.  Call after ``seed_all``."""
    values: dict[str, Any] = {}
    for e in entries:
        if isinstance(e, ScalarEntry):
            values[e.name] = e.value
            continue
        where = f"spec {e.name}"
        init = e.init
        if init is None:
            t = torch.zeros(e.shape, dtype=e.dtype)
        elif isinstance(init, (int, float, bool)):
            t = torch.full(e.shape, init, dtype=e.dtype)
        else:
            fresh = False
            if callable(init) and not isinstance(init, torch.Tensor):
                try:
                    init = init()
                except Exception as exc:
                    raise SpecError(f"{where}: init_value raised {type(exc).__name__}: {exc}") from exc
                # nothing else holds what the callable returned (this frame's name and getrefcount's
                # argument only; not a view; its storage its own): no copy needed to own it
                fresh = (isinstance(init, torch.Tensor) and sys.getrefcount(init) == 2 and init._base is None
                         and torch._C._storage_Use_Count(init.untyped_storage()._cdata) == 2)
            _check_init(init, e.shape, where)
            t = init.detach().to("cpu")
            if t.numel() == 1 and tuple(t.shape) != e.shape:
                t = t.reshape(()).expand(e.shape)
            converted = t.to(e.dtype).contiguous()
            # a copy unless the conversion made one or the tensor is the callable's fresh one: a
            # spec's own tensor (or one its module keeps) must not be what a kernel may write
            t = converted if fresh or converted.data_ptr() != init.data_ptr() else converted.clone()
            del converted
        values[e.name] = t
    return values


def created(module_name: str, params: Mapping[str, Any], seed: int) -> tuple[Any, list, dict[str, Any]]:
    """``(module, entries, values)``: seeded, built and created, as every process does it."""
    module = import_module(module_name)
    seed_all(seed)
    entries = build(module, params)
    return module, entries, create(entries, seed)


def table(entries: list) -> list[dict[str, Any]]:
    """The specs as plain data: the case's ``spec["args"]`` (``harness.ops.spec_op``)."""
    rows = []
    for e in entries:
        if isinstance(e, ScalarEntry):
            rows.append({"name": e.name, "role": "scalar", "shape": [], "dtype": e.dtype, "value": e.value})
        else:
            rows.append({"name": e.name, "role": "output" if e.is_output else "input", "shape": list(e.shape),
                         "dtype": dtype_name(e.dtype), **({"dims": list(e.dims)} if e.dims else {})})
    return rows


def _params_text(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in params.items())


def resolve_callable(text: str, what: str) -> Callable:
    """``pkg.mod:fn`` imported (a comparator)."""
    module_name, _, attr = text.partition(":")
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # noqa: BLE001
        raise SpecError(f"{what} {text!r}: module {module_name} does not import: {type(exc).__name__}: {exc}") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise SpecError(f"{what} {text!r}: {module_name} has no function {attr!r}")
    return fn


__all__ = ["MAX_ELEMENTS", "SEEDING", "ScalarEntry", "SpecError", "TensorEntry", "build", "create", "created",
           "declared_intermediates", "dtype_name", "golden_function", "import_module", "resolve_callable", "seed_all", "source_hash",
           "table", "torch_dtype"]

