"""Triton kernels for two ops of the contract (docs/contracts.md): ``rope_kv_write`` and ``paged_decode_attention``.

The math lives in the ``@triton.jit`` functions; the host functions only read
shapes and strides off the tensors they are given and launch.  Every tensor is
addressed through its own strides from its own data pointer, so the guard-banded
views the harness passes (caches and outputs with a storage offset) are written
in place and nowhere else.

- ``rope_kv_write``: one program per (row, head) over ``Hq + Hkv`` heads.  A
  q head normalises, rotates and stores its row of ``query``; a KV head does the
  same for k, scales v, and stores both at the row's slot, masked where
  ``slot < 0``.  The head is split into its two rotate-half halves, so
  ``rotate_half`` is a sign and a swap, never a gather.
- ``paged_decode_attention``: flash-decoding, one program per (batch, query
  head), reading KV head ``h // (Hq/Hkv)``.  The program walks the sequence in
  tiles of ``min(P, KV_BLOCK)`` positions (a tile never straddles a page),
  looks each tile's page up in the block table and keeps an fp32 online softmax.
  Only the blocks holding a position below ``seq_len`` are looked up, so unused
  (``-1``) block-table entries are never read, let alone dereferenced.

Head dim and page size are compile-time constants and must be powers of two.
The kernels run on a CUDA device (the ``cuda`` extra installs triton) or on CPU
tensors under ``TRITON_INTERPRET=1``, set before triton is first imported
(``triton.jit`` decides at decoration time, triton's own ``tl.sum`` included).
Casts to bf16 round to nearest even in integer ops, so both give the same bits.
"""
from __future__ import annotations

import contextlib

import torch

INSTALL_HINT = "the triton kernels need the `cuda` extra: pip install -e .[cuda]"

try:
    import triton
    import triton.language as tl
except ImportError as exc:          # the worker reports an ImportError as BUILD_ERROR
    raise ImportError(f"{INSTALL_HINT} ({exc})", name=exc.name) from exc

KV_BLOCK = 64      # cache positions per attention tile (capped at the page size)


# -- device code -------------------------------------------------------------------

@triton.jit
def _to_bf16(x):
    """fp32 → bf16 rounded to nearest even, spelt out in integer ops.

    The same bits on every backend: the interpreter's float cast truncates,
    which would put a third of the elements one ulp off the contract's rounding.
    """
    bits = x.to(tl.uint32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    rounded = tl.where(x != x, (bits >> 16) | 0x40, rounded)  # noqa: PLR0124  NaN stays a (quiet) NaN
    return rounded.to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _norm_rope(x_ptr, stride_x, w_ptr, cos_ptr, sin_ptr, stride_t, row_scale, eps,
               D: tl.constexpr):
    """One head ``x [D]`` (fp32): ``x*row_scale``, QK-norm with ``w``, NeoX RoPE; returns both halves."""
    HALF: tl.constexpr = D // 2
    i = tl.arange(0, HALF)
    x1 = tl.load(x_ptr + i * stride_x) * row_scale
    x2 = tl.load(x_ptr + (i + HALF) * stride_x) * row_scale
    r = tl.rsqrt((tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / D + eps)
    y1 = x1 * r * tl.load(w_ptr + i)
    y2 = x2 * r * tl.load(w_ptr + i + HALF)
    cos1 = tl.load(cos_ptr + i * stride_t)
    cos2 = tl.load(cos_ptr + (i + HALF) * stride_t)
    sin1 = tl.load(sin_ptr + i * stride_t)
    sin2 = tl.load(sin_ptr + (i + HALF) * stride_t)
    # x*cos + rotate_half(x)*sin with rotate_half(x) = [-x2, x1]
    return y1 * cos1 - y2 * sin1, y2 * cos2 + y1 * sin2


@triton.jit
def _rope_kv_write_kernel(
    q_ptr, k_ptr, v_ptr, stride_qr, stride_qc, stride_kr, stride_kc, stride_vr, stride_vc,
    inv_rms_ptr, stride_ir,
    qw_ptr, kw_ptr,
    cos_ptr, sin_ptr, stride_cos, stride_cos_d, stride_sin, stride_sin_d,
    pos_ptr, stride_pos, slot_ptr, stride_slot, eps,
    kc_ptr, stride_kn, stride_kp, stride_kh, stride_kd,
    vc_ptr, stride_vn, stride_vp, stride_vh, stride_vd,
    out_ptr, stride_ob, stride_oh, stride_od,
    HQ: tl.constexpr, D: tl.constexpr, P: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    HALF: tl.constexpr = D // 2
    i = tl.arange(0, HALF)
    row_scale = tl.load(inv_rms_ptr + row * stride_ir)
    pos = tl.load(pos_ptr + row * stride_pos).to(tl.int64)
    cos_row = cos_ptr + pos * stride_cos
    sin_row = sin_ptr + pos * stride_sin
    if head < HQ:
        x_ptr = q_ptr + row * stride_qr + head * D * stride_qc
        o1, o2 = _norm_rope(x_ptr, stride_qc, qw_ptr, cos_row, sin_row, stride_cos_d, row_scale, eps, D)
        dst = out_ptr + row * stride_ob + head * stride_oh
        tl.store(dst + i * stride_od, _to_bf16(o1))
        tl.store(dst + (i + HALF) * stride_od, _to_bf16(o2))
    else:
        kvh = head - HQ
        slot = tl.load(slot_ptr + row * stride_slot)
        keep = (i * 0 + slot) >= 0                         # slot < 0: do not write (a vector mask)
        safe = tl.maximum(slot, 0).to(tl.int64)            # never form an address from a negative slot
        page = safe // P
        offset = safe % P
        x_ptr = k_ptr + row * stride_kr + kvh * D * stride_kc
        k1, k2 = _norm_rope(x_ptr, stride_kc, kw_ptr, cos_row, sin_row, stride_cos_d, row_scale, eps, D)
        kdst = kc_ptr + page * stride_kn + offset * stride_kp + kvh * stride_kh
        tl.store(kdst + i * stride_kd, _to_bf16(k1), mask=keep)
        tl.store(kdst + (i + HALF) * stride_kd, _to_bf16(k2), mask=keep)
        d = tl.arange(0, D)
        v = tl.load(v_ptr + row * stride_vr + (kvh * D + d) * stride_vc) * row_scale
        vdst = vc_ptr + page * stride_vn + offset * stride_vp + kvh * stride_vh
        tl.store(vdst + d * stride_vd, _to_bf16(v), mask=(d * 0 + slot) >= 0)


@triton.jit
def _paged_decode_kernel(
    q_ptr, stride_qb, stride_qh, stride_qd,
    bt_ptr, stride_btb, stride_btj,
    len_ptr, stride_len, scale,
    kc_ptr, stride_kn, stride_kp, stride_kh, stride_kd,
    vc_ptr, stride_vn, stride_vp, stride_vh, stride_vd,
    out_ptr, stride_ob, stride_oh, stride_od,
    GROUP: tl.constexpr, D: tl.constexpr, P: tl.constexpr, BLOCK_N: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    kvh = h // GROUP
    d = tl.arange(0, D)
    n = tl.arange(0, BLOCK_N)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + d * stride_qd).to(tl.float32)
    seq_len = tl.load(len_ptr + b * stride_len)
    m_i = tl.full([1], float("-inf"), tl.float32)           # running max of the scores
    l_i = tl.zeros([1], tl.float32)                         # running sum of exp(score - m_i)
    acc = tl.zeros([D], tl.float32)                         # running sum of exp(score - m_i) * v
    for start in range(0, seq_len, BLOCK_N):
        # BLOCK_N divides P: the tile sits in block start // P, which holds position start < seq_len.
        page = tl.load(bt_ptr + b * stride_btb + (start // P) * stride_btj).to(tl.int64)
        offset = start % P + n
        valid = start + n < seq_len
        k_rows = kc_ptr + page * stride_kn + offset * stride_kp + kvh * stride_kh
        k = tl.load(k_rows[:, None] + d[None, :] * stride_kd, mask=valid[:, None], other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1) * scale
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))          # finite: the tile holds position start
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new)
        v_rows = vc_ptr + page * stride_vn + offset * stride_vp + kvh * stride_vh
        v = tl.load(v_rows[:, None] + d[None, :] * stride_vd, mask=valid[:, None], other=0.0).to(tl.float32)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m_i = m_new
    # A sequence of length 0 saw nothing: its output is 0, never NaN.
    res = tl.where(l_i > 0, acc / tl.maximum(l_i, 1e-30), 0.0)
    tl.store(out_ptr + b * stride_ob + h * stride_oh + d * stride_od, _to_bf16(res))


# -- host glue -------------------------------------------------------------------------

def _power_of_two(name: str, value: int) -> int:
    if value < 1 or value & (value - 1):
        raise ValueError(f"the triton kernels need {name} to be a power of two, got {value}")
    return value


def _on_device(t: torch.Tensor) -> contextlib.AbstractContextManager:
    """Make ``t``'s device current for the launch (triton launches on the current CUDA device)."""
    if t.device.type == "cuda":
        return torch.cuda.device(t.device)
    return contextlib.nullcontext()


def rope_kv_write(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                  positions, slot_mapping, eps, k_cache, v_cache, query):
    B, Hq, D = query.shape
    _, P, Hkv, _ = k_cache.shape
    _power_of_two("head_dim", D)
    if D < 2:
        raise ValueError(f"the triton kernels need an even head_dim for rotate-half RoPE, got {D}")
    if B == 0:
        return query
    with _on_device(query):
        _rope_kv_write_kernel[(B, Hq + Hkv)](
            q_proj, k_proj, v_proj, *q_proj.stride(), *k_proj.stride(), *v_proj.stride(),
            inv_rms, inv_rms.stride(0),
            q_norm_weight, k_norm_weight,
            rope_cos, rope_sin, *rope_cos.stride(), *rope_sin.stride(),
            positions, positions.stride(0), slot_mapping, slot_mapping.stride(0), float(eps),
            k_cache, *k_cache.stride(),
            v_cache, *v_cache.stride(),
            query, *query.stride(),
            HQ=Hq, D=D, P=P,
        )
    return query


def paged_decode_attention(*, query, block_table, seq_lens, scale, k_cache, v_cache, out):
    B, Hq, D = query.shape
    _, P, Hkv, _ = k_cache.shape
    _power_of_two("head_dim", D)
    _power_of_two("page_size", P)
    if Hq % Hkv:
        raise ValueError(f"query heads ({Hq}) must be a multiple of KV heads ({Hkv})")
    if B == 0:
        return out
    with _on_device(query):
        _paged_decode_kernel[(B, Hq)](
            query, *query.stride(),
            block_table, *block_table.stride(),
            seq_lens, seq_lens.stride(0), float(scale),
            k_cache, *k_cache.stride(),
            v_cache, *v_cache.stride(),
            out, *out.stride(),
            GROUP=Hq // Hkv, D=D, P=P, BLOCK_N=min(P, _power_of_two("KV_BLOCK", KV_BLOCK)),
        )
    return out
