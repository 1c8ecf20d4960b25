"""The Qwen3 pack's part of ``harness audit`` (docs/audit.md): the mutation operators only its
ops can show (``Pack.operators``), the boundary conditions a matrix of them should exercise
(``Pack.conditions``) and the rows one launch writes (``Pack.rows``).

The operators run in the device worker (``harness.kernels.mutants.operators``); here they are
data.  Torch-free.
"""
from __future__ import annotations

from collections.abc import Callable

from harness.audit.coverage import has_negative_slot, known_lengths, shortest_length
from harness.audit.operators import Operator
from harness.case import Case

_ALL = ("rope_kv_write", "paged_decode_attention", "fused_rope_decode_attention", "prefill_attention",
        "decode_layers")
_WRITERS = ("rope_kv_write", "fused_rope_decode_attention", "prefill_attention", "decode_layers")
_ROPE = ("rope_kv_write", "fused_rope_decode_attention", "prefill_attention", "decode_layers")
_ATTENTION = _ALL[1:]

OPERATORS: tuple[Operator, ...] = (
    # first of all: before the core's generic ones (harness.audit.operators.GENERIC)
    Operator("out_is_query", "the attention output filled with the rotated query",
             ("paged_decode_attention", "fused_rope_decode_attention"), perturbs_value=True, position=0),
    Operator("slot_minus_one_write", "k/v written for a row whose slot < 0, before the cache (raw offset)",
             _WRITERS, needs_negative_slot=True),
    Operator("neighbor_slot_write", "a valid row's k/v also written to the next slot", _WRITERS,
             needs_valid_slot=True),
    Operator("skip_cache_write", "one valid row's cache write dropped", _WRITERS, needs_valid_slot=True),
    Operator("stale_current_token", "attention reads the current token's old cache row", _ROPE[1:],
             internal=True),
    Operator("off_by_one_page", "one sequence's last cached page read from the page after it", _ROPE[1:],
             internal=True),
    Operator("one_key_too_few", "attention skips each sequence's last cached key", _ATTENTION, internal=True),
    Operator("one_key_too_many", "attention reads one position past each sequence's cached keys", _ATTENTION,
             internal=True),
    Operator("unmasked_tail", "attention reads each sequence's last cached page whole, past its length",
             _ATTENTION, internal=True),
    Operator("block_too_many", "attention reads one block past each sequence's last (a -1 entry as an index)",
             _ATTENTION, internal=True),
    Operator("gptj_rope", "GPT-J (interleaved) RoPE instead of NeoX rotate-half", _ROPE, internal=True),
    Operator("skip_rope", "no RoPE on q and k", _ROPE, internal=True),
)


def rows(case: Case) -> int | None:
    """Rows one launch writes (``T`` of prefill), None when it depends on drawn lengths."""
    if case.op != "prefill_attention":
        return case.geometry.batch
    lengths = known_lengths(case)
    if not lengths or case.seq_lens.kind == "multi_block":
        return None
    per_row = list(lengths) * (case.geometry.batch // len(lengths) or 1)
    return sum(min(case.chunk_size or n, n) for n in per_row[: case.geometry.batch])


def _residues(case: Case) -> set[int]:
    P = case.geometry.page_size
    return {n % P for n in known_lengths(case)}


def _mod(r: Callable[[int], int]) -> Callable[[Case], bool]:
    return lambda c: r(c.geometry.page_size) % c.geometry.page_size in _residues(c)


CONDITIONS: tuple[tuple[str, str, Callable[[Case], bool]], ...] = (
    ("slot_negative", "rows with slot < 0", has_negative_slot),
    ("warmup_const_minus_one", "serving warmup: slot_mode const(-1)",
     lambda c: c.slot_mode.kind == "const" and int(c.slot_mode.value) == -1),
    ("page_boundary_0", "a sequence ending on a page boundary (seq_len mod P = 0)", _mod(lambda p: 0)),
    ("page_boundary_1", "a sequence one token into a page (seq_len mod P = 1)", _mod(lambda p: 1)),
    ("page_boundary_p_minus_1", "a sequence one token short of a page (seq_len mod P = P-1)",
     _mod(lambda p: p - 1)),
    ("seq_len_1", "a sequence of length 1", lambda c: 1 in known_lengths(c)),
    ("largest_position", "a sequence filling its block table (position max_pos - 1)",
     lambda c: c.max_pos in known_lengths(c)),
    ("partial_last_page", "a sequence whose last page is partly filled",
     lambda c: any(n % c.geometry.page_size for n in known_lengths(c))),
    ("random_page_order", "pages in a random order (slot_mode random)", lambda c: c.slot_mode.kind == "random"),
    ("gqa_group", "GQA: more than one query head per kv head", lambda c: c.geometry.group > 1),
    ("several_layers", "decode_layers with more than one layer",
     lambda c: c.op == "decode_layers" and c.geometry.num_layers > 1),
    ("chunked_prefill_with_context", "prefill of a chunk after context already in the cache",
     lambda c: c.op == "prefill_attention" and c.chunk_size is not None
     and shortest_length(c) > c.chunk_size),
)
