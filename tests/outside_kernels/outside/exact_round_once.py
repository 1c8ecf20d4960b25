"""Every op in fp64 from the inputs, no intermediate rounding; each output and cache row rounded once."""
from outside._fp64 import Fp64Ops

_ops = Fp64Ops(round_qkv=False)
rope_kv_write = _ops.rope_kv_write
paged_decode_attention = _ops.paged_decode_attention
fused_rope_decode_attention = _ops.fused_rope_decode_attention
prefill_attention = _ops.prefill_attention
decode_layers = _ops.decode_layers
