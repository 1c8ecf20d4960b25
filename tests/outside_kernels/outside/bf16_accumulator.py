"""A bug that only long contexts show: attention's P·V sum kept in a bf16 accumulator, as a
hand-written tiled kernel does when its accumulator takes the cache's dtype.  Each tile of 16
keys is summed exactly (fp64), then added into the bf16 running sum, which rounds it (2^-9 of
the sum): the error grows with the number of tiles, from the store's own rounding at one tile
to about 1% of the output at 2048 keys, under a fixed atol of 3e-3 when attention spreads
(the output's RMS is then 0.02-0.05).  The softmax is exact; q/k/v rounded to bf16 as the
goldens read them."""
import torch

from outside._fp64 import F64, Fp64Ops

TILE = 16


class _Bf16Accumulator(Fp64Ops):
    def _attend(self, q, k, v, scale, visible=None):
        p, vh = self._weights(q, k, v, scale, visible)             # p [Hq, M, n], exact
        acc = torch.zeros(q.shape[0], p.shape[0], q.shape[2], dtype=torch.bfloat16, device=q.device)
        for j in range(0, k.shape[0], TILE):                        # a tile's sum added into bf16
            tile = torch.einsum("hmn,nhd->mhd", p[:, :, j:j + TILE], vh[j:j + TILE])
            acc = (acc.to(F64) + tile).to(torch.bfloat16)
        return acc.to(F64)


_ops = _Bf16Accumulator(round_qkv=True)
paged_decode_attention = _ops.paged_decode_attention
fused_rope_decode_attention = _ops.fused_rope_decode_attention
prefill_attention = _ops.prefill_attention
