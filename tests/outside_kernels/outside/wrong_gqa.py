"""A bug: query head h reads KV head h % Hkv instead of h // (Hq / Hkv) (otherwise the exact fp64 kernel)."""
from outside._fp64 import Fp64Ops

_ops = Fp64Ops(round_qkv=False, kv_head=lambda h, num_heads, num_kv_heads: h % num_kv_heads)
paged_decode_attention = _ops.paged_decode_attention
fused_rope_decode_attention = _ops.fused_rope_decode_attention
prefill_attention = _ops.prefill_attention
decode_layers = _ops.decode_layers
