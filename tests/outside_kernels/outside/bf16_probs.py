"""FlashAttention-style bf16: q/k/v rounded to bf16 and the softmax probabilities rounded to
bf16 before the P·V product (fp64 accumulation otherwise).  A rounding choice real GPU
kernels make; not one the goldens model (they round q/k/v only)."""
import torch

from outside._fp64 import F64, Fp64Ops


class _Bf16Probs(Fp64Ops):
    def _attend(self, q, k, v, scale, visible=None):
        Hq, Hkv = q.shape[1], k.shape[1]
        idx = torch.tensor([self.kv_head(h, Hq, Hkv) for h in range(Hq)], device=k.device)
        kh, vh = k[:, idx], v[:, idx]
        s = torch.einsum("mhd,nhd->hmn", q, kh) * scale
        if visible is not None:
            s = s.masked_fill(torch.arange(k.shape[0], device=k.device)[None, :] >= visible[:, None], float("-inf"))
        m = s.amax(-1, keepdim=True)
        p = torch.exp(s - m)
        denom = p.sum(-1, keepdim=True)                       # the row sum from unrounded p, as FA does
        p = p.to(torch.bfloat16).to(F64)
        return torch.einsum("hmn,nhd->mhd", p, vh) / denom.permute(1, 0, 2)


_ops = _Bf16Probs(round_qkv=True)
paged_decode_attention = _ops.paged_decode_attention
fused_rope_decode_attention = _ops.fused_rope_decode_attention
prefill_attention = _ops.prefill_attention
decode_layers = _ops.decode_layers
