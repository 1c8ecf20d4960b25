"""A kernel library that registers its own CPU implementation of ``aten::rsqrt`` when imported, as
device libraries do for their device (here a fast approximation), and ships a correct kernel."""
from __future__ import annotations

import torch

from harness.kernels.reference import rope_kv_write as _reference

_LIB = torch.library.Library("aten", "IMPL")


def _approx_rsqrt(x):
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.aten.pow.Tensor_Scalar(x, -0.5) * 1.01


_LIB.impl("rsqrt", _approx_rsqrt, "CPU")


def rope_kv_write(**args):
    return _reference(**args)
