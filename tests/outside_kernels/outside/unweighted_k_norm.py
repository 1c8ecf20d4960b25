"""A subtle bug: QK-norm of k forgets its weight (``k_norm_weight`` ≈ 1 ± 0.1 is not applied).
fp64 otherwise.  The k cache rows are ~10% off; attention outputs move only a little."""
import torch

from outside import exact_round_once as _exact


def _unweighted(fn):
    def kernel(**args):
        args["k_norm_weight"] = torch.ones_like(args["k_norm_weight"])
        return fn(**args)
    kernel.__name__ = fn.__name__
    return kernel


rope_kv_write = _unweighted(_exact.rope_kv_write)
fused_rope_decode_attention = _unweighted(_exact.fused_rope_decode_attention)
prefill_attention = _unweighted(_exact.prefill_attention)
decode_layers = _unweighted(_exact.decode_layers)
