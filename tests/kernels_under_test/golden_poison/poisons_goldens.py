"""Sets torch's default dtype to float64 when imported, as a careless library might."""
import torch

from harness.kernels.reference import (fused_rope_decode_attention, paged_decode_attention,  # noqa: F401
                                       rope_kv_write)

torch.set_default_dtype(torch.float64)
