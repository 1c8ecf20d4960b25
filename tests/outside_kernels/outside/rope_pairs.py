"""A bug: RoPE rotates adjacent pairs (x[2i], x[2i+1]) with frequency i, as GPT-J-style code
does, where the contract says NeoX halves (x[i], x[i + D/2]). fp64 otherwise."""
import torch

from outside._fp64 import Fp64Ops, exports


class _Pairs(Fp64Ops):
    @staticmethod
    def _rope(x, cos, sin):
        half = x.shape[-1] // 2
        c, s = cos[:, None, :half], sin[:, None, :half]          # one frequency per pair
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * c - odd * s, odd * c + even * s], dim=-1).flatten(-2)


globals().update(exports(_Pairs(round_qkv=False)))
