"""The least a case's op must move and compute, from its inputs (runs in the device worker; docs/latency.md).

Bytes: every read-only input read once (a spec op's: every input its specs declare), the KV rows the sequences attend read once per layer
(not the whole cache: decode reads the pages of each sequence, and those dominate), the
outputs written once and the cache rows at valid slots written once per layer.  Flops: the two
attention products (``4·Hq·D`` per attended token and query row, per layer) and, for
``decode_layers``, ``2·B`` per weight element applied per layer plus the LM head.  Lower bounds
by construction: achieved GB/s over these is what the kernel must at least have moved.  A spec
op (docs/specs.md) moves its input specs' bytes read and its output specs' bytes written; its
flops are not counted (None).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.worker.case_inputs import CaseInputs

ATTENDING_OPS = ("paged_decode_attention", "fused_rope_decode_attention", "decode_layers", "prefill_attention")
_LAYER_WEIGHTS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")


@dataclass(frozen=True)
class Work:
    bytes: int
    flops: int | None           # None: an op whose arithmetic we do not count (the rope/cache write)


def _nbytes(t) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def _attended(ci: CaseInputs) -> tuple[int, int]:
    """(KV rows read per layer, query-row × key-row products per layer)."""
    if ci.op.name == "prefill_attention":
        cu = ci.args["cu_seqlens"].to("cpu", torch.int64).tolist()
        ctx = ci.args["context_lens"].to("cpu", torch.int64).tolist()
        rows = products = 0
        for i, c in enumerate(ctx):
            t = cu[i + 1] - cu[i]
            rows += c                                 # context_lens: the tokens in the cache, new ones included
            products += sum(c - t + j + 1 for j in range(t))
        return rows, products
    lens = ci.args["seq_lens"].to("cpu", torch.int64)
    total = int(lens.sum())
    return total, total


def work(ci: CaseInputs) -> Work:
    layers = int(ci.sizes.get("L", 1)) if ci.op.name == "decode_layers" else 1
    caches = [ci.args[a.name] for a in ci.op.caches]
    # one token's K (or V) across its heads; a spec op has no cache: its inputs and outputs are all it moves
    row_bytes = caches[0].shape[-2] * caches[0].shape[-1] * caches[0].element_size() if caches else 0
    read = sum(_nbytes(ci.args[a.name]) for a in ci.op.by_role("input"))
    written_rows = int((ci.slots >= 0).sum()) if ci.op.writes_cache else 0
    written = sum(_nbytes(torch.empty(shape, dtype=dtype, device="meta")) for shape, dtype in ci.outputs.values())
    written += 2 * written_rows * row_bytes * layers
    flops = None
    if ci.op.name in ATTENDING_OPS:
        rows, products = _attended(ci)
        read += 2 * rows * row_bytes * layers
        hq, d = ci.sizes["Hq"], ci.sizes["D"]
        flops = 4 * hq * d * products * layers
        if ci.op.name == "decode_layers":
            per_layer = sum(ci.args[n].numel() for n in _LAYER_WEIGHTS)
            flops += 2 * ci.sizes["B"] * (per_layer * layers + ci.args["lm_head"].numel())
    return Work(int(read + written), flops)
