"""quantize_rows' inputs: rows of very different magnitudes, drawn on the host from the seed."""
from dataclasses import asdict

import torch

from harness.ops import OPS, resolve_shape
from harness.worker.case_inputs import CaseInputs

VERSION = "rowquant-1"


def source_hash() -> str:
    return VERSION


def input_spec(case) -> dict:
    return {"op": case.op, "geometry": asdict(case.geometry), "seed": case.seed, "generator": VERSION,
            "dtype": case.dtype}


def generate(case, device="cpu") -> CaseInputs:
    op = OPS[case.op]
    sizes = case.sizes(rows=case.geometry.batch)
    B, H = resolve_shape(op.arg("x").shape, sizes)
    g = torch.Generator().manual_seed(case.seed)
    magnitude = 2.0 ** torch.randint(-6, 7, (B, 1), generator=g)
    x = (torch.randn(B, H, generator=g) * magnitude).to(torch.bfloat16).to(device)
    outputs = {"codes": ((B, H), torch.int8), "scales": ((B, 1), torch.float32)}
    rows = torch.arange(B, dtype=torch.int64)
    return CaseInputs(op, {"x": x}, outputs, rows, rows, sizes, input_spec(case))
