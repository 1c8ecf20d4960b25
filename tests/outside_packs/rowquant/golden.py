"""quantize_rows in the golden's dtype: scale = max |x| / 127 per row, codes = round(x / scale)."""
import torch

ROUNDING_CHANGES = ()


def compute(inputs, dtype, record=None, rounding=True):
    x = inputs["x"].to(dtype)
    absmax = x.abs().amax(dim=-1, keepdim=True)
    if record is not None:
        record("absmax", absmax)
    scales = torch.where(absmax > 0, absmax / 127, torch.ones_like(absmax))
    codes = torch.round(x / scales).clamp(-127, 127)
    return {"codes": codes, "scales": scales}
