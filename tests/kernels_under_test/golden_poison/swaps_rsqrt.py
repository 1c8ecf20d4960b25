"""Swaps in its own ``torch.rsqrt`` when imported (slightly off), as a patching library might."""
import torch

from harness.kernels.reference import (fused_rope_decode_attention, paged_decode_attention,  # noqa: F401
                                       rope_kv_write)

_original = torch.rsqrt
torch.rsqrt = lambda x, *args, **kwargs: _original(x, *args, **kwargs) * 1.01
