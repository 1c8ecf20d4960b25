"""Classic fused-kernel bugs, each built on the reference with one thing wrong."""
from __future__ import annotations

import torch
from torch import Tensor

from harness.kernels.reference import ReferenceKernel, fused_rope_decode_attention as _fused, \
    paged_decode_attention as _paged


class _GptjRope(ReferenceKernel):
    """Wrong RoPE variant: GPT-J interleaved pairs (x0,x1),(x2,x3)... instead of NeoX halves."""

    def rope(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        half = x.shape[-1] // 2
        c, s = cos[..., :half], sin[..., :half]
        even, odd = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = even * c - odd * s
        out[..., 1::2] = odd * c + even * s
        return out


gptj_rope_kv_write = _GptjRope().rope_kv_write


def off_by_one_page(*, query, block_table, seq_lens, scale, k_cache, v_cache, out):
    """Reads the physical page after the right one (a page index computed off by one)."""
    shifted = torch.where(block_table >= 0, (block_table + 1) % k_cache.shape[0], block_table)
    return _paged(query=query, block_table=shifted, seq_lens=seq_lens, scale=scale,
                  k_cache=k_cache, v_cache=v_cache, out=out)


def half_written(*, query, block_table, seq_lens, scale, k_cache, v_cache, out):
    """Stores only the first half of the heads (a store loop with the wrong bound)."""
    tmp = torch.empty_like(out)
    _paged(query=query, block_table=block_table, seq_lens=seq_lens, scale=scale,
           k_cache=k_cache, v_cache=v_cache, out=tmp)
    half = out.shape[1] // 2
    out[:, :half] = tmp[:, :half]
    return out


def nan_head(**args):
    """One head comes out NaN (an uninitialised accumulator in one core)."""
    result = _fused(**args)
    args["out"][:, 1] = float("nan")
    return result


def wrong_signature(query, block_table, seq_lens, k_cache, v_cache, out):
    """Misses `scale`: the harness must refuse to launch it."""
    raise AssertionError("must never be called")


def returns_new_tensor(*, query, block_table, seq_lens, scale, k_cache, v_cache, out):
    """Computes into a fresh tensor and returns it: the caller's buffer stays poisoned."""
    fresh = torch.empty_like(out)
    _paged(query=query, block_table=block_table, seq_lens=seq_lens, scale=scale,
           k_cache=k_cache, v_cache=v_cache, out=fresh)
    return fresh


def npu_style_fault(**args):
    """Emulates torch-npu's report of a device fault (message text only; no NPU here)."""
    print("[ERROR] RUNTIME(12345,python):2026-11-30-12:00:00.000.000 [task_info.cc:1234] "
          "The aicore execution is abnormal", flush=True)
    raise RuntimeError("NPU function error: aclrtSynchronizeDevice, error code is 507018")
