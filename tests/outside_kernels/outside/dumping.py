"""Kernels that dump their intermediates through the harness's ABI (docs/intermediates.md).

Written from the op contracts and the dump ABI only: fp64 math, each output rounded once to
its storage dtype, a softmax written out by hand.  ``fused_rope_decode_attention`` and
``decode_layers`` are correct and dump every intermediate through ``dump``;
``files_fused_rope_decode_attention`` writes them into ``$HARNESS_DUMP_DIR`` instead (one
``.pt``, ``.npy`` or ``.bin`` + ``.json`` each).  Every other function has one bug, in one
place, named by the function: ``bug_<intermediate>`` is wrong from that intermediate on;
``bug_store`` computes everything right and stores ``out`` wrong; ``bad_dump_*`` dumps
something the ABI refuses; ``partial_bug_attn`` dumps only ``v`` and ``attn``.
"""
from __future__ import annotations

import json
import os

import numpy
import torch

from outside._paging import decode_with_fresh, write

F64 = torch.float64


def _norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w.to(F64)


def _rope(x, cos, sin, sign=1.0):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None] + sign * rotated * sin[:, None]


def _softmax_attend(q, keys, vals, scale):
    """q [1, Hq, D], keys/vals [n, Hkv, D] -> [1, Hq, D]; query head h reads KV head h // (Hq / Hkv)."""
    group = q.shape[1] // keys.shape[1]
    k = keys.repeat_interleave(group, dim=1)             # [n, Hq, D]
    v = vals.repeat_interleave(group, dim=1)
    s = torch.einsum("hd,nhd->hn", q[0], k) * scale
    p = torch.exp(s - s.max(-1, keepdim=True).values)
    p = p / p.sum(-1, keepdim=True)
    return torch.einsum("hn,nhd->hd", p, v)[None]


def _ignore(name, tensor):
    return None


def _fused(bug, *, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions,
           slot_mapping, block_table, seq_lens, scale, eps, k_cache, v_cache, out, query, dump):
    D = q_norm_weight.shape[0]
    rows = q_proj.shape[0]
    s = inv_rms.to(F64)
    q, k, v = ((p.to(F64) * s).reshape(rows, -1, D) for p in (q_proj, k_proj, v_proj))
    if bug == "v":
        v = k.clone()                                     # v taken from the k projection
    cos, sin = rope_cos[positions.long()].to(F64), rope_sin[positions.long()].to(F64)
    q_n = _norm(q, q_norm_weight, 1.0 if bug == "q_norm" else eps)     # eps of 1: wrong scale on small rows
    k_n = _norm(k, k_norm_weight, eps)
    q_r = _rope(q_n, cos, sin)
    k_r = _rope(k_n, cos, sin, -1.0 if bug == "k_rope" else 1.0)        # rotated the wrong way
    attn = decode_with_fresh(lambda *a: _softmax_attend(*a[:3], a[3] * (2.0 if bug == "attn" else 1.0)),
                             q_r.to(torch.bfloat16).to(F64), k_r.to(torch.bfloat16).to(F64),
                             v.to(torch.bfloat16).to(F64), block_table, seq_lens, k_cache, v_cache, scale)
    for name, t in (("q_norm", q_n), ("k_norm", k_n), ("q_rope", q_r), ("k_rope", k_r), ("v", v), ("attn", attn)):
        if bug == "cancels" and name == "q_norm":
            t = t * 2.0                                   # the dump is wrong, the computation is not
        dump(name, t)
    write(k_cache, slot_mapping, k_r)
    write(v_cache, slot_mapping, v)
    query.copy_(q_r)
    out.copy_(attn.flip(1) if bug == "store" else attn)   # heads stored in reverse order


def _variant(bug):
    def kernel(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions,
               slot_mapping, block_table, seq_lens, scale, eps, k_cache, v_cache, out, query, dump=None):
        args = dict(locals())
        args.pop("bug", None)
        return _fused(bug, **{**args, "dump": dump or _ignore})
    kernel.__name__ = f"fused_rope_decode_attention_{bug}"
    return kernel


fused_rope_decode_attention = _variant(None)
bug_q_norm = _variant("q_norm")
bug_k_rope = _variant("k_rope")
bug_v = _variant("v")
bug_attn = _variant("attn")
bug_store = _variant("store")
cancels = _variant("cancels")


def _partial_attn(**args):
    dumped = {}
    _fused("attn", **{**args, "dump": lambda n, t: dumped.__setitem__(n, t)})
    for name in ("v", "attn"):
        args["dump"](name, dumped[name])


def partial_bug_attn(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                     positions, slot_mapping, block_table, seq_lens, scale, eps, k_cache, v_cache, out, query,
                     dump=None):
    _partial_attn(**{**locals(), "dump": dump or _ignore})


# -- dumps the ABI refuses ---------------------------------------------------------------------

def _bad(how):
    def kernel(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions,
               slot_mapping, block_table, seq_lens, scale, eps, k_cache, v_cache, out, query, dump=None):
        real = dump or _ignore

        def bad_dump(name, t):
            if how == "unknown" and name == "k_rope":
                real("k_rotated", t)
            elif how == "shape" and name == "k_rope":
                real(name, t.transpose(0, 1))
            elif how == "size" and name == "k_rope":
                real(name, t[..., :-1])
            elif how == "list" and name == "v":
                real(name, t.tolist())
            elif how == "nan" and name == "q_norm":
                real(name, torch.full_like(t, float("nan")))
            elif how == "twice" and name == "v":
                real(name, t)
                real(name, t)
            else:
                real(name, t)
        args = {k: v for k, v in locals().items() if k not in ("dump", "real", "bad_dump", "how")}
        _fused(None, **args, dump=bad_dump)
    return kernel


bad_dump_unknown = _bad("unknown")
bad_dump_shape = _bad("shape")
bad_dump_size = _bad("size")
bad_dump_list = _bad("list")
bad_dump_nan = _bad("nan")
bad_dump_twice = _bad("twice")


# -- dumps written as files (a compiled kernel's way) ---------------------------------------------

_FORMATS = {"q_norm": "pt", "k_norm": "npy", "q_rope": "bin", "k_rope": "pt", "v": "npy", "attn": "bin"}


def _to_files(folder, name, t):
    t = t.detach().to(torch.float32).contiguous()
    fmt = _FORMATS[name]
    if fmt == "pt":
        torch.save(t, os.path.join(folder, name + ".pt"))
    elif fmt == "npy":
        numpy.save(os.path.join(folder, name + ".npy"), t.numpy())
    else:
        with open(os.path.join(folder, name + ".bin"), "wb") as fh:
            fh.write(t.numpy().tobytes())
        with open(os.path.join(folder, name + ".json"), "w") as fh:
            json.dump({"dtype": "float32", "shape": list(t.shape)}, fh)


def _files(bug):
    def kernel(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions,
               slot_mapping, block_table, seq_lens, scale, eps, k_cache, v_cache, out, query):
        folder = os.environ.get("HARNESS_DUMP_DIR")
        to_file = (lambda n, t: _to_files(folder, n, t)) if folder else _ignore
        args = {k: v for k, v in locals().items() if k not in ("folder", "to_file", "bug")}
        _fused(bug, **args, dump=to_file)
    return kernel


files_fused_rope_decode_attention = _files(None)
files_bug_k_rope = _files("k_rope")


# -- decode_layers ---------------------------------------------------------------------------

def _rms(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w.to(F64)


def _layers(bad_layer, *, hidden, input_rms_weight, post_rms_weight, q_norm_weight, k_norm_weight,
            final_norm_weight, wq, wk, wv, wo, w_gate, w_up, w_down, lm_head, rope_cos, rope_sin, positions,
            slot_mapping, block_table, seq_lens, num_layers, scale, eps, k_cache, v_cache, logits, next_hidden,
            dump):
    D = q_norm_weight.shape[0]
    B = hidden.shape[0]
    W = {n: t.to(F64) for n, t in (("wq", wq), ("wk", wk), ("wv", wv), ("wo", wo), ("g", w_gate), ("u", w_up),
                                    ("d", w_down))}
    cos, sin = rope_cos[positions.long()].to(F64), rope_sin[positions.long()].to(F64)
    r = hidden.to(F64)
    for layer in range(int(num_layers)):
        h = _rms(r, input_rms_weight, eps)
        q, k, v = ((h @ W[n]).reshape(B, -1, D) for n in ("wq", "wk", "wv"))
        q_n, k_n = _norm(q, q_norm_weight, eps), _norm(k, k_norm_weight, eps)
        q_r, k_r = _rope(q_n, cos, sin), _rope(k_n, cos, sin)
        wrong = 2.0 if layer == bad_layer else 1.0      # the bug: this layer's softmax scale doubled
        attn = decode_with_fresh(lambda *a: _softmax_attend(*a[:3], a[3] * wrong),
                                 q_r.to(torch.bfloat16).to(F64), k_r.to(torch.bfloat16).to(F64),
                                 v.to(torch.bfloat16).to(F64), block_table, seq_lens, k_cache[layer],
                                 v_cache[layer], scale)
        write(k_cache[layer], slot_mapping, k_r)
        write(v_cache[layer], slot_mapping, v)
        r = r + attn.reshape(B, -1) @ W["wo"]
        h = _rms(r, post_rms_weight, eps)
        r = r + (torch.nn.functional.silu(h @ W["g"]) * (h @ W["u"])) @ W["d"]
        for part, t in (("q_norm", q_n), ("k_norm", k_n), ("q_rope", q_r), ("k_rope", k_r), ("v", v),
                        ("attn", attn), ("hidden", r)):
            dump(f"layers.{layer}.{part}", t)
    final = _rms(r, final_norm_weight, eps)
    dump("final_norm", final)
    logits.copy_(final @ lm_head.to(F64).T)
    next_hidden.copy_(r)


def _layers_kernel(bad_layer):
    def kernel(*, hidden, input_rms_weight, post_rms_weight, q_norm_weight, k_norm_weight, final_norm_weight, wq,
               wk, wv, wo, w_gate, w_up, w_down, lm_head, rope_cos, rope_sin, positions, slot_mapping, block_table,
               seq_lens, num_layers, scale, eps, k_cache, v_cache, logits, next_hidden, dump=None):
        args = {k: v for k, v in locals().items() if k not in ("dump", "bad_layer")}
        _layers(bad_layer, **args, dump=dump or _ignore)
    return kernel


decode_layers = _layers_kernel(None)
bug_layer1_attn = _layers_kernel(1)


# -- a failure that does not repeat ---------------------------------------------------------------

_calls = {"n": 0}


def flaky_first_call(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                     positions, slot_mapping, block_table, seq_lens, scale, eps, k_cache, v_cache, out, query,
                     dump=None):
    """Right, except that every other launch (the first, third, ...) stores ``out`` with its heads reversed."""
    _calls["n"] += 1
    args = {k: v for k, v in locals().items() if k != "dump"}
    _fused("store" if _calls["n"] % 2 else None, **args, dump=dump or _ignore)
