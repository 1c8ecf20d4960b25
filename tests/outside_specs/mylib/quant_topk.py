"""Router block: int8 weights with fp32 per-column scales, a projection, a top-k with ties,
the argmax, a selection mask, and the result requantised to int8 per row."""
import torch

from golden import ScalarSpec, TensorSpec


def build_tensor_specs(rows=4, cols=32, n=16, k=3, alpha=1.0):
    return [
        TensorSpec("x", [rows, cols], torch.bfloat16, init_value=lambda: torch.randn(rows, cols)),
        TensorSpec("w_q", [cols, n], torch.int8, init_value=lambda: torch.randint(-127, 128, (cols, n), dtype=torch.int8)),
        TensorSpec("w_scale", [n], torch.float32, init_value=lambda: torch.rand(n) * 0.01 + 0.001),
        # coarse scores: many ties, so top-k indices may legally come in another order
        TensorSpec("scores", [rows, n], torch.float32, init_value=lambda: torch.randint(0, 5, (rows, n)).float()),
        ScalarSpec("alpha", "float", alpha),
        TensorSpec("h", [rows, n], torch.float32, is_output=True),
        TensorSpec("topk_values", [rows, k], torch.float32, is_output=True),
        TensorSpec("topk_indices", [rows, k], torch.int32, is_output=True),
        TensorSpec("best", [rows], torch.int64, is_output=True),
        TensorSpec("mask", [rows, n], torch.bool, is_output=True),
        TensorSpec("q_out", [rows, n], torch.int8, is_output=True),
        TensorSpec("q_scale", [rows, 1], torch.float32, init_value=1.0, is_output=True),
    ]


def golden_quant_topk(tensors):
    x = tensors["x"].float()
    w = tensors["w_q"].float() * tensors["w_scale"]
    h = (x @ w) * tensors["alpha"]
    tensors["h"][:] = h
    k = tensors["topk_values"].shape[-1]
    values, indices = torch.topk(tensors["scores"], k, dim=-1)
    tensors["topk_values"][:] = values
    tensors["topk_indices"][:] = indices.to(torch.int32)
    tensors["best"][:] = torch.argmax(h, dim=-1)
    tensors["mask"][:] = tensors["scores"] >= values[:, -1:]
    scale = h.abs().amax(dim=-1, keepdim=True) / 127
    tensors["q_scale"][:] = scale
    tensors["q_out"][:] = torch.round(h / scale).clamp(-127, 127).to(torch.int8)


def indices_compare(actual, expected, *, actual_outputs, expected_outputs, inputs, rtol, atol):
    """Top-k indices may swap under score ties: compare the scores they pick, sorted per row."""
    scores = inputs["scores"].float()
    picked = torch.gather(scores, -1, actual.long()).sort(dim=-1).values
    wanted = torch.gather(scores, -1, expected.long()).sort(dim=-1).values
    if torch.allclose(picked, wanted, rtol=rtol, atol=atol):
        return True, "topk indices select the golden's scores"
    bad = (~torch.isclose(picked, wanted, rtol=rtol, atol=atol)).any(dim=-1).nonzero().flatten().tolist()
    return False, f"topk indices pick other scores in rows {bad}"
