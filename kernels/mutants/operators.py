"""Mutation operators that wrap any kernel: the kernel a case names, run with one bug class added.

``harness audit`` runs a matrix once as it is and once per operator with every
case's kernel replaced by this module (a function per op, named like the op).
Which operator, and which kernel it wraps, travel in the case's environment, so
the wrapped kernel is imported here, in the device worker, never in the front
end:

- ``HARNESS_MUTANT``: the operator's name (``harness/audit/operators.py`` lists them);
- ``HARNESS_MUTANT_KERNEL``: the wrapped kernel, as a case names it (a builtin,
  ``package.module:callable`` or ``package.module``);
- ``HARNESS_MUTANT_DELTA``: the relative perturbation of ``head_perturbed``;
- ``HARNESS_MUTANT_SHAPE``: what ``head_perturbed`` scales, ``head`` or ``block``;
- ``HARNESS_MUTANT_OUTPUT``: which output ``head_perturbed`` scales (default the op's first).

Output-side operators act on the buffers around the wrapped kernel's launch, so
they apply to any kernel.  Operators that act inside the computation replace the
kernel with a reference kernel that has the bug (the front end applies them only
to cases whose kernel is the reference); in ``decode_layers`` the bug is in the
last layer only, as a bug in one layer's kernel would be.
"""
from __future__ import annotations

import importlib
import inspect
import os
from typing import Any, Callable

import torch
from torch import Tensor

from harness.kernels.reference import ReferenceKernel, for_every_op
from harness.ops import OPS
from harness.ops.registry import target

MUTANT_VAR = "HARNESS_MUTANT"
KERNEL_VAR = "HARNESS_MUTANT_KERNEL"
DELTA_VAR = "HARNESS_MUTANT_DELTA"
SHAPE_VAR = "HARNESS_MUTANT_SHAPE"     # head_perturbed: "head" (default) or "block"
OUTPUT_VAR = "HARNESS_MUTANT_OUTPUT"   # the output it acts on (default the op's first; a spec op's set)
INPUT_VAR = "HARNESS_MUTANT_INPUT"     # input_clobber: the input it writes (default the op's first)

# Operators inside the computation: the reference kernel with the bug, by class.
INTERNAL = {
    "stale_current_token": "harness.kernels.mutants.stale_kv:StaleKV",
    "skip_rope": "harness.kernels.mutants.skip_rope:SkipRope",
    "gptj_rope": "harness.kernels.mutants.gptj_rope:GptjRope",
    "off_by_one_page": "harness.kernels.mutants.off_by_one_page:OffByOnePage",
    "one_key_too_few": "harness.kernels.mutants.key_bounds:OneKeyTooFew",
    "one_key_too_many": "harness.kernels.mutants.key_bounds:OneKeyTooMany",
    "unmasked_tail": "harness.kernels.mutants.key_bounds:UnmaskedTail",
    "block_too_many": "harness.kernels.mutants.key_bounds:BlockTooMany",
}

_loaded: dict[str, Callable[..., Any]] = {}


def _load(path: str) -> Callable[..., Any]:
    if path not in _loaded:
        module, _, attr = path.partition(":")
        _loaded[path] = getattr(importlib.import_module(module), attr)
    return _loaded[path]


def _first_output(op: str | None, args: dict[str, Any]) -> Tensor:
    """The output the operator acts on: the one the audit named (always, for a spec op), else the op's first."""
    return args[os.environ.get(OUTPUT_VAR) or OPS[op].outputs[0].name]


def _valid_rows(args: dict[str, Any]) -> list[tuple[int, int]]:
    """``(row, slot)`` of the rows whose slot is >= 0."""
    return [(r, s) for r, s in enumerate(args["slot_mapping"].tolist()) if s >= 0]


def _slot_rows(cache: Tensor) -> Tensor:
    """Layer 0 of a cache as ``[N*P, Hkv, D]`` rows (a view: writes land in the cache)."""
    Hkv, D = cache.shape[-2:]
    layer = cache if cache.dim() == 4 else cache[0]
    return layer.reshape(-1, Hkv, D)


def _perturbed(out: Tensor, shape: str, op: str | None) -> Tensor:
    """What ``head_perturbed`` scales: one head of the first row (a quarter of the row where the
    output has no heads: a spec op's, every dim after the first taken as the row); ``block``: a
    quarter of that head (a sixteenth of the row)."""
    if out.dim() == 3 and op is not None:     # a builtin op's [rows, heads, D]
        row = out[0, 0]
    else:
        flat = out.reshape(out.shape[0], -1)[0] if out.dim() >= 2 else out.reshape(-1)
        row = flat[: max(1, flat.shape[-1] // 4)]
    return row[: max(1, row.shape[-1] // 4)] if shape == "block" else row


def _before(name: str, op: str, args: dict[str, Any]) -> dict[str, Any]:
    """What an operator must see before the launch: the buffers as the kernel finds them."""
    if name == "half_written":
        return {"found": _first_output(op, args).clone()}
    if name == "skip_cache_write":
        valid = _valid_rows(args)
        if not valid:
            return {}
        slot = valid[0][1]
        return {"slot": slot, "rows": {c: _slot_rows(args[c])[slot].clone() for c in ("k_cache", "v_cache")}}
    return {}


def _after(name: str, op: str, args: dict[str, Any], seen: dict[str, Any]) -> None:
    if name == "out_is_query":
        args["out"].copy_(args["query"])
    elif name == "half_written":
        out = _first_output(op, args).view(-1)
        half = out.numel() // 2
        out[half:].copy_(seen["found"].view(-1)[half:])
    elif name == "nan_element":
        _first_output(op, args).view(-1)[0] = float("nan")
    elif name == "head_perturbed":
        out = args[os.environ[OUTPUT_VAR]] if os.environ.get(OUTPUT_VAR) else _first_output(op, args)
        delta = float(os.environ[DELTA_VAR])       # no default: the audit always says which delta it ran
        _perturbed(out, os.environ.get(SHAPE_VAR, "head"), op).mul_(1 + delta)
    elif name == "input_clobber":
        flat = args[os.environ.get(INPUT_VAR) or OPS[op].by_role("input")[0].name].view(-1)
        if flat.dtype is torch.bool:
            flat[0] = ~flat[0]
        else:
            flat[0] += 1
    elif name == "row_dropped":
        out = _first_output(op, args)
        if out.dim() and out.shape[0] > 1:     # an off-by-one row index: the last row's result never lands
            out[-1].copy_(out[-2])
    elif name == "slot_minus_one_write":
        for c in ("k_cache", "v_cache"):
            cache = args[c]
            Hkv, D = cache.shape[-2:]
            for slot in args["slot_mapping"].tolist():
                if slot < 0:     # the raw offset an unguarded kernel computes: before the buffer
                    torch.as_strided(cache, (Hkv, D), (D, 1), cache.storage_offset() + slot * Hkv * D).fill_(1.0)
    elif name == "neighbor_slot_write":
        valid = _valid_rows(args)
        if valid:
            for c in ("k_cache", "v_cache"):
                rows = _slot_rows(args[c])
                slot = valid[0][1]
                neighbour = slot + 1 if slot + 1 < rows.shape[0] else slot - 1
                rows[neighbour].copy_(rows[slot])
    elif name == "skip_cache_write":
        if seen:
            for c, row in seen["rows"].items():
                _slot_rows(args[c])[seen["slot"]].copy_(row)
    else:
        raise ValueError(f"{MUTANT_VAR}={name!r}: no such mutation operator")



class LastLayerOnly(ReferenceKernel):
    """``decode_layers`` with a mutant's steps in its last layer only: a bug inside one layer,
    the layers before it (and their caches) as the reference computes them.

    The reference runs, per layer, ``project`` (``rope`` on q and k) and then one
    ``decode_step``, so the count of ``decode_step`` calls so far is the layer.
    """

    def __init__(self, mutant: ReferenceKernel) -> None:
        self.mutant = mutant
        self.layer = self.last = 0

    def _steps(self) -> Any:
        """The mutant in the last layer, the reference's own steps before it."""
        return self.mutant if self.layer == self.last else super()

    def rope(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        return self._steps().rope(x, cos, sin)

    def write(self, cache: Tensor, slots: Tensor, rows: Tensor) -> None:
        self._steps().write(cache, slots, rows)

    def decode_step(self, *args: Any) -> Tensor:
        try:
            return self._steps().decode_step(*args)
        finally:
            self.layer += 1

    def decode_layers(self, **args: Any) -> Tensor:
        self.layer, self.last = 0, int(args["num_layers"]) - 1
        return super().decode_layers(**args)


def _internal(name: str, op: str) -> Callable[..., Any]:
    """The reference kernel with operator ``name``'s bug, for ``op`` (in one layer of ``decode_layers``)."""
    mutant = _load(INTERNAL[name])()
    return getattr(LastLayerOnly(mutant) if op == "decode_layers" else mutant, op)


def mutate(op: str | None, args: dict[str, Any]) -> Any:
    """``op``: the builtin op the case runs, None for a spec op (its kernel is a full import path)."""
    name = os.environ[MUTANT_VAR]
    if name in INTERNAL:
        return _internal(name, op)(**args)
    kernel = _load(os.environ[KERNEL_VAR] if op is None else target(os.environ[KERNEL_VAR], op))
    seen = _before(name, op, args)
    returned = kernel(**args)
    _after(name, op, args, seen)
    return returned


(rope_kv_write, paged_decode_attention, fused_rope_decode_attention, prefill_attention,
 decode_layers) = for_every_op(mutate)


def __getattr__(name: str) -> Callable[..., Any]:
    """The wrapper for an op of another pack (the generic operators apply to every op): ``mutate``
    with the op's contract arguments as its keyword-only parameters."""
    if name not in OPS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    def kernel(**args: Any) -> Any:
        return mutate(name, args)
    kernel.__name__ = kernel.__qualname__ = name
    kernel.__signature__ = inspect.Signature(      # type: ignore[attr-defined]
        [inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY) for arg in OPS[name].arg_names])
    globals()[name] = kernel
    return kernel


def spec_op(**args: Any) -> Any:
    """A spec op's case (docs/specs.md): its own kernel, called ``fn(**tensors)``, with the operator
    around it; which output and input it acts on come in the environment."""
    return mutate(None, args)
