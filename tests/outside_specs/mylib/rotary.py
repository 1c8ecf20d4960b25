"""A rotary embedding whose tensors are named as a Qwen3 decode kernel's are (rope_cos,
rope_sin, positions, q_proj), but whose math is its own: GPT-J pairs on a [rows, dim] input."""
import torch

from golden import TensorSpec


def build_tensor_specs(rows=4, dim=16, max_pos=32):
    return [
        TensorSpec("q_proj", [rows, dim], torch.float32, init_value=lambda: torch.randn(rows, dim)),
        TensorSpec("rope_cos", [max_pos, dim // 2], torch.float32, init_value=lambda: torch.rand(max_pos, dim // 2)),
        TensorSpec("rope_sin", [max_pos, dim // 2], torch.float32, init_value=lambda: torch.rand(max_pos, dim // 2)),
        TensorSpec("positions", [rows], torch.int32, init_value=lambda: torch.randint(0, max_pos, (rows,), dtype=torch.int32)),
        TensorSpec("query", [rows, dim], torch.float32, is_output=True),
    ]


def golden_rotary(tensors):
    q = tensors["q_proj"]
    pos = tensors["positions"].long()
    cos, sin = tensors["rope_cos"][pos], tensors["rope_sin"][pos]
    even, odd = q[:, 0::2], q[:, 1::2]
    tensors["query"][:, 0::2] = even * cos - odd * sin
    tensors["query"][:, 1::2] = even * sin + odd * cos


def rotary_skipped(q_proj, rope_cos, rope_sin, positions, query):
    """One bug: no rotation at all (the query is the input, rotated by nothing)."""
    query.copy_(q_proj * 1.5)
