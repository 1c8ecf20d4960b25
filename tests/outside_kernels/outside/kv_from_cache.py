"""The common fused-kernel choice: k and v read back from the bf16 cache just written (rounded),
q kept unrounded in registers.  fp64 otherwise.  Neither the golden's reading (all three
rounded) nor the exact one (none rounded): a test of rules that accept only those two."""
from outside._fp64 import Fp64Ops

_ops = Fp64Ops(round_qkv=True, round_q=False)
fused_rope_decode_attention = _ops.fused_rope_decode_attention
prefill_attention = _ops.prefill_attention
decode_layers = _ops.decode_layers
