"""quantize_rows kernels: a correct one written apart from the golden, and two bugs."""
import torch


def quantize_rows(x, codes, scales, dump=None):
    absmax = x.float().abs().max(dim=1, keepdim=True).values
    if dump is not None:
        dump("absmax", absmax)
    s = absmax / 127.0
    s[absmax == 0] = 1.0
    scales.copy_(s)
    codes.copy_(torch.clamp(torch.round(x.float() / s), -127, 127).to(torch.int8))


def per_tensor_scale(x, codes, scales, dump=None):
    """One scale for the whole tensor: small rows lose every code."""
    absmax = x.float().abs().max()
    if dump is not None:
        dump("absmax", absmax.expand(x.shape[0], 1).clone())
    s = absmax / 127.0
    scales.fill_(float(s))
    codes.copy_(torch.clamp(torch.round(x.float() / s), -127, 127).to(torch.int8))


def half_the_rows(x, codes, scales, dump=None):
    """Quantises the first half of the rows only: the rest of both outputs is left as found."""
    n = x.shape[0] // 2
    quantize_rows(x[:n], codes[:n], scales[:n])
