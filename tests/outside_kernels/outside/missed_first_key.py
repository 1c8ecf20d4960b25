"""A subtle bug: attention skips key position 0 whenever a query sees more than one key
(a loop over keys that starts at 1, or a masked-out first tile column).  fp64 otherwise.
The error shrinks as sequences grow (one key of n), so it tests how much a widened bound hides."""
import torch

from outside._fp64 import Fp64Ops


class _MissedFirstKey(Fp64Ops):
    def _attend(self, q, k, v, scale, visible=None):
        n = k.shape[0]
        if visible is None:
            visible = torch.full((q.shape[0],), n, device=k.device)
        if n > 1:
            # keep key 0 only for queries that see nothing else
            keep0 = visible <= 1
            q_all = super()._attend(q, k, v, scale, visible)
            q_rest = super()._attend(q, k[1:], v[1:], scale, (visible - 1).clamp(min=1))
            return torch.where(keep0[:, None, None], q_all, q_rest)
        return super()._attend(q, k, v, scale, visible)


_ops = _MissedFirstKey(round_qkv=False)
paged_decode_attention = _ops.paged_decode_attention
fused_rope_decode_attention = _ops.fused_rope_decode_attention
prefill_attention = _ops.prefill_attention
decode_layers = _ops.decode_layers
