"""Torch reference implementations ("goldens") of the op contracts in docs/contracts.md.

One module per op, each with ``compute(inputs, dtype) -> dict``; ``common.py``
holds the math they share.  Goldens share no code with any kernel.

``compute(op, inputs, dtype)`` takes ``CaseInputs.args`` (tensors all on one device,
the CPU or an accelerator for ``--golden-device``; scalars as Python numbers, caches
in their pre-launch state; nothing is modified) and does all math in ``dtype``
(float32, or float64 on request) on that device.  It returns CPU tensors in ``dtype``:

- every output of the op by name, full shape;
- for ops that write the cache, ``k_cache`` and ``v_cache``: the row each written
  row *would* write, one per row in row order whatever its slot (``[rows, Hkv, D]``,
  ``[L, B, Hkv, D]`` for ``decode_layers``); the checker keeps the rows whose
  slot is >= 0.

With ``exact=True``, ``compute`` also returns ``<name>@exact`` for every name the
goldens' rounding reading touches (``exact_names(op)``): the same golden with no
bf16 rounding of q/k/v before attention (each op module's ``compute(inputs, dtype,
rounding=False)``).  The checker widens each element's bound by the spread
``|golden@exact - golden|`` (docs/contracts.md, "Rounding spread"), so a kernel that
rounds less than the golden (keeps fresh q/k/v in fp32) is not a false alarm.

Each op module's docstring states how the golden reads what the contract leaves
open.  ``source_hash(op)`` fingerprints the source files an op's golden depends
on, so the golden cache (``harness.goldens.cache``) never serves a stale result.

Importing this package touches no device, no disk and no environment.
"""
from __future__ import annotations

if __name__ != "harness.goldens":     # a bare `goldens` found because the checkout's root is on sys.path: not ours
    from harness.bare_names import give_way
    give_way(__name__, __file__)

import contextlib
import hashlib
import importlib
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from harness.goldens.common import GoldenInputError
from harness.ops import OPS

__all__ = ["EXACT_SUFFIX", "GOLDEN_DTYPES", "GoldenInputError", "compute", "exact_names", "golden_names", "ops",
           "output_names", "source_hash"]

# op name -> its golden module (goldens/<op>.py); a registry, not an if-chain.
_MODULES: dict[str, str] = {op: f"{__name__}.{op}" for op in OPS}
GOLDEN_DTYPES = (torch.float32, torch.float64)
EXACT_SUFFIX = "@exact"
_PACKAGE_DIR = Path(__file__).resolve().parent


def ops() -> tuple[str, ...]:
    return tuple(_MODULES)


def output_names(op: str) -> tuple[str, ...]:
    """Names ``compute(op, ...)`` returns: the op's outputs, then ``k_cache``, ``v_cache`` if it writes them."""
    spec = OPS[_known(op)]
    names = tuple(a.name for a in spec.outputs)
    return names + (tuple(a.name for a in spec.caches) if spec.writes_cache else ())


def exact_names(op: str) -> tuple[str, ...]:
    """``<name>@exact`` for each output/cache whose golden the rounding of q/k/v before attention changes."""
    module = importlib.import_module(_MODULES[_known(op)])
    return tuple(name + EXACT_SUFFIX for name in getattr(module, "ROUNDING_CHANGES", ()))


def golden_names(op: str) -> tuple[str, ...]:
    """Names ``compute(op, ..., exact=True)`` returns (what the golden cache stores)."""
    return output_names(op) + exact_names(op)


def compute(op: str, inputs: Mapping[str, Any], dtype: torch.dtype = torch.float32, *,
            exact: bool = False, intermediates: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The golden values of ``op`` for ``inputs`` (``CaseInputs.args``), computed in ``dtype``.

    ``exact``: also the ``exact_names(op)``, computed with no rounding of q/k/v before attention.
    ``intermediates``: a dict that receives the op's named intermediates (docs/intermediates.md),
    recorded by the very computation that makes the outputs, as CPU tensors in ``dtype``; with
    ``exact``, also ``<name>@exact`` from the unrounded computation where it differs.
    """
    module = importlib.import_module(_MODULES[_known(op)])
    if dtype not in GOLDEN_DTYPES:
        raise GoldenInputError(f"golden dtype must be one of {GOLDEN_DTYPES}, not {dtype}")
    device = _check_inputs(op, inputs)
    inputs_storage = {t.untyped_storage().data_ptr() for t in inputs.values() if isinstance(t, torch.Tensor)}
    rounded: dict[str, torch.Tensor] = {}
    unrounded: dict[str, torch.Tensor] = {}

    def recorder(into: dict[str, torch.Tensor]):
        return None if intermediates is None else (
            lambda name, t: into.__setitem__(name, _detached(t, dtype, inputs_storage, copy=True)))

    with torch.no_grad(), _beside(device):     # the goldens' own tensors (arange, empty) beside the inputs
        extra = {} if intermediates is None else {"record": recorder(rounded)}
        result = module.compute(inputs, dtype, **extra)
        if exact and exact_names(op):
            extra = {} if intermediates is None else {"record": recorder(unrounded)}
            unrounded_out = module.compute(inputs, dtype, rounding=False, **extra)
            result.update({name + EXACT_SUFFIX: unrounded_out[name] for name in module.ROUNDING_CHANGES})
    if intermediates is not None:
        intermediates.update(rounded)
        intermediates.update({name + EXACT_SUFFIX: t for name, t in unrounded.items()
                              if name in rounded and not torch.equal(t, rounded[name])})
    names = golden_names(op) if exact else output_names(op)
    if set(result) != set(names):   # a bug in the golden, not in the inputs
        raise AssertionError(f"golden {op} returned {sorted(result)}, expected {sorted(names)}")
    return {name: _detached(result[name], dtype, inputs_storage) for name in names}


def source_hash(op: str) -> str:
    """sha256 (16 hex) of the files ``op``'s golden depends on: its module, ``common.py``, ``__init__.py``.

    Read once per process: it describes the code this process loaded.
    """
    return _source_hash(_known(op))


@lru_cache(maxsize=None)
def _source_hash(op: str) -> str:
    digest = hashlib.sha256()
    for name in (f"{op}.py", "common.py", "__init__.py"):
        digest.update(name.encode() + b"\0" + (_PACKAGE_DIR / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _known(op: str) -> str:
    if op not in _MODULES:
        raise KeyError(f"no golden for op {op!r}; known: {', '.join(_MODULES)}")
    return op


def _beside(device: torch.device) -> Any:
    """Where the golden's own tensors are made: ``device``.  A ``torch.device`` context sees every torch
    call made inside it (~1.5 us each, a third of a tiny golden's time), so none is entered where
    ``device`` is already the default (the CPU, unless a ``set_default_device`` says otherwise)."""
    if device.type == "cpu" and torch.empty(0).device.type == "cpu":
        return contextlib.nullcontext()
    return torch.device(device)


def _check_inputs(op: str, inputs: Mapping[str, Any]) -> torch.device:
    """The one device every input tensor is on (the CPU when there are none)."""
    from harness.ops import OPS

    needed = [a.name for a in OPS[op].args if a.role != "output"]
    missing = [name for name in needed if name not in inputs]
    if missing:
        raise GoldenInputError(f"golden {op}: missing inputs {', '.join(missing)}")
    devices = {inputs[name].device: name for name in needed if isinstance(inputs[name], torch.Tensor)}
    if len(devices) > 1:
        where = ", ".join(f"{name} on {device}" for device, name in devices.items())
        raise GoldenInputError(f"golden {op}: inputs on more than one device ({where}); goldens take them on one")
    return next(iter(devices), torch.device("cpu"))


def _detached(t: torch.Tensor, dtype: torch.dtype, inputs_storage: set[int], copy: bool = False) -> torch.Tensor:
    """A CPU tensor in dtype that shares no memory with any input (callers may write to it);
    ``copy``: nor with ``t`` (a recorded intermediate the golden goes on to change in place)."""
    t = t.detach().to("cpu", dtype)
    if copy or t.untyped_storage().data_ptr() in inputs_storage:
        t = t.clone()
    return t
