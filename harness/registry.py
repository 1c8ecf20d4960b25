"""Builtin kernels by name: the implementations under test that ship with the harness.

A registry of import paths, pure data: the front end validates kernel names
without importing torch; the device worker imports the callable.
A case names a builtin here, or any ``package.module:callable`` on the
worker's PYTHONPATH.  ``--kernel`` also takes a module, ``package.module``,
that holds one function per op, named like the op.
"""
from __future__ import annotations

from harness.ops import OPS

ALL_OPS = tuple(OPS)
_CACHE_WRITERS = ("rope_kv_write", "fused_rope_decode_attention", "prefill_attention", "decode_layers")
_ATTENTION_AFTER_WRITE = ("fused_rope_decode_attention", "prefill_attention", "decode_layers")


def _table(module: str, ops) -> dict[str, str]:
    return {op: f"{module}:{op}" for op in ops}


# name -> {op -> "module:callable"}
BUILTINS: dict[str, dict[str, str]] = {
    "reference": _table("harness.kernels.reference", ALL_OPS),
    "triton": _table("harness.kernels.triton_kernels", ("rope_kv_write", "paged_decode_attention")),
    # Written to libraries' public APIs and bound with harness.adapters (docs/adapters.md).
    "torch-sdpa": _table("harness.kernels.adapted.torch_sdpa", (
        "rope_kv_write", "paged_decode_attention", "fused_rope_decode_attention", "prefill_attention")),
    "torch-flex": _table("harness.kernels.adapted.torch_flex", (
        "paged_decode_attention", "fused_rope_decode_attention", "prefill_attention")),
    "transformers-qwen3": _table("harness.kernels.adapted.transformers_qwen3", ALL_OPS),
    # Mutants: each reproduces a bug class seen in real fused kernels.
    "unguarded_slot_write": _table("harness.kernels.mutants.unguarded_slot_write", _CACHE_WRITERS),
    "returns_query": _table("harness.kernels.mutants.returns_query", ("fused_rope_decode_attention",)),
    "skip_rope": _table("harness.kernels.mutants.skip_rope", _CACHE_WRITERS),
    "stale_kv": _table("harness.kernels.mutants.stale_kv", _ATTENTION_AFTER_WRITE),
    "racy_head": _table("harness.kernels.mutants.racy_head", ALL_OPS),
    "reduction_order": _table("harness.kernels.mutants.reduction_order", ALL_OPS),
    "hang": _table("harness.kernels.mutants.hang", ALL_OPS),
    "segfault": _table("harness.kernels.mutants.segfault", ALL_OPS),
    # Real faults, for proving the run survives them (issue: classification).
    "native_hang": _table("harness.kernels.mutants.native_hang", ALL_OPS),
    "abort": _table("harness.kernels.mutants.abort", ALL_OPS),
    "oom": _table("harness.kernels.mutants.oom", ALL_OPS),
    "npu_fault": _table("harness.kernels.mutants.npu_fault", ALL_OPS),
}


def is_import_path(kernel: str) -> bool:
    module, sep, attr = kernel.partition(":")
    return bool(sep) and is_module_path(module) and attr.isidentifier()


def is_module_path(kernel: str) -> bool:
    """``package.module``: a kernel module with one function per op, named like the op."""
    return all(part.isidentifier() for part in kernel.split("."))


def is_kernel_name(kernel: str) -> bool:
    """What ``--kernel`` takes: a builtin name, ``package.module:callable`` or ``package.module``."""
    return kernel in BUILTINS or is_import_path(kernel) or is_module_path(kernel)


def target(kernel: str, op: str) -> str:
    """The ``module:callable`` to import for ``kernel`` on ``op``; KeyError if it has none.

    A builtin maps each op it implements; ``module:callable`` is that callable for
    every op; a module (``--kernel`` only) gives its function named like the op.
    """
    if kernel in BUILTINS:
        return BUILTINS[kernel][op]
    if is_import_path(kernel):
        return kernel
    if is_module_path(kernel):
        return f"{kernel}:{op}"
    raise KeyError(kernel)
