"""Kernels of the sampling pack's ``lm_head_topk`` (docs/sampling.md): a straightforward torch
``reference``, two other correct kernels and the mutants the checks must catch.  Written from the
contract, sharing no code with the golden.

Every kernel writes ``topk_values [B, K]`` (float32, descending) and ``topk_indices [B, K]``
(int32) in place, and hands ``normed`` and ``logits`` to ``dump`` when given one
(docs/intermediates.md).
"""
from __future__ import annotations

import torch
from torch import Tensor


def _normed(hidden: Tensor, weight: Tensor, eps: float, *, norm: bool = True, round_to_stored: bool = True) -> Tensor:
    h = hidden.float()
    y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight.float() if norm else h
    return y.to(hidden.dtype).float() if round_to_stored else y     # the GEMM takes bf16 activations


def _run(hidden, final_norm_weight, lm_head, eps, topk_values, topk_indices, dump, *, norm=True,
         round_to_stored=True, logits_dtype=None, ties="any", index_shift=0):
    normed = _normed(hidden, final_norm_weight, eps, norm=norm, round_to_stored=round_to_stored)
    logits = normed @ lm_head.float().T
    if logits_dtype is not None:
        logits = logits.to(logits_dtype).float()
    if dump:
        dump("normed", normed)
        dump("logits", logits)
    k = topk_values.shape[-1]
    if ties == "any":
        values, indices = torch.topk(logits, k, dim=-1)
    else:       # "high first": among equal logits the higher token first (a stable sort of the reversed vocab)
        V = logits.shape[-1]
        values, rev = torch.sort(logits.flip(-1), dim=-1, descending=True, stable=True)
        values, indices = values[:, :k], V - 1 - rev[:, :k]
    topk_values.copy_(values)
    topk_indices.copy_((indices + index_shift).to(torch.int32))


def lm_head_topk(*, hidden, final_norm_weight, lm_head, eps, topk_values, topk_indices, dump=None):
    """The reference: RMSNorm in fp32, rounded to the stored dtype, fp32 GEMM, torch.topk."""
    _run(hidden, final_norm_weight, lm_head, eps, topk_values, topk_indices, dump)


def topk_fp32_normed(*, hidden, final_norm_weight, lm_head, eps, topk_values, topk_indices, dump=None):
    """Correct: keeps the normed state in fp32 into the GEMM (a fused kernel's registers). PASS."""
    _run(hidden, final_norm_weight, lm_head, eps, topk_values, topk_indices, dump, round_to_stored=False)


def topk_ascending_ties(*, hidden, final_norm_weight, lm_head, eps, topk_values, topk_indices, dump=None):
    """Correct: orders equal logits by descending token (the golden: ascending). PASS."""
    _run(hidden, final_norm_weight, lm_head, eps, topk_values, topk_indices, dump, ties="high first")


def topk_no_norm(*, hidden, final_norm_weight, lm_head, eps, topk_values, topk_indices, dump=None):
    """Bug: skips the final RMSNorm (and its weight). MISMATCH, first bad intermediate ``normed``."""
    _run(hidden, final_norm_weight, lm_head, eps, topk_values, topk_indices, dump, norm=False)


def topk_off_by_one(*, hidden, final_norm_weight, lm_head, eps, topk_values, topk_indices, dump=None):
    """Bug: every index one too high (a 1-based vocab, a skipped padding token). MISMATCH on the indices."""
    _run(hidden, final_norm_weight, lm_head, eps, topk_values, topk_indices, dump, index_shift=1)


def topk_bf16_logits(*, hidden, final_norm_weight, lm_head, eps, topk_values, topk_indices, dump=None):
    """Logits stored in bf16 before the top-k (a GEMM with a bf16 epilogue): values off by up to half
    a bf16 ulp. MISMATCH under the default fp32-compute preset, PASS under ``bf16-compute``."""
    _run(hidden, final_norm_weight, lm_head, eps, topk_values, topk_indices, dump, logits_dtype=torch.bfloat16)


def topk_borrowed_value(*, hidden, final_norm_weight, lm_head, eps, topk_values, topk_indices, dump=None):
    """Bug: the k-th place holds the row's *lowest* token with the k-th value borrowed (a kernel that
    pairs values and indices from different passes). ``topk_pairs`` alone passes it (the value ties
    the golden's k-th); the pack's ``token_logits`` check finds it. MISMATCH."""
    _run(hidden, final_norm_weight, lm_head, eps, topk_values, topk_indices, dump)
    normed = _normed(hidden, final_norm_weight, eps)
    lowest = (normed @ lm_head.float().T).argmin(-1)
    topk_indices[:, -1] = lowest.to(torch.int32)
