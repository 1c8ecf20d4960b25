"""The Qwen3 ops' RoPE-variant hint: one of the pack's ``Pack.hints`` finders, asked by
``harness.worker.hints.find_hint`` after the generic ones and the stray read
(``harness.packs.qwen3.stray_reads``) (docs/contracts.md, "Hints").

**A transform of the golden**: the golden recomputed on the case's inputs with one known RoPE
bug (``VARIANTS``) agrees with *every* output and written cache row of the case, while the
golden itself does not: ``looks like interleaved RoPE (GPT-J pairs)``. The variants are computed
by the goldens themselves on transformed inputs, so they share the goldens' math: RoPE skipped
is the golden with ``cos = 1, sin = 0``; positions shifted by k the golden with each position's
table rows taken from position + k; GPT-J pairs the golden on inputs whose head dims are
permuted so that NeoX halves line up with GPT-J pairs (QK-norm and attention are invariant
under that permutation), its query and k rows permuted back.

Not looked for in an audit's mutant runs, nor when the inputs are above ``MAX_INPUT_BYTES``
(each variant costs a golden).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from harness import goldens
from harness.case import Case
from harness.goldens import EXACT_SUFFIX
from harness.goldens.common import rope_kv_rows
from harness.worker.case_inputs import CaseInputs, on_host
from harness.worker.hints import AUDIT_MUTANT_VAR, Compared, agrees, agrees_golden

MAX_INPUT_BYTES = 256 << 20      # above this, no variant goldens are computed (the swap hint still is)
SHIFTS = (1, -1)
# Ops whose query and k rows are the rope_kv_write prologue of their own inputs: a variant is
# first tried on that prologue alone (no attention), and most variants end there.
_PROLOGUE_OPS = ("rope_kv_write", "fused_rope_decode_attention", "prefill_attention")

# Arguments whose last axis holds heads × head_dim (permuted per head for the GPT-J variant),
# and the per-dim ones (permuted whole); the caches' last axis is head_dim.
_PER_HEAD = ("q_proj", "k_proj", "wq", "wk")
_PER_DIM = ("q_norm_weight", "k_norm_weight")
_ROTATED = ("query", "k_cache")    # golden names holding rotated values (permuted back)


@dataclass(frozen=True)
class Variant:
    """One known bug as a transform of the golden's inputs (and back on its outputs)."""

    hint: str
    inputs: Callable[[dict[str, Any]], dict[str, Any] | None]    # None: not applicable to these inputs
    outputs: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] = lambda g: g


def _skipped(args: dict[str, Any]) -> dict[str, Any]:
    return {**args, "rope_cos": torch.ones_like(args["rope_cos"]), "rope_sin": torch.zeros_like(args["rope_sin"])}


def _shifted(k: int) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    def transform(args: dict[str, Any]) -> dict[str, Any] | None:
        pos = args["positions"].long()
        if not len(pos) or int(pos.min()) + k < 0 or int(pos.max()) + k >= args["rope_cos"].shape[0]:
            return None
        cos, sin = args["rope_cos"].clone(), args["rope_sin"].clone()
        cos[pos], sin[pos] = args["rope_cos"][pos + k], args["rope_sin"][pos + k]
        return {**args, "rope_cos": cos, "rope_sin": sin}
    return transform


def _pairs_as_halves(d: int) -> torch.Tensor:
    """The head-dim order that puts GPT-J pair (2i, 2i+1) at NeoX's (i, i + d/2)."""
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def _gptj_inputs(args: dict[str, Any]) -> dict[str, Any]:
    d = args["q_norm_weight"].shape[0]
    order = _pairs_as_halves(d)
    out = dict(args)
    for name in _PER_HEAD:
        if name in args:
            t = args[name]
            out[name] = t.unflatten(-1, (-1, d))[..., order].flatten(-2)
    for name in _PER_DIM:
        out[name] = args[name][order]
    out["k_cache"] = args["k_cache"][..., order]      # the context keys the rotated query meets
    return out


def _gptj_outputs(golden: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    back = torch.argsort(_pairs_as_halves(golden["query" if "query" in golden else "k_cache"].shape[-1]))
    return {name: t[..., back] if name.split("@")[0] in _ROTATED else t for name, t in golden.items()}


VARIANTS = (
    Variant("looks like interleaved RoPE (GPT-J pairs) instead of NeoX halves", _gptj_inputs, _gptj_outputs),
    Variant("looks like RoPE skipped", _skipped),
    *(Variant(f"looks like positions shifted by {k:+d}", _shifted(k)) for k in SHIFTS),
)


def rope_variants(case: Case, ci: CaseInputs, golden: dict[str, torch.Tensor], compared: dict[str, Compared],
                  mismatched: list[str], golden_dtype: torch.dtype) -> str:
    """``looks like ... (in out, k_cache)`` for each variant that explains every compared tensor, or ""."""
    if AUDIT_MUTANT_VAR in case.env or "rope_cos" not in ci.args or _nbytes(ci.args) > MAX_INPUT_BYTES:
        return ""
    args = on_host(ci).args
    matched = []
    for variant in VARIANTS:
        transformed = variant.inputs(args)
        if transformed is None or not _prologue_agrees(case, compared, variant, transformed, golden_dtype) \
                or not _first_layer_agrees(case, compared, variant, transformed, golden_dtype):
            continue
        other = _variant_golden(case.op, variant, transformed, golden, golden_dtype)
        if all(agrees(case, n, compared[n], other, n) for n in compared):
            # the evidence: the mismatched tensors the variant explains (it changes them); the hint
            # names them, so a variant that moves only k is not read as a bug of q
            about = [n for n in mismatched if not agrees_golden(case, n, compared[n], golden, other)]
            if about:
                matched.append(f"{variant.hint} (in {', '.join(about)})")
    return " or ".join(matched)


def _prologue_agrees(case: Case, compared: dict[str, Compared], variant: Variant, transformed: dict[str, Any],
                     golden_dtype: torch.dtype) -> bool:
    """The variant's query and k rows (the prologue alone) agree with the case's; True where the
    op has no such prologue or nothing of it is compared (the whole golden decides)."""
    if case.op not in _PROLOGUE_OPS:
        return True
    with torch.no_grad():
        q, k, _ = rope_kv_rows(transformed, golden_dtype)
    prologue = variant.outputs({"query": q, "k_cache": k})
    return all(agrees(case, n, compared[n], prologue, n) for n in ("query", "k_cache") if n in compared)


def _first_layer_agrees(case: Case, compared: dict[str, Compared], variant: Variant, transformed: dict[str, Any],
                        golden_dtype: torch.dtype) -> bool:
    """``decode_layers``: the variant's golden of the first layer alone agrees with the k rows the
    kernel wrote in its first layer (they depend on nothing after it); True otherwise."""
    if case.op != "decode_layers" or "k_cache" not in compared or int(transformed["num_layers"]) < 2:
        return True
    first = variant.outputs(goldens.compute(case.op, {**transformed, "num_layers": 1}, golden_dtype))
    c = compared["k_cache"]
    return agrees(case, "k_cache", Compared(c.actual[:1], c.rows_of, None), first, "k_cache")


def _variant_golden(op: str, variant: Variant, transformed: dict[str, Any], golden: dict[str, torch.Tensor],
                    golden_dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The golden of the variant; the case's own rounding spread stands in for the variant's
    (the same inputs, the same magnitudes), which halves the cost."""
    other = variant.outputs(goldens.compute(op, transformed, golden_dtype))
    for name in list(other):
        if name + EXACT_SUFFIX in golden:
            other[name + EXACT_SUFFIX] = other[name] + (golden[name + EXACT_SUFFIX] - golden[name]).to(other[name])
    return other


def _nbytes(args: dict[str, Any]) -> int:
    return sum(t.numel() * t.element_size() for t in args.values() if isinstance(t, torch.Tensor))
