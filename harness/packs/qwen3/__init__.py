"""The Qwen3 pack: QK-norm + RoPE + paged KV-cache writes + paged attention, and a whole decoder
stack, as Qwen3-14B runs them (docs/contracts.md).  The first pack built on the op pack API
(docs/architecture.md, "Op packs"): everything the harness knows of these five ops is declared here
or in the modules this one names.

Its goldens are ``harness.goldens`` (goldens/), its kernels ``harness.kernels`` (kernels/): the
folders of the repository they have always had.
"""
from __future__ import annotations

from harness.case import Geometry
from harness.packs.api import OpEntry, Pack
from harness.packs.qwen3 import audit, intermediates, memory
from harness.packs.qwen3.contracts import LAYOUTS, OPS
from harness.packs.qwen3.tolerances import PRECISION_TOLERANCES, TOLERANCES

_ALL = tuple(OPS)
_CACHE_WRITERS = ("rope_kv_write", "fused_rope_decode_attention", "prefill_attention", "decode_layers")
_ATTENTION_AFTER_WRITE = ("fused_rope_decode_attention", "prefill_attention", "decode_layers")


def _table(module: str, ops) -> dict[str, str]:
    return {op: f"{module}:{op}" for op in ops}


# name -> {op -> "module:callable"}
KERNELS: dict[str, dict[str, str]] = {
    "reference": _table("harness.kernels.reference", _ALL),
    "triton": _table("harness.kernels.triton_kernels", ("rope_kv_write", "paged_decode_attention")),
    # Written to libraries' public APIs and bound with harness.adapters (docs/adapters.md).
    "torch-sdpa": _table("harness.kernels.adapted.torch_sdpa", (
        "rope_kv_write", "paged_decode_attention", "fused_rope_decode_attention", "prefill_attention")),
    "torch-flex": _table("harness.kernels.adapted.torch_flex", (
        "paged_decode_attention", "fused_rope_decode_attention", "prefill_attention")),
    "transformers-qwen3": _table("harness.kernels.adapted.transformers_qwen3", _ALL),
    # Mutants: each reproduces a bug class seen in real fused kernels.
    "unguarded_slot_write": _table("harness.kernels.mutants.unguarded_slot_write", _CACHE_WRITERS),
    "returns_query": _table("harness.kernels.mutants.returns_query", ("fused_rope_decode_attention",)),
    "skip_rope": _table("harness.kernels.mutants.skip_rope", _CACHE_WRITERS),
    "stale_kv": _table("harness.kernels.mutants.stale_kv", _ATTENTION_AFTER_WRITE),
    "racy_head": _table("harness.kernels.mutants.racy_head", _ALL),
    "reduction_order": _table("harness.kernels.mutants.reduction_order", _ALL),
    "hang": _table("harness.kernels.mutants.hang", _ALL),
    "segfault": _table("harness.kernels.mutants.segfault", _ALL),
    # Real faults, for proving the run survives them (issue: classification).
    "native_hang": _table("harness.kernels.mutants.native_hang", _ALL),
    "abort": _table("harness.kernels.mutants.abort", _ALL),
    "oom": _table("harness.kernels.mutants.oom", _ALL),
    "npu_fault": _table("harness.kernels.mutants.npu_fault", _ALL),
}

_B_WRITTEN = "`slot_mapping[b] ≥ 0`"

# Qwen3-14B as served: 40 query heads over 8 KV heads of 128, pages of 128 tokens
PRESETS = {
    "qwen3-14b": Geometry(
        batch=16, num_heads=40, num_kv_heads=8, head_dim=128, page_size=128,
        hidden=5120, intermediate=17408, vocab=151936, num_layers=40,
        rope_theta=1_000_000.0, eps=1e-6,
    ),
}


def _op(name: str, **fields) -> OpEntry:
    return OpEntry(OPS[name], LAYOUTS[name], f"harness.goldens.{name}", TOLERANCES.get(name, {}),
                   PRECISION_TOLERANCES.get(name, {}), **fields)


PACK = Pack(
    name="qwen3",
    ops={
        "rope_kv_write": _op("rope_kv_write", intermediates=intermediates.of("rope_kv_write"),
                             write_condition=_B_WRITTEN),
        "paged_decode_attention": _op("paged_decode_attention",
                                      intermediates=intermediates.of("paged_decode_attention")),
        "fused_rope_decode_attention": _op("fused_rope_decode_attention",
                                           intermediates=intermediates.of("fused_rope_decode_attention"),
                                           write_condition=_B_WRITTEN),
        "prefill_attention": _op("prefill_attention", intermediates=intermediates.of("prefill_attention"),
                                 rows="T", row_noun="token", rows_by_sequence=True, case_keys=("chunk_size",),
                                 write_condition="`slot_mapping[t] ≥ 0`"),
        # every matmul takes bf16 activations against an fp32 golden, so each layer's intermediates
        # carry that rounding as next_hidden does: they take its tolerance
        "decode_layers": _op("decode_layers", intermediates=intermediates.decode_layers,
                             intermediate_tolerance="next_hidden", write_condition=_B_WRITTEN, layered=True),
    },
    kernels=KERNELS,
    inputs="harness.packs.qwen3.inputs",
    presets=PRESETS,
    work="harness.packs.qwen3.work:work",
    hints=("harness.packs.qwen3.stray_reads:find", "harness.packs.qwen3.hints:rope_variants"),
    memory_plan=memory.plan,
    operators=audit.OPERATORS,
    conditions=audit.CONDITIONS,
    rows=audit.rows,
)
