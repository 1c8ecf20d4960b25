"""Reference kernels: plain torch on any device, with the numerics of a real device kernel.

bf16 (or fp16) storage, fp32 accumulation: every bf16 operand is upcast to fp32
before a dot product or matmul, and results are rounded to the stored dtype where
the contract stores bf16.  The stored dtype is the buffers' own (``k_cache.dtype``,
``hidden.dtype``): a case with ``dtype: fp16`` hands fp16 caches and outputs, and
every rounding here follows them.  Decode attention is split-K (flash-decoding): each split of a
few pages yields a partial (running max, sum, accumulator) in fp32 and the
partials are combined by log-sum-exp, vectorised over the batch with padding
and masks.

The module is built from small pieces so mutants can inject one bug in one
place:

- pure functions: ``qk_norm``, ``apply_rope``, ``qk_norm_rope``, ``write_cache``,
  ``attention_partial``, ``merge_partials``, ``finalize``, ``paged_partial``,
  ``decode_attention``, ``prefill_core``;
- ``ReferenceKernel``: the ops (methods named and parametrised exactly as the
  op contracts of ``harness.ops``) composed from overridable steps ``rope``,
  ``write``, ``decode_step`` and ``prefill_step``.  A mutant subclasses it and
  overrides one step;
- ``with_op_signature``: a callable carrying an op's exact signature around an
  arbitrary body (for mutants that wrap or replace a whole launch).

Nothing here touches a device at import time; temporaries are allocated on the
inputs' device.  Outputs and caches are written in place (they are views into
guard-banded buffers), never rebound.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, NamedTuple

import torch
from torch import Tensor

# ``dump(name, tensor)`` (docs/intermediates.md); the ops take it as ``dump=None``.
Dump = Callable[[str, Tensor], None]


def no_dump(name: str, tensor: Tensor) -> None:
    return None


def in_layer(dump: Dump, layer: int) -> Dump:
    """``dump`` with ``layers.{layer}.`` before every name (decode_layers)."""
    return lambda name, tensor: dump(f"layers.{layer}.{name}", tensor)


SPLIT_PAGES = 4        # pages per split-K chunk of decode and prefill attention
Q_TILE = 256           # prefill query rows per tile
LM_HEAD_ROWS = 16384   # vocab rows of lm_head upcast to fp32 at a time


# -- prologue: QK-norm and NeoX RoPE ------------------------------------------

def qk_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """Per-head RMS norm over the last axis: ``x * rsqrt(mean(x²) + eps) * w`` in fp32."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """NeoX rotate-half RoPE: ``x*cos + rotate_half(x)*sin`` (cos/sin broadcast over heads)."""
    return x * cos + rotate_half(x) * sin


def rope_rows(rope_cos: Tensor, rope_sin: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
    """The table rows at ``positions``, shaped ``[R, 1, D]`` to broadcast over heads."""
    idx = positions.long()
    return rope_cos[idx].float().unsqueeze(1), rope_sin[idx].float().unsqueeze(1)


def qk_norm_rope(x: Tensor, weight: Tensor, cos: Tensor, sin: Tensor, eps: float,
                 rope: Callable[[Tensor, Tensor, Tensor], Tensor] = apply_rope) -> Tensor:
    return rope(qk_norm(x, weight, eps), cos, sin)


def rms_norm(x: Tensor, eps: float) -> Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def bf16_matmul(x: Tensor, w: Tensor, stored: torch.dtype = torch.bfloat16) -> Tensor:
    """``bf16(x) @ w`` (``stored`` for bf16) with fp32 operands and accumulation; ``w`` is bf16 or already upcast."""
    return x.to(stored).float() @ w.float()


# -- paged KV cache -------------------------------------------------------------

def write_cache(cache: Tensor, slots: Tensor, rows: Tensor) -> None:
    """``cache[slot // P, slot % P] = rows`` for every ``slot >= 0``; slot < 0 means: do not write.

    ``cache`` is ``[N, P, Hkv, D]`` (one layer), ``rows`` ``[R, Hkv, D]``, ``slots`` ``[R]``.
    Index arithmetic on the given tensor, so any strides and storage offset are honoured.
    """
    P = cache.shape[1]
    slots = slots.long()
    keep = slots >= 0
    s = slots[keep]
    cache[s // P, s % P] = rows[keep].to(cache.dtype)


# -- attention: partials and their log-sum-exp combine ----------------------------

class Partial(NamedTuple):
    """Online-softmax state of one split, fp32: the partial result is ``acc / l``."""

    m: Tensor    # [B, Hq, M] max score seen (-inf where no position was seen)
    l: Tensor    # [B, Hq, M] sum of exp(score - m)
    acc: Tensor  # [B, Hq, M, D] sum of exp(score - m) * v


def _finite_or_zero(m: Tensor) -> Tensor:
    return torch.where(torch.isfinite(m), m, torch.zeros_like(m))


def attention_partial(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float) -> Partial:
    """One split: ``q [B,Hq,M,D]`` against ``k, v [B,S,Hkv,D]`` where ``mask [B,M,S]`` is True.

    GQA: query head ``h`` reads KV head ``h // (Hq/Hkv)``.  Scores ``scale * q·k``
    in fp32 from upcast operands.
    """
    B, Hq, M, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    G = Hq // Hkv
    qg = q.float().reshape(B, Hkv, G * M, D)
    scores = torch.matmul(qg, k.float().permute(0, 2, 3, 1)).mul_(scale).view(B, Hkv, G, M, S)
    scores = scores.masked_fill(~mask[:, None, None], float("-inf"))
    m = scores.amax(-1)
    p = torch.exp(scores - _finite_or_zero(m).unsqueeze(-1))
    l = p.sum(-1)
    acc = torch.matmul(p.view(B, Hkv, G * M, S), v.float().permute(0, 2, 1, 3))
    return Partial(m.reshape(B, Hq, M), l.reshape(B, Hq, M), acc.view(B, Hq, M, D))


def merge_partials(a: Partial | None, b: Partial) -> Partial:
    """Log-sum-exp combine of two splits (``a`` may be None: nothing seen yet)."""
    if a is None:
        return b
    m = torch.maximum(a.m, b.m)
    ref = _finite_or_zero(m)
    wa, wb = torch.exp(a.m - ref), torch.exp(b.m - ref)   # exp(-inf) = 0 for empty splits
    return Partial(m, a.l * wa + b.l * wb, a.acc * wa.unsqueeze(-1) + b.acc * wb.unsqueeze(-1))


def finalize(p: Partial) -> Tensor:
    """``acc / l`` in fp32; rows that saw no position come out 0, never NaN."""
    return p.acc / p.l.clamp_min(torch.finfo(p.l.dtype).tiny).unsqueeze(-1)


def paged_partial(q: Tensor, k_cache: Tensor, v_cache: Tensor, block_table: Tensor, limit: Tensor,
                  scale: float, split_pages: int = SPLIT_PAGES) -> Partial | None:
    """Attention of ``q [B,Hq,M,D]`` over cached positions ``p < limit[b, i]`` (``limit [B,M]``).

    Loops over splits of ``split_pages`` blocks, gathers them through the block
    table and merges the partials.  Blocks no row of a sequence reaches are
    never dereferenced (their entries may be -1): page 0 is gathered instead
    and every position of it is masked.
    """
    B, MB = block_table.shape
    P = k_cache.shape[1]
    device = q.device
    limit = limit.long()
    reach = limit.amax(1)                                      # positions sequence b reads
    partial = None
    for j0 in range(0, MB, split_pages):
        j1 = min(j0 + split_pages, MB)
        blocks = torch.arange(j0, j1, device=device)
        used = blocks[None, :] * P < reach[:, None]            # [B, nb]
        pages = torch.where(used, block_table[:, j0:j1].long(), torch.zeros_like(blocks))
        k = k_cache[pages].flatten(1, 2)                       # [B, nb*P, Hkv, D]
        v = v_cache[pages].flatten(1, 2)
        pos = torch.arange(j0 * P, j1 * P, device=device)
        mask = pos[None, None, :] < limit[:, :, None]          # [B, M, S]
        partial = merge_partials(partial, attention_partial(q, k, v, mask, scale))
    return partial


def decode_attention(query: Tensor, k_cache: Tensor, v_cache: Tensor, block_table: Tensor,
                     seq_lens: Tensor, scale: float, fresh_k: Tensor | None = None,
                     fresh_v: Tensor | None = None, split_pages: int = SPLIT_PAGES) -> Tensor:
    """Paged decode attention, fp32 ``[B, Hq, D]``.

    Without fresh k/v every position ``0..seq_len-1`` comes from the cache.  With
    ``fresh_k, fresh_v [B,Hkv,D]`` the current token (position ``seq_len-1``)
    uses them, as a fused kernel does from registers, and the cache supplies
    only ``0..seq_len-2``.
    """
    q = query.unsqueeze(2)                                      # [B, Hq, 1, D]
    cached = seq_lens.long() - (0 if fresh_k is None else 1)
    partial = paged_partial(q, k_cache, v_cache, block_table, cached[:, None], scale, split_pages)
    if fresh_k is not None:
        everyone = torch.ones(q.shape[0], 1, 1, dtype=torch.bool, device=q.device)
        partial = merge_partials(
            partial, attention_partial(q, fresh_k.unsqueeze(1), fresh_v.unsqueeze(1), everyone, scale))
    return finalize(partial).squeeze(2)


def prefill_core(q: Tensor, k_cache: Tensor, v_cache: Tensor, block_table: Tensor,
                 cu_seqlens: Tensor, context_lens: Tensor, scale: float,
                 fresh_k: Tensor | None = None, fresh_v: Tensor | None = None,
                 split_pages: int = SPLIT_PAGES, q_tile: int = Q_TILE) -> Tensor:
    """Chunked-prefill attention, fp32 ``[T, Hq, D]`` for packed ``q [T, Hq, D]``.

    Token ``i`` of sequence ``b`` sits at position ``context_lens[b] + i``.  With
    ``fresh_k, fresh_v [T,Hkv,D]`` it attends to the ``context_lens[b]`` cached
    positions plus, causally, the chunk's fresh k/v.  Without them every
    position up to its own comes from the cache (causal over the cache).
    Sequences are padded to the longest chunk and processed in query tiles.
    """
    T, Hq, D = q.shape
    device = q.device
    out = torch.zeros(T, Hq, D, dtype=torch.float32, device=device)
    if T == 0:
        return out
    cu = cu_seqlens.long()
    ctx = context_lens.long()
    lens = cu[1:] - cu[:-1]
    cmax = int(lens.max())
    idx = torch.arange(cmax, device=device)
    valid = idx[None, :] < lens[:, None]                          # [B, Cmax]
    tok = torch.where(valid, cu[:-1, None] + idx[None, :], torch.zeros_like(idx))
    q_pad = q[tok]                                                # [B, Cmax, Hq, D]
    if fresh_k is not None:
        k_pad, v_pad = fresh_k[tok], fresh_v[tok]
    key_tile = split_pages * k_cache.shape[1]
    for i0 in range(0, cmax, q_tile):
        i1 = min(i0 + q_tile, cmax)
        qi = idx[i0:i1]
        rows = valid[:, i0:i1]                                    # [B, M]
        qt = q_pad[:, i0:i1].permute(0, 2, 1, 3)                  # [B, Hq, M, D]
        limit = ctx[:, None] if fresh_k is not None else ctx[:, None] + qi[None, :] + 1
        limit = torch.where(rows, limit, torch.zeros_like(limit))  # padding rows read nothing
        partial = paged_partial(qt, k_cache, v_cache, block_table, limit, scale, split_pages)
        if fresh_k is not None:
            for c0 in range(0, i1, key_tile):                     # causal: no key past the tile's last row
                c1 = min(c0 + key_tile, i1)
                kj = idx[c0:c1]
                mask = (kj[None, None, :] <= qi[None, :, None]) & (kj[None, None, :] < lens[:, None, None])
                partial = merge_partials(
                    partial, attention_partial(qt, k_pad[:, c0:c1], v_pad[:, c0:c1], mask, scale))
        res = finalize(partial).permute(0, 2, 1, 3)               # [B, M, Hq, D]
        out[tok[:, i0:i1][rows]] = res[rows]
    return out


# -- the ops ---------------------------------------------------------------------

class ReferenceKernel:
    """Every op of the contract, composed from overridable steps.

    Mutants subclass this and override exactly one step:
    ``rope`` (the rotation), ``write`` (one cache write),
    ``decode_step`` (cache write + attention of one decode launch or layer),
    ``prefill_step`` (cache write + attention of a prefill chunk).
    """

    split_pages = SPLIT_PAGES
    q_tile = Q_TILE

    # steps ---------------------------------------------------------------
    def rope(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        return apply_rope(x, cos, sin)

    def write(self, cache: Tensor, slots: Tensor, rows: Tensor) -> None:
        write_cache(cache, slots, rows)

    def project(self, q: Tensor, k: Tensor, v: Tensor, q_norm_weight: Tensor, k_norm_weight: Tensor,
                rope_cos: Tensor, rope_sin: Tensor, positions: Tensor, eps: float,
                stored: torch.dtype = torch.bfloat16, dump: Dump = no_dump) -> tuple[Tensor, Tensor, Tensor]:
        """fp32 projections ``[R, H*D]`` → ``q [R,Hq,D]``, ``k, v [R,Hkv,D]`` in ``stored`` (QK-norm + RoPE on q, k).

        Dumps ``q_norm``, ``k_norm`` (fp32), then ``q_rope``, ``k_rope``, ``v`` as stored."""
        R, D = q.shape[0], q_norm_weight.shape[0]
        cos, sin = rope_rows(rope_cos, rope_sin, positions)
        q = qk_norm(q.float().reshape(R, -1, D), q_norm_weight, eps)
        k = qk_norm(k.float().reshape(R, -1, D), k_norm_weight, eps)
        dump("q_norm", q)
        dump("k_norm", k)
        q, k, v = self.rope(q, cos, sin).to(stored), self.rope(k, cos, sin).to(stored), v.float().reshape(R, -1, D).to(stored)
        dump("q_rope", q)
        dump("k_rope", k)
        dump("v", v)
        return q, k, v

    def decode_step(self, q: Tensor, k: Tensor, v: Tensor, k_cache: Tensor, v_cache: Tensor,
                    slot_mapping: Tensor, block_table: Tensor, seq_lens: Tensor, scale: float) -> Tensor:
        """Attention with the current token from the fresh k/v, and its cache write; fp32 ``[B,Hq,D]``.

        The context is read as the launch found it, so a warmup block table that
        maps the written row onto a context row does not feed the new row back.
        """
        out = decode_attention(q, k_cache, v_cache, block_table, seq_lens, scale,
                               fresh_k=k, fresh_v=v, split_pages=self.split_pages)
        self.write(k_cache, slot_mapping, k)
        self.write(v_cache, slot_mapping, v)
        return out

    def prefill_step(self, q: Tensor, k: Tensor, v: Tensor, k_cache: Tensor, v_cache: Tensor,
                     slot_mapping: Tensor, block_table: Tensor, cu_seqlens: Tensor,
                     context_lens: Tensor, scale: float) -> Tensor:
        out = prefill_core(q, k_cache, v_cache, block_table, cu_seqlens, context_lens, scale,
                           fresh_k=k, fresh_v=v, split_pages=self.split_pages, q_tile=self.q_tile)
        self.write(k_cache, slot_mapping, k)
        self.write(v_cache, slot_mapping, v)
        return out

    # ops (parameters in contract order) ---------------------------------------
    def rope_kv_write(self, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight,
                      rope_cos, rope_sin, positions, slot_mapping, eps, k_cache, v_cache, query, dump=None):
        q, k, v = self.project(q_proj * inv_rms, k_proj * inv_rms, v_proj * inv_rms,
                               q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions, eps, k_cache.dtype,
                               dump or no_dump)
        self.write(k_cache, slot_mapping, k)
        self.write(v_cache, slot_mapping, v)
        query.copy_(q)
        return query

    def paged_decode_attention(self, query, block_table, seq_lens, scale, k_cache, v_cache, out, dump=None):
        res = decode_attention(query, k_cache, v_cache, block_table, seq_lens, scale,
                               split_pages=self.split_pages)
        (dump or no_dump)("attn", res)
        out.copy_(res)
        return out

    def fused_rope_decode_attention(self, q_proj, k_proj, v_proj, inv_rms, q_norm_weight,
                                    k_norm_weight, rope_cos, rope_sin, positions, slot_mapping,
                                    block_table, seq_lens, scale, eps, k_cache, v_cache, out, query, dump=None):
        dump = dump or no_dump
        q, k, v = self.project(q_proj * inv_rms, k_proj * inv_rms, v_proj * inv_rms,
                               q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions, eps, k_cache.dtype, dump)
        query.copy_(q)
        attn = self.decode_step(q, k, v, k_cache, v_cache, slot_mapping, block_table, seq_lens, scale)
        dump("attn", attn)
        out.copy_(attn)
        return out

    def prefill_attention(self, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight,
                          rope_cos, rope_sin, positions, slot_mapping, cu_seqlens, context_lens,
                          block_table, scale, eps, k_cache, v_cache, out, dump=None):
        dump = dump or no_dump
        q, k, v = self.project(q_proj * inv_rms, k_proj * inv_rms, v_proj * inv_rms,
                               q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions, eps, k_cache.dtype, dump)
        attn = self.prefill_step(q, k, v, k_cache, v_cache, slot_mapping, block_table,
                                 cu_seqlens, context_lens, scale)
        dump("attn", attn)
        out.copy_(attn)
        return out

    def decode_layers(self, hidden, input_rms_weight, post_rms_weight, q_norm_weight, k_norm_weight,
                      final_norm_weight, wq, wk, wv, wo, w_gate, w_up, w_down, lm_head, rope_cos,
                      rope_sin, positions, slot_mapping, block_table, seq_lens, num_layers, scale, eps,
                      k_cache, v_cache, logits, next_hidden, dump=None):
        B = hidden.shape[0]
        dump = dump or no_dump
        # One generated layer applied num_layers times: upcast its weights once.
        wq, wk, wv, wo, w_gate, w_up, w_down = (
            w.float() for w in (wq, wk, wv, wo, w_gate, w_up, w_down))
        r = hidden.float()
        stored = k_cache.dtype
        for layer in range(num_layers):
            h = rms_norm(r, eps) * input_rms_weight
            here = in_layer(dump, layer)
            q, k, v = self.project(bf16_matmul(h, wq, stored), bf16_matmul(h, wk, stored),
                                   bf16_matmul(h, wv, stored), q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                                   positions, eps, stored, here)
            attn = self.decode_step(q, k, v, k_cache[layer], v_cache[layer], slot_mapping,
                                    block_table, seq_lens, scale)
            here("attn", attn)
            r = r + bf16_matmul(attn.reshape(B, -1), wo, stored)
            h = rms_norm(r, eps) * post_rms_weight
            hb = h.to(stored).float()
            r = r + bf16_matmul(torch.nn.functional.silu(hb @ w_gate) * (hb @ w_up), w_down, stored)
            here("hidden", r)
        final = rms_norm(r, eps) * final_norm_weight
        dump("final_norm", final)
        final = final.to(stored).float()
        for v0 in range(0, lm_head.shape[0], LM_HEAD_ROWS):       # bounded fp32 copy of lm_head
            rows = lm_head[v0:v0 + LM_HEAD_ROWS]
            logits[:, v0:v0 + rows.shape[0]] = final @ rows.float().T
        next_hidden.copy_(r)
        return logits


OP_NAMES = (
    "rope_kv_write",
    "paged_decode_attention",
    "fused_rope_decode_attention",
    "prefill_attention",
    "decode_layers",
)


def op_signature(op: str) -> inspect.Signature:
    """The contract signature of ``op``: its arguments by name, in contract order (without the
    optional ``dump``: a kernel made from it dumps nothing)."""
    sig = inspect.signature(getattr(_REFERENCE, op))
    return sig.replace(parameters=[p for p in sig.parameters.values() if p.name != "dump"])


def with_op_signature(op: str, body: Callable[[str, dict[str, Any]], Any]) -> Callable[..., Any]:
    """A kernel for ``op`` whose launch ``kernel(**args)`` runs ``body(op, args)``.

    It carries the op's exact signature, so a contract check by signature sees
    the same parameters as the reference kernel.
    """
    def kernel(**args: Any) -> Any:
        return body(op, args)

    kernel.__name__ = kernel.__qualname__ = op
    kernel.__signature__ = op_signature(op)   # type: ignore[attr-defined]
    return kernel


def for_every_op(body: Callable[[str, dict[str, Any]], Any]) -> tuple[Callable[..., Any], ...]:
    """``with_op_signature`` for every op, in ``OP_NAMES`` order (for mutants that ignore the op)."""
    return tuple(with_op_signature(op, body) for op in OP_NAMES)


_REFERENCE = ReferenceKernel()
rope_kv_write = _REFERENCE.rope_kv_write
paged_decode_attention = _REFERENCE.paged_decode_attention
fused_rope_decode_attention = _REFERENCE.fused_rope_decode_attention
prefill_attention = _REFERENCE.prefill_attention
decode_layers = _REFERENCE.decode_layers
