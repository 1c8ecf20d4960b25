"""A gated MLP block as a library's spec module writes it, with its intermediates: the gate and
up projections, the SiLU-gated product, then the down projection.  Its golden hands each
intermediate to ``dump`` as it computes it, as the library's kernels do."""
import torch

from golden import TensorSpec

# dataflow order; "act" consumes both projections, "gate" and "up" only the inputs
INTERMEDIATES = ["gate", ("up", []), ("act", ["gate", "up"])]


def build_tensor_specs(rows=4, hidden=64, inter=96):
    return [
        TensorSpec("x", [rows, hidden], torch.bfloat16, init_value=lambda: torch.randn(rows, hidden)),
        TensorSpec("w_gate", [hidden, inter], torch.bfloat16, init_value=lambda: torch.randn(hidden, inter) / 8),
        TensorSpec("w_up", [hidden, inter], torch.bfloat16, init_value=lambda: torch.randn(hidden, inter) / 8),
        TensorSpec("w_down", [inter, hidden], torch.bfloat16, init_value=lambda: torch.randn(inter, hidden) / 8),
        TensorSpec("y", [rows, hidden], torch.float32, is_output=True),
    ]


def golden_gated_mlp(tensors, dump=None):
    x = tensors["x"].float()
    gate = x @ tensors["w_gate"].float()
    up = x @ tensors["w_up"].float()
    act = torch.nn.functional.silu(gate) * up
    if dump:
        dump("gate", gate)
        dump("up", up)
        dump("act", act)
    tensors["y"][:] = act @ tensors["w_down"].float()
