"""Kernels for mylib.gated_mlp, called fn(**tensors); each dumps what it has on the way."""
import os

import numpy
import torch


def gated_mlp_fwd(x, w_gate, w_up, w_down, y, dump=None):
    xf = x.float()
    gate = xf @ w_gate.float()
    up = xf @ w_up.float()
    act = torch.nn.functional.silu(gate) * up
    if dump:
        dump("gate", gate)
        dump("up", up)
        dump("act", act)
    y.copy_(act @ w_down.float())


def bug_act_gelu(x, w_gate, w_up, w_down, y, dump=None):
    """One bug: GELU where the block gates with SiLU (the projections stay right)."""
    xf = x.float()
    gate = xf @ w_gate.float()
    up = xf @ w_up.float()
    act = torch.nn.functional.gelu(gate) * up
    if dump:
        dump("gate", gate)
        dump("up", up)
        dump("act", act)
    y.copy_(act @ w_down.float())


def bug_up_row1_files(x, w_gate, w_up, w_down, y):
    """One bug: row 1 of the up projection takes the gate's weight.  It cannot call back into
    Python (as a compiled library): it writes its intermediates as .npy files where the harness
    says, when it says."""
    xf = x.float()
    gate = xf @ w_gate.float()
    up = xf @ w_up.float()
    up[1] = xf[1] @ w_gate.float()
    act = torch.nn.functional.silu(gate) * up
    folder = os.environ.get("HARNESS_DUMP_DIR")
    if folder:
        for name, t in (("gate", gate), ("up", up), ("act", act)):
            numpy.save(os.path.join(folder, name + ".npy"), t.numpy())
    y.copy_(act @ w_down.float())


def bug_stores_x(x, w_gate, w_up, w_down, y, dump=None):
    """One bug: the result is computed but y is stored from the wrong buffer (the block's input)."""
    xf = x.float()
    act = torch.nn.functional.silu(xf @ w_gate.float()) * (xf @ w_up.float())
    out = act @ w_down.float()
    y.copy_(xf)       # should be y.copy_(out)


def bug_store_unscaled(x, w_gate, w_up, w_down, y, dump=None):
    """One bug: the activations are scaled by 1/8 to stay in half range for the down projection,
    and the result is stored without scaling back (every intermediate is right)."""
    xf = x.float()
    gate = xf @ w_gate.float()
    up = xf @ w_up.float()
    act = torch.nn.functional.silu(gate) * up
    if dump:
        dump("gate", gate)
        dump("up", up)
        dump("act", act)
    y.copy_((act * 0.125).half().float() @ w_down.float())    # should be times 8 again
