"""The reference ``fused_rope_decode_attention`` plus one write into an input each; every output is right."""
from __future__ import annotations

from harness.kernels.reference import fused_rope_decode_attention as _fused


def zeroes_q_proj(**args):
    """Clears its query projection after use (a scratch buffer reused in place)."""
    _fused(**args)
    args["q_proj"].zero_()


def zeroes_positions(**args):
    """Clears the positions after use (a "consumed" flag written into the caller's tensor)."""
    _fused(**args)
    args["positions"].zero_()


def normalises_q_proj(**args):
    """Scales each row of q_proj to unit norm in place before computing; QK-norm hides it from every output."""
    q = args["q_proj"]
    q.div_(q.norm(dim=-1, keepdim=True))
    _fused(**args)


def clobbers_rope_cos(**args):
    """Overwrites the cos table rows it read (a table cache updated in place)."""
    _fused(**args)
    args["rope_cos"][args["positions"].long()] = 0.0
