"""The ops in fp64 straight from the contract text, with the rounding choices as parameters.

``round_qkv``: round q, k, v to bf16 before attention (the goldens' reading) or not
(exact: each output rounded once, at the store).  ``kv_head``: which KV head query
head h reads (correct: ``h // group``); the wrong-GQA kernel passes ``h % Hkv``.
"""
from __future__ import annotations

import torch

from outside._paging import gather, split_heads, write

F64 = torch.float64


def correct_kv_head(h: int, num_heads: int, num_kv_heads: int) -> int:
    return h // (num_heads // num_kv_heads)


class Fp64Ops:
    def __init__(self, round_qkv: bool, kv_head=correct_kv_head, round_q: bool | None = None):
        self.round_qkv = round_qkv
        self.round_q = round_qkv if round_q is None else round_q     # q may differ: registers vs stored k/v
        self.kv_head = kv_head

    # -- pieces -----------------------------------------------------------------------
    def _r(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.bfloat16).to(F64) if self.round_qkv else x

    def _rq(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.bfloat16).to(F64) if self.round_q else x

    @staticmethod
    def _norm(x, eps):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    @staticmethod
    def _rope(x, cos, sin):
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos[:, None, :] + rot * sin[:, None, :]

    def _qk(self, x, w, cos, sin, eps):
        return self._rope(self._norm(x, eps) * w.to(F64), cos, sin)

    def _prologue(self, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight,
                  rope_cos, rope_sin, positions, eps):
        D = q_norm_weight.shape[0]
        s = inv_rms.to(F64)
        q = split_heads(q_proj.to(F64) * s, D)
        k = split_heads(k_proj.to(F64) * s, D)
        v = split_heads(v_proj.to(F64) * s, D)
        pos = positions.long()
        cos, sin = rope_cos[pos].to(F64), rope_sin[pos].to(F64)
        return self._qk(q, q_norm_weight, cos, sin, eps), self._qk(k, k_norm_weight, cos, sin, eps), v

    def _weights(self, q, k, v, scale, visible=None):
        """The probabilities p [Hq, M, n] and each query head's values [n, Hq, D]."""
        Hq, Hkv = q.shape[1], k.shape[1]
        idx = torch.tensor([self.kv_head(h, Hq, Hkv) for h in range(Hq)], device=k.device)
        kh, vh = k[:, idx], v[:, idx]                            # [n, Hq, D]
        s = torch.einsum("mhd,nhd->hmn", q, kh) * scale
        if visible is not None:
            s = s.masked_fill(torch.arange(k.shape[0], device=k.device)[None, :] >= visible[:, None], float("-inf"))
        return torch.softmax(s, dim=-1), vh

    def _attend(self, q, k, v, scale, visible=None):
        """q [M, Hq, D], k/v [n, Hkv, D]; visible[m]: leading keys query m sees."""
        p, vh = self._weights(q, k, v, scale, visible)
        return torch.einsum("hmn,nhd->mhd", p, vh)

    def _decode(self, q, k_new, v_new, k_cache, v_cache, block_table, seq_lens, scale):
        out = torch.empty_like(q)
        for b in range(q.shape[0]):
            n = int(seq_lens[b]) - (1 if k_new is not None else 0)
            k, v = gather(k_cache, block_table[b], n, F64), gather(v_cache, block_table[b], n, F64)
            if k_new is not None:
                k, v = torch.cat([k, k_new[b:b + 1]]), torch.cat([v, v_new[b:b + 1]])
            out[b] = self._attend(q[b:b + 1], k, v, scale)[0]
        return out

    # -- ops -----------------------------------------------------------------------------
    def rope_kv_write(self, *, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                      positions, slot_mapping, eps, k_cache, v_cache, query):
        q, k, v = self._prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight,
                                 rope_cos, rope_sin, positions, eps)
        query.copy_(q)
        write(k_cache, slot_mapping, k)
        write(v_cache, slot_mapping, v)

    def paged_decode_attention(self, *, query, block_table, seq_lens, scale, k_cache, v_cache, out):
        out.copy_(self._decode(query.to(F64), None, None, k_cache, v_cache, block_table, seq_lens, scale))

    def fused_rope_decode_attention(self, *, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight,
                                    rope_cos, rope_sin, positions, slot_mapping, block_table, seq_lens, scale,
                                    eps, k_cache, v_cache, out, query):
        q, k, v = self._prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight,
                                 rope_cos, rope_sin, positions, eps)
        o = self._decode(self._rq(q), self._r(k), self._r(v), k_cache, v_cache, block_table, seq_lens, scale)
        write(k_cache, slot_mapping, k)
        write(v_cache, slot_mapping, v)
        out.copy_(o)
        query.copy_(q)

    def prefill_attention(self, *, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos,
                          rope_sin, positions, slot_mapping, cu_seqlens, context_lens, block_table, scale, eps,
                          k_cache, v_cache, out):
        q, k, v = self._prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight,
                                 rope_cos, rope_sin, positions, eps)
        cu, ctx = cu_seqlens.tolist(), context_lens.tolist()
        result = torch.empty(q.shape, dtype=F64, device=q.device)
        for b, c in enumerate(ctx):
            lo, hi = cu[b], cu[b + 1]
            keys = torch.cat([gather(k_cache, block_table[b], c, F64), self._r(k[lo:hi])])
            vals = torch.cat([gather(v_cache, block_table[b], c, F64), self._r(v[lo:hi])])
            visible = c + torch.arange(hi - lo, device=q.device) + 1
            result[lo:hi] = self._attend(self._rq(q[lo:hi]), keys, vals, scale, visible)
        write(k_cache, slot_mapping, k)
        write(v_cache, slot_mapping, v)
        out.copy_(result)

    def decode_layers(self, *, hidden, input_rms_weight, post_rms_weight, q_norm_weight, k_norm_weight,
                      final_norm_weight, wq, wk, wv, wo, w_gate, w_up, w_down, lm_head, rope_cos, rope_sin,
                      positions, slot_mapping, block_table, seq_lens, num_layers, scale, eps, k_cache, v_cache,
                      logits, next_hidden):
        D = q_norm_weight.shape[0]
        W = {n: t.to(F64) for n, t in dict(wq=wq, wk=wk, wv=wv, wo=wo, w_gate=w_gate, w_up=w_up,
                                               w_down=w_down).items()}
        pos = positions.long()
        cos, sin = rope_cos[pos].to(F64), rope_sin[pos].to(F64)
        r = hidden.to(F64)
        for layer in range(num_layers):
            h = self._norm(r, eps) * input_rms_weight.to(F64)
            q = self._qk(split_heads(h @ W["wq"], D), q_norm_weight, cos, sin, eps)
            k = self._qk(split_heads(h @ W["wk"], D), k_norm_weight, cos, sin, eps)
            v = split_heads(h @ W["wv"], D)
            a = self._decode(self._rq(q), self._r(k), self._r(v), k_cache[layer], v_cache[layer],
                             block_table, seq_lens, scale)
            write(k_cache[layer], slot_mapping, k)
            write(v_cache[layer], slot_mapping, v)
            r = r + a.reshape(r.shape[0], -1) @ W["wo"]
            h = self._norm(r, eps) * post_rms_weight.to(F64)
            r = r + (torch.nn.functional.silu(h @ W["w_gate"]) * (h @ W["w_up"])) @ W["w_down"]
        x = self._norm(r, eps) * final_norm_weight.to(F64)
        logits.copy_(x @ lm_head.to(F64).T)
        next_hidden.copy_(r)


def exports(ops: Fp64Ops, names=("rope_kv_write", "paged_decode_attention", "fused_rope_decode_attention",
                                 "prefill_attention", "decode_layers")) -> dict:
    return {name: getattr(ops, name) for name in names}
