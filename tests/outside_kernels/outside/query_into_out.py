"""A bug: the fused op stores the rotated query into ``out`` as well (the attention result
bound to the wrong buffer); ``query`` and the cache writes are right."""
from outside import exact_round_once as _exact


def fused_rope_decode_attention(**args):
    _exact.fused_rope_decode_attention(**args)
    args["out"].copy_(args["query"])
