"""Kernels for mylib.quant_topk, as a library's CPU reference writes them, called fn(**tensors)."""
import torch


def _common(x, w_q, w_scale, scores, alpha, h, topk_values, topk_indices, best, mask, q_out, q_scale):
    h.copy_((x.float() @ (w_q.float() * w_scale)) * alpha)
    k = topk_values.shape[-1]
    # another tie-break than torch.topk: the last of equal scores first
    order = torch.argsort(torch.flip(scores, [-1]), dim=-1, descending=True, stable=True)
    idx = scores.shape[-1] - 1 - order[:, :k]
    topk_indices.copy_(idx.to(torch.int32))
    topk_values.copy_(torch.gather(scores, -1, idx))
    best.copy_(torch.argmax(h, dim=-1))
    mask.copy_(scores >= topk_values[:, -1:])
    q_scale.copy_(h.abs().amax(dim=-1, keepdim=True) / 127)
    q_out.copy_(torch.round(h / q_scale).clamp(-127, 127).to(torch.int8))


def quant_topk_fwd(**t):
    _common(**t)
    return {"h": t["h"], "best": t["best"]}      # a dict of outputs by name is allowed


def bug_h_row2_unscaled(**t):
    """One bug: row 2 of h leaves out alpha-scaled weights' scale (fp32 output, row 2)."""
    _common(**t)
    t["h"][2].copy_(t["x"][2].float() @ t["w_q"].float())


def bug_topk_wrong_row1(**t):
    """One bug: row 1's top-k indices are the lowest scores."""
    _common(**t)
    low = torch.argsort(t["scores"][1])[: t["topk_indices"].shape[-1]]
    t["topk_indices"][1].copy_(low.to(torch.int32))
    t["topk_values"][1].copy_(t["scores"][1][low])


def bug_mask_row0(**t):
    """One bug: row 0 of the bool mask is never set."""
    _common(**t)
    t["mask"][0].fill_(False)


def bug_quant_row3(**t):
    """One bug: row 3 is requantised with twice its scale (codes halved)."""
    _common(**t)
    t["q_out"][3].copy_(torch.round(t["h"][3] / (2 * t["q_scale"][3])).clamp(-127, 127).to(torch.int8))


def bug_writes_scores(**t):
    """One bug: the scores input is sorted in place (CONTRACT)."""
    _common(**t)
    t["scores"][0].copy_(torch.sort(t["scores"][0]).values)
