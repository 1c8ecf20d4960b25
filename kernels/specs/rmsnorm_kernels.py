"""Kernels for the RMSNorm spec op (``rmsnorm.py``), called as ``fn(**tensors)``: ``rmsnorm`` is
correct (fp32 arithmetic, one rounding to bf16); ``rmsnorm_last_row_unscaled`` has one bug: it
leaves the weight out of the last row."""
from __future__ import annotations

import torch


def rmsnorm(x, weight, eps, y):
    xf = x.float()
    y.copy_(xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight)


def rmsnorm_last_row_unscaled(x, weight, eps, y):
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    y.copy_(normed * weight)
    y[-1].copy_(normed[-1])
