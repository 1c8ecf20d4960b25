"""The Qwen3 ops' attention and matmul work (runs in the device worker; docs/latency.md): the
pack's ``Pack.work`` hook, asked by ``harness.worker.work.work`` after the generic bytes.

Bytes: the KV rows the sequences attend read once per layer (not the whole cache: decode reads
the pages of each sequence, and those dominate).  Flops: the two attention products
(``4·Hq·D`` per attended token and query row, per layer) and, for ``decode_layers``, ``2·B`` per
weight element applied per layer plus the LM head.  ``rope_kv_write`` computes nothing we count.
"""
from __future__ import annotations

import torch

from harness.worker.case_inputs import CaseInputs

ATTENDING_OPS = ("paged_decode_attention", "fused_rope_decode_attention", "decode_layers", "prefill_attention")
_LAYER_WEIGHTS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")


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


def work(ci: CaseInputs, row_bytes: int, layers: int) -> tuple[int, int | None]:
    """(bytes read beyond the inputs, flops): the K and V rows attended and the products taken."""
    if ci.op.name not in ATTENDING_OPS:
        return 0, None
    rows, products = _attended(ci)
    read = 2 * rows * row_bytes * layers
    hq, d = ci.sizes["Hq"], ci.sizes["D"]
    flops = 4 * hq * d * products * layers
    if ci.op.name == "decode_layers":
        per_layer = sum(ci.args[n].numel() for n in _LAYER_WEIGHTS)
        flops += 2 * ci.sizes["B"] * (per_layer * layers + ci.args["lm_head"].numel())
    return read, flops
