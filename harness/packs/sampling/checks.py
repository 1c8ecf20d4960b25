"""The sampling pack's own checks (``OpEntry.checks``; runs in the device worker; docs/sampling.md).

``topk_pairs`` judges each index by the value the kernel pairs with it, and trusts that value: a
token outside the golden's top k passes when it carries the golden's k-th value.  This check asks
what the comparator cannot: every index is a token (``0 <= index < V``), and the value paired with
each token is that token's logit, recomputed from the inputs in float64 under both readings of the
normed state (rounded to the stored dtype or not; docs/sampling.md, "Contract"), within the
indices' tolerance (the tie window).
"""
from __future__ import annotations

import torch

from harness.outcomes import Outcome
from harness.worker.findings import Finding

_LISTED = 4


def token_logits(case, ci, launched, goldens, metrics) -> list[Finding]:
    indices = launched.outputs["topk_indices"]
    values = launched.outputs["topk_values"]
    lm_head = ci.args["lm_head"].to(indices.device)
    V = lm_head.shape[0]
    idx = indices.long()
    outside = (idx < 0) | (idx >= V)
    found: list[Finding] = []
    if bool(outside.any()):
        rows = outside.any(-1).nonzero().flatten().tolist()
        r, j = (int(i) for i in outside.nonzero()[0])
        found.append(Finding(Outcome.MISMATCH, f"topk_indices: {int(outside.sum())} indices outside the vocab "
                             f"[0, {V}) in batch {rows[:_LISTED]}{' ...' if len(rows) > _LISTED else ''}; "
                             f"first at [{r}, {j}]: {int(idx[r, j])}"))
    hidden = ci.args["hidden"].to(indices.device)
    x = hidden.double()
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + ci.args["eps"])
    normed = normed * ci.args["final_norm_weight"].to(indices.device).double()
    rows_of = lm_head[idx.clamp(0, V - 1)].double()                     # [B, K, H]
    logit = {reading: torch.einsum("bh,bkh->bk", n, rows_of)
             for reading, n in (("rounded", normed.to(hidden.dtype).double()), ("exact", normed))}
    tol = case.tolerance_for("topk_indices")
    v = values.double()
    bound = tol.atol + tol.rtol * v.abs()
    near = torch.stack([(v - lg).abs() <= bound for lg in logit.values()]).any(0)
    wrong = ~near & ~outside & torch.isfinite(v)
    metrics.setdefault("checks", {})["token_logits"] = {"pairs": idx.numel(), "outside_vocab": int(outside.sum()),
                                                          "value_not_its_logit": int(wrong.sum())}
    if bool(wrong.any()):
        r, j = (int(i) for i in wrong.nonzero()[0])
        rows = wrong.any(-1).nonzero().flatten().tolist()
        found.append(Finding(Outcome.MISMATCH, f"topk_indices: {int(wrong.sum())} tokens paired with a value that "
                             f"is not their logit in batch {rows[:_LISTED]}{' ...' if len(rows) > _LISTED else ''}; "
                             f"first at [{r}, {j}]: token {int(idx[r, j])} carries {float(v[r, j]):.6g}, its logit "
                             f"is {float(logit['rounded'][r, j]):.6g}"))
    return found
