"""Naming a stray read from the evidence in an attention output: one of the Qwen3 pack's hint
finders (``Pack.hints``, asked by ``harness.worker.hints.find_hint`` before the RoPE variants).

The generator fills every cache row a case must not read with a hot canary
(``harness.packs.qwen3.inputs``): a key any query scores far above every real key, and a value
row whose every element has 16 <= |x| < 48, while every value a sequence may read (its
context rows, and the fresh ``v_proj·inv_rms`` of the fused ops, scaled or not) stays below 6.7.  An
attention output is a convex combination of the value rows it reads, so an output row
beyond every readable value is evidence, and one that equals a canary value row (a
dominant stray key) names the row that was read; a row the launch itself writes, read before
the kernel wrote it, is named as that (a read-before-write, not a read past the sequence).  decode_layers keeps a cold canary; no
hint there.  Found only when no other output's golden explains the mismatch (the generic finders
come first); it costs no golden, so an audit's mutant runs get it too.
"""
from __future__ import annotations

import torch

from harness.worker.case_inputs import CaseInputs
from harness.packs.qwen3.inputs import CANARY_VALUE_MIN

_LISTED = 2                 # output rows examined and named
_MATCH = 1 / 32             # |out - canary row| / |canary row|: a bf16 rounding or two of one dominant row


def find(case, ci: CaseInputs, golden, compared: dict, mismatched: list[str], golden_dtype) -> str:
    """The finder: each mismatched output beyond every readable value, "; "-joined, or ""."""
    return "; ".join(h for h in (_stray_read(ci, n, compared[n]) for n in mismatched) if h)


def _stray_read(ci: CaseInputs, name: str, c) -> str:
    """``c``: the output as ``harness.worker.hints`` compares it (``actual``, row mask ``rows``)."""
    rows = c.rows if c.rows is not None else torch.ones(c.actual.shape[0], dtype=torch.bool)
    compared = rows.to(c.actual.device).view(-1, *([1] * (c.actual.dim() - 1))).expand(c.actual.shape)
    return hint(ci, name, c.actual, compared)


def hint(ci: CaseInputs, name: str, actual: torch.Tensor, compared: torch.Tensor) -> str:
    """``reads outside the sequence: ...`` or ``""``; ``compared``: the compared elements of ``actual``."""
    if name != "out" or ci.op.name == "decode_layers" or "v_cache" not in ci.args:
        return ""
    values = ci.args["v_cache"]                                # the launch's pre-launch copy
    P, Hkv, D = values.shape[-3:]
    rows = values.reshape(-1, Hkv, D).float()
    canary = (rows.abs() >= CANARY_VALUE_MIN).all(-1)         # [slots, Hkv]
    readable = torch.where(canary[..., None], 0.0, rows.abs()).amax()
    if "v_proj" in ci.args:
        # the fresh row as the contract scales it, and as a kernel that forgets inv_rms (or applies it
        # twice) leaves it: a magnitude the kernel's own arithmetic reaches is no evidence of a read
        v, s = ci.args["v_proj"].float(), ci.args["inv_rms"].float()
        fresh = torch.stack([(v * s).abs().max(), v.abs().max(), (v * s * s).abs().max()]).max()
        readable = torch.maximum(readable, fresh.to(readable.device))
    bound = float(readable) * (1 + 2 ** -7) + 1e-3            # one bf16 rounding of the largest readable value
    out = actual.float().to(rows.device)
    beyond = (out.abs() > bound) & compared.to(rows.device)
    rows_hit = beyond.flatten(2).any(-1)                       # [row, head], on the device
    count = int(rows_hit.sum())
    if not count:
        return ""
    hit = rows_hit.nonzero()[:_LISTED].tolist()                # only what is named comes back
    G = out.shape[1] // Hkv
    # A row this launch writes holds its canary until the kernel writes it: reading it first
    # is a read-before-write (stale k/v), not a read past the sequence.
    writes = set(ci.slots[ci.slots >= 0].tolist()) if ci.op.writes_cache else set()
    named, early = [], 0
    for r, h in hit:
        candidates = canary[:, h // G].nonzero().flatten()
        if candidates.numel():
            diff = (rows[candidates, h // G] - out[r, h]).abs().amax(-1)
            best = int(diff.argmin())
            slot = int(candidates[best])
            if float(diff[best]) <= _MATCH * float(rows[slot, h // G].abs().max()):
                own = slot in writes
                early += own
                named.append(f"out[{r}, {h}] equals the canary value row of slot {slot} "
                             f"(page {slot // P}, offset {slot % P}){', which this launch writes' if own else ''}")
                continue
        named.append(f"out[{r}, {h}] reaches |x| = {float(out[r, h].abs().max()):.3g}")
    more = f" (+{count - len(hit)} more rows)" if count > len(hit) else ""
    what = "reads cache rows before writing them" if early == len(named) else "reads outside the sequence"
    return (f"{what}: {'; '.join(named)}{more}, beyond every value row it may read "
            f"(|x| <= {float(readable):.3g}; rows it must not read hold canary values, |x| >= {CANARY_VALUE_MIN:g})")
