"""What a wholesale mismatch looks like: a hint, never a verdict (runs in the device worker).

A kernel with a known bug fails every head of every row, and the comparison alone says only
"99% of out bad". Three kinds of evidence say more, each checked the way the case's own
checks compare (the case's tolerances, the rounding spread, only the rows a check reads):

- **a stray read** (when no other output's golden explains it): an attention output beyond
  every value row the case may read, which only a read of a canary row explains
  (``harness.worker.stray_reads``): ``reads outside the sequence``, or ``reads cache rows before
  writing them`` when the canary row read is one the launch writes;

- **another output's golden**: a mismatched output (or written cache rows) agrees with the
  golden of another output of the same shape: ``out holds what query should``;
- **a transform of the golden**: the golden recomputed on the case's inputs with one known
  RoPE bug (``VARIANTS``) agrees with *every* output and written cache row of the case, while
  the golden itself does not: ``looks like interleaved RoPE (GPT-J pairs)``. The variants are
  computed by the goldens themselves on transformed inputs, so they share the goldens' math:
  RoPE skipped is the golden with ``cos = 1, sin = 0``; positions shifted by k the golden
  with each position's table rows taken from position + k; GPT-J pairs the golden on inputs
  whose head dims are permuted so that NeoX halves line up with GPT-J pairs (QK-norm and
  attention are invariant under that permutation), its query and k rows permuted back.

Spec ops (docs/specs.md) get the evidence that holds whatever the op computes: another output's
golden, and **an input passed through**: a mismatched output that agrees with one of the
case's inputs of the same shape (``y holds input x as passed in``: stored from the wrong
buffer), which also applies to the builtin ops.  The stray read and the RoPE variants are
the builtin ops' own (their caches, their RoPE tables) and are never looked for on a spec op,
whatever its tensors are called; a spec op's outputs judged by a ``compare:`` comparator, or
not floating, are left out (their comparison is not ``ratio_allclose``).

Only ``MISMATCH`` cases are looked at, and the goldens of the other two only outside an audit's
mutant runs and when the inputs are small enough (``MAX_INPUT_BYTES``) that they cost little
(the stray read costs no golden: it is named in every ``MISMATCH``). A hint that cannot be computed is
no hint: the case's verdict never depends on this module.
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
from harness.outcomes import Outcome
from harness.worker import stray_reads
from harness.worker.checks import rounding_slack, stored_dtype
from harness.worker.findings import Findings
from harness.worker.case_inputs import CaseInputs, on_host
from harness.worker.launch import Launched
from harness.worker.ratio_allclose import ratio_allclose

# An audit's mutant run (its case env names the operator, harness/audit/operators.py): the audit
# reads only its outcomes, so a hint there would cost goldens and say nothing to anyone.
AUDIT_MUTANT_VAR = "HARNESS_MUTANT"
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


def find_hint(case: Case, ci: CaseInputs, golden: dict[str, torch.Tensor], launched: Launched,
              found: Findings, golden_dtype: torch.dtype) -> str:
    """The hint for a ``MISMATCH`` case, or "" (any other outcome, or nothing the evidence shows)."""
    if found.outcome is not Outcome.MISMATCH:
        return ""
    compared = _compared(case, ci, launched)
    mismatched = [n for n in compared if found.metrics.get("compare", {}).get(n, {}).get("outcome") == "MISMATCH"]
    if not mismatched:
        return ""
    # n failed against its own golden, so agreeing with another's means the two goldens differ
    swaps = [f"{n} holds what {other} should" for n in mismatched for other in compared
             if other != n and _same_kind(compared[n], compared[other]) and _agrees(case, n, compared[n], golden, other)]
    if swaps:
        return "; ".join(swaps)
    # n failed against its golden yet equals an input: the kernel stored that input where n belongs
    passed = [f"{n} holds input {name} as passed in" for n in mismatched for name in _inputs_like(ci, compared[n])
              if AUDIT_MUTANT_VAR not in case.env and _passes(case, n, compared[n].actual, ci.args[name].to(compared[n].actual.device), None,
                         compared[n].rows)]
    if passed:
        return "; ".join(passed)
    if case.spec is not None:      # what follows reads the builtin ops' caches and RoPE tables
        return ""
    # beyond every readable value, and not another output's golden: a canary row was read
    strays = [h for h in (_stray_read(ci, n, compared[n]) for n in mismatched) if h]
    if strays or AUDIT_MUTANT_VAR in case.env:
        return "; ".join(strays)
    if "rope_cos" not in ci.args or _nbytes(ci.args) > MAX_INPUT_BYTES:
        return ""
    args = on_host(ci).args
    matched = []
    for variant in VARIANTS:
        transformed = variant.inputs(args)
        if transformed is None or not _prologue_agrees(case, compared, variant, transformed, golden_dtype) \
                or not _first_layer_agrees(case, compared, variant, transformed, golden_dtype):
            continue
        other = _variant_golden(case.op, variant, transformed, golden, golden_dtype)
        if all(_agrees(case, n, compared[n], other, n) for n in compared):
            # the evidence: the mismatched tensors the variant explains (it changes them); the hint
            # names them, so a variant that moves only k is not read as a bug of q
            about = [n for n in mismatched if not _agrees_golden(case, n, compared[n], golden, other)]
            if about:
                matched.append(f"{variant.hint} (in {', '.join(about)})")
    return " or ".join(matched)


def _stray_read(ci: CaseInputs, name: str, c: "_Compared") -> str:
    rows = c.rows if c.rows is not None else torch.ones(c.actual.shape[0], dtype=torch.bool)
    compared = rows.to(c.actual.device).view(-1, *([1] * (c.actual.dim() - 1))).expand(c.actual.shape)
    return stray_reads.hint(ci, name, c.actual, compared)


def _prologue_agrees(case: Case, compared: dict[str, "_Compared"], variant: Variant, transformed: dict[str, Any],
                     golden_dtype: torch.dtype) -> bool:
    """The variant's query and k rows (the prologue alone) agree with the case's; True where the
    op has no such prologue or nothing of it is compared (the whole golden decides)."""
    if case.op not in _PROLOGUE_OPS:
        return True
    with torch.no_grad():
        q, k, _ = rope_kv_rows(transformed, golden_dtype)
    prologue = variant.outputs({"query": q, "k_cache": k})
    return all(_agrees(case, n, compared[n], prologue, n) for n in ("query", "k_cache") if n in compared)


def _first_layer_agrees(case: Case, compared: dict[str, "_Compared"], variant: Variant, transformed: dict[str, Any],
                        golden_dtype: torch.dtype) -> bool:
    """``decode_layers``: the variant's golden of the first layer alone agrees with the k rows the
    kernel wrote in its first layer (they depend on nothing after it); True otherwise."""
    if case.op != "decode_layers" or "k_cache" not in compared or int(transformed["num_layers"]) < 2:
        return True
    first = variant.outputs(goldens.compute(case.op, {**transformed, "num_layers": 1}, golden_dtype))
    c = compared["k_cache"]
    return _agrees(case, "k_cache", _Compared(c.actual[:1], c.rows_of, None), first, "k_cache")


def _variant_golden(op: str, variant: Variant, transformed: dict[str, Any], golden: dict[str, torch.Tensor],
                    golden_dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The golden of the variant; the case's own rounding spread stands in for the variant's
    (the same inputs, the same magnitudes), which halves the cost."""
    other = variant.outputs(goldens.compute(op, transformed, golden_dtype))
    for name in list(other):
        if name + EXACT_SUFFIX in golden:
            other[name + EXACT_SUFFIX] = other[name] + (golden[name + EXACT_SUFFIX] - golden[name]).to(other[name])
    return other


@dataclass(frozen=True)
class _Compared:
    """An output, or a cache's written rows, as the checks read it: ``actual`` and how to take
    the matching rows of a golden (``rows_of``), and the row mask for slot-masked outputs."""

    actual: torch.Tensor
    rows_of: Callable[[torch.Tensor], torch.Tensor]
    rows: torch.Tensor | None


def _inputs_like(ci: CaseInputs, c: "_Compared") -> list[str]:
    """The case's floating input tensors of ``c``'s shape."""
    return [a.name for a in ci.op.by_role("input") if isinstance(ci.args.get(a.name), torch.Tensor)
            and ci.args[a.name].is_floating_point() and ci.args[a.name].shape == c.actual.shape]


def _compared(case: Case, ci: CaseInputs, launched: Launched) -> dict[str, _Compared]:
    out = {}
    for arg in ci.op.outputs:
        if case.spec is not None and (arg.name in case.spec.get("compare", {})
                                      or not launched.outputs[arg.name].is_floating_point()):
            continue     # a comparator's or an exact comparison: ratio_allclose is not how it is judged
        rows = ci.valid_rows if arg.name in ci.op.slot_masked_outputs else None
        out[arg.name] = _Compared(launched.outputs[arg.name], lambda g: g, rows)
    valid = ci.slots >= 0
    if ci.op.writes_cache and bool(valid.any()):
        for arg in ci.op.caches:
            cache = launched.caches[arg.name]
            layered = cache.dim() == 5
            flat = cache.reshape(cache.shape[0] if layered else 1, -1, *cache.shape[-2:])
            actual = flat[:, ci.slots[valid].to(cache.device)]
            out[arg.name] = _Compared(actual, lambda g, layered=layered: (g if layered else g.unsqueeze(0))[:, valid],
                                      None)
    return out


def _same_kind(a: _Compared, b: _Compared) -> bool:
    return a.actual.shape == b.actual.shape


def _agrees(case: Case, name: str, c: _Compared, golden: dict[str, torch.Tensor], golden_name: str) -> bool:
    """``c`` within the tolerance of ``name`` of the golden ``golden_name`` (with its rounding spread)."""
    if golden_name not in golden:
        return False
    expected = c.rows_of(golden[golden_name].to(c.actual.device))
    exact = golden.get(golden_name + EXACT_SUFFIX)
    exact = None if exact is None else c.rows_of(exact.to(c.actual.device))
    return _passes(case, name, c.actual, expected, exact, c.rows)


def _agrees_golden(case: Case, name: str, c: _Compared, golden: dict[str, torch.Tensor],
                   variant: dict[str, torch.Tensor]) -> bool:
    """The variant's golden of ``name`` within tolerance of the golden: the variant changes nothing there."""
    device = c.actual.device
    as_stored = c.rows_of(variant[name].to(device)).to(c.actual.dtype)
    exact = golden.get(name + EXACT_SUFFIX)
    return _passes(case, name, as_stored, c.rows_of(golden[name].to(device)),
                   None if exact is None else c.rows_of(exact.to(device)), c.rows)


def _passes(case: Case, name: str, actual: torch.Tensor, expected: torch.Tensor, exact: torch.Tensor | None,
            rows: torch.Tensor | None) -> bool:
    tol = case.tolerance_for(name)     # the checks' own bound (harness/worker/checks.py), or a hint could disagree
    return ratio_allclose(actual, expected, atol=tol.atol, rtol=tol.rtol, max_error_ratio=tol.max_error_ratio,
                          name=name, rows=rows, slack=rounding_slack(actual, expected, exact, tol),
                          stored=stored_dtype(actual), atol_rms=tol.atol_rms).passed


def _nbytes(args: dict[str, Any]) -> int:
    return sum(t.numel() * t.element_size() for t in args.values() if isinstance(t, torch.Tensor))
