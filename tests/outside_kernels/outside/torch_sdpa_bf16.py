"""``torch_sdpa`` with attention in bf16, as a bf16 model calls SDPA: q, k, v rounded to bf16 and
the math inside SDPA in whatever precision torch's bf16 kernel uses (fp32 prologue)."""
import importlib.util
import sys

import torch

# A second copy of torch_sdpa's module with ATTN_DTYPE = bfloat16 (the fp32 one stays as it is).
_spec = importlib.util.find_spec("outside.torch_sdpa")
_mod = importlib.util.module_from_spec(_spec)
sys.modules["outside._torch_sdpa_bf16_impl"] = _mod
_spec.loader.exec_module(_mod)
_mod.ATTN_DTYPE = torch.bfloat16

paged_decode_attention = _mod.paged_decode_attention
fused_rope_decode_attention = _mod.fused_rope_decode_attention
prefill_attention = _mod.prefill_attention
