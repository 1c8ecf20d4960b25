"""Fused decode kernels that dump the way device dump tools do, some with one bug each.

Written from docs/contracts.md and docs/intermediates.md only: fp64 math, every output rounded
once to its storage dtype, attention through ``_paging.decode_with_fresh``.  Dumps go out
through every form of the ABI: the ``dump`` callable, ``.pt``, ``.npy`` and ``.bin`` + ``.json``
files in ``$HARNESS_DUMP_DIR``; a tool that knows nothing of heads writes q/k flattened
``[B, H*D]``, as device dump tools do.

- ``flat_dumps``: correct; q_norm and k_norm dumped flattened ``[B, H*D]`` (``.bin``);
- ``norm_factor``: q's RMS norm factor divides the mean square by D once more (q_norm is
  sqrt(D) times too large in every row: a pure scale error); q_norm dumped flattened;
- ``k_weight_on_q``: q normed with k_norm's weight (``.npy`` files);
- ``unscaled_v``: v_proj not scaled by inv_rms (the ``dump`` callable);
- ``k_late``: only K rotated at position + 1, q at its own position (``.pt`` files);
- ``norm_factor_cut``: ``norm_factor``, its q_norm dump cut short by one head (a tool's
  buffer boundary): a dump the ABI refuses, upstream of the first bad one.
"""
from __future__ import annotations

import json
import os

import numpy
import torch

from outside._paging import decode_with_fresh, write

F64 = torch.float64


def _rms_norm(x, w, eps, extra=1.0):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) / extra + eps) * w.to(F64)


def _neox(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos[:, None] + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin[:, None]


def _attend(q, keys, vals, scale):
    group = q.shape[1] // keys.shape[1]
    s = torch.einsum("hd,nhd->hn", q[0], keys.repeat_interleave(group, dim=1)) * scale
    p = torch.softmax(s, dim=-1)
    return torch.einsum("hn,nhd->hd", p, vals.repeat_interleave(group, dim=1))[None]


def _file_writer(fmt, flatten=(), cut=()):
    """What a dump tool does: each tensor to a file in $HARNESS_DUMP_DIR (nothing when unset)."""
    folder = os.environ.get("HARNESS_DUMP_DIR")

    def save(name, t):
        if not folder:
            return
        t = t.detach().to(torch.float32).contiguous()
        if name in flatten:
            t = t.reshape(t.shape[0], -1)            # the tool knows rows, not heads
        if name in cut:
            t = t[:, :-1]
        path = os.path.join(folder, name)
        if fmt == "pt":
            torch.save(t, path + ".pt")
        elif fmt == "npy":
            numpy.save(path + ".npy", t.numpy())
        else:
            with open(path + ".bin", "wb") as fh:
                fh.write(t.numpy().tobytes())
            with open(path + ".json", "w") as fh:
                json.dump({"dtype": "float32", "shape": list(t.shape)}, fh)
    return save


def _run(bug, save, *, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
         positions, slot_mapping, block_table, seq_lens, scale, eps, k_cache, v_cache, out, query):
    D = q_norm_weight.shape[0]
    B = q_proj.shape[0]
    s = inv_rms.to(F64)
    q = (q_proj.to(F64) * s).reshape(B, -1, D)
    k = (k_proj.to(F64) * s).reshape(B, -1, D)
    v = (v_proj.to(F64) * (1.0 if bug == "unscaled_v" else s)).reshape(B, -1, D)
    q_n = _rms_norm(q, k_norm_weight if bug == "k_weight_on_q" else q_norm_weight, eps,
                    extra=D if bug == "norm_factor" else 1.0)
    k_n = _rms_norm(k, k_norm_weight, eps)
    pos = positions.long()
    k_pos = (pos + 1).clamp(max=rope_cos.shape[0] - 1) if bug == "k_late" else pos
    q_r = _neox(q_n, rope_cos[pos].to(F64), rope_sin[pos].to(F64))
    k_r = _neox(k_n, rope_cos[k_pos].to(F64), rope_sin[k_pos].to(F64))
    bf = lambda t: t.to(torch.bfloat16).to(F64)       # what the cache and the stored query hold
    attn = decode_with_fresh(_attend, bf(q_r), bf(k_r), bf(v), block_table, seq_lens, k_cache, v_cache, scale)
    for name, t in (("q_norm", q_n), ("k_norm", k_n), ("q_rope", q_r), ("k_rope", k_r), ("v", v), ("attn", attn)):
        save(name, t)
    write(k_cache, slot_mapping, k_r)
    write(v_cache, slot_mapping, v)
    query.copy_(q_r)
    out.copy_(attn)


def flat_dumps(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions,
               slot_mapping, block_table, seq_lens, scale, eps, k_cache, v_cache, out, query):
    _run(None, _file_writer("bin", flatten=("q_norm", "k_norm")), **locals())


def norm_factor(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions,
                slot_mapping, block_table, seq_lens, scale, eps, k_cache, v_cache, out, query):
    _run("norm_factor", _file_writer("bin", flatten=("q_norm",)), **locals())


def k_weight_on_q(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions,
                  slot_mapping, block_table, seq_lens, scale, eps, k_cache, v_cache, out, query):
    _run("k_weight_on_q", _file_writer("npy"), **locals())


def unscaled_v(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions,
               slot_mapping, block_table, seq_lens, scale, eps, k_cache, v_cache, out, query, dump=None):
    args = {k: a for k, a in locals().items() if k != "dump"}
    _run("unscaled_v", dump or (lambda n, t: None), **args)


def k_late(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions,
           slot_mapping, block_table, seq_lens, scale, eps, k_cache, v_cache, out, query):
    _run("k_late", _file_writer("pt"), **locals())


def norm_factor_cut(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions,
                    slot_mapping, block_table, seq_lens, scale, eps, k_cache, v_cache, out, query):
    _run("norm_factor", _file_writer("npy", cut=("q_norm",)), **locals())
