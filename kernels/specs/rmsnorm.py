"""RMSNorm as a TensorSpec module (docs/specs.md): ``y = x / sqrt(mean(x^2) + eps) * weight``,
x and y bf16 rows of ``hidden``, the weight fp32, eps a scalar.  Written as a kernel library's
golden package writes it: its own TensorSpec and ScalarSpec, inputs drawn from torch's global
generator, the golden writing its output in place in plain torch.  It shares no code with the
kernels in ``rmsnorm_kernels.py``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class TensorSpec:
    name: str
    shape: list
    dtype: torch.dtype
    init_value: Any = None
    is_output: bool = False


@dataclass
class ScalarSpec:
    name: str
    dtype: str
    value: Any


def build_tensor_specs(rows: int = 8, hidden: int = 256, eps: float = 1e-6):
    return [
        TensorSpec("x", [rows, hidden], torch.bfloat16, init_value=lambda: torch.randn(rows, hidden) * 2),
        TensorSpec("weight", [hidden], torch.float32, init_value=lambda: 1 + 0.1 * torch.randn(hidden)),
        ScalarSpec("eps", "float", eps),
        TensorSpec("y", [rows, hidden], torch.bfloat16, is_output=True),
    ]


def golden_rmsnorm(tensors):
    x = tensors["x"].double()
    inv = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + tensors["eps"])
    tensors["y"][:] = (x * inv * tensors["weight"].double()).to(tensors["y"].dtype)
