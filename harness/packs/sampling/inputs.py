"""An ``lm_head_topk`` case's inputs (the sampling pack's generator, ``Pack.inputs``; docs/sampling.md).

Every tensor is a counter-based draw (``harness.worker.counter_rng``): a pure function of (seed,
tensor name, element index), then changed only by exact operations (a power-of-two scale, row
copies, an integer add on the bits), so the same case yields the same bytes on any device.

Shaped on purpose:

- ``hidden``: N(0, 1) rows scaled by a power of two per row (1/2 .. 8), as a residual stream's
  magnitude varies: a kernel that skips or misplaces the norm is off by that factor;
- ``final_norm_weight``: 1 + N(0, 0.3²) per channel, far enough from one that a kernel that drops
  it reorders the candidates;
- ``lm_head``: N(0, σ²/H) (σ = ``LOGIT_STD``), so the logits are about N(0, σ²) and the top
  candidates of a row stand apart by about σ/3 on average; and **controlled ties**: the last
  ``V/32`` rows are exact copies of the first ``V/32`` (*twins*: equal logits, bit for bit,
  whatever the kernel), the ``V/32`` before them copies of the next ``V/32`` with their first
  element one ulp up (*near twins*: logits a few thousandths apart).  A row's top ``K`` holds a
  twin pair in about half the rows of a case, a pair across the k-th place now and then.
"""
from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import torch

from harness.case import Case
from harness.ops import OPS, resolve_shape
from harness.worker import counter_rng
from harness.worker.case_inputs import CaseInputs

# The generator's version, in every golden cache key: a change to the bytes it draws must change it.
GENERATOR_VERSION = "sampling-1"
LOGIT_STD = 3.0
WEIGHT_STD = 0.3
TIE_SHARE = 32                     # 1/TIE_SHARE of the vocab in twins, as much in near twins
ROW_SCALE_EXPONENTS = (-1, 0, 1, 2, 3)   # hidden row b is scaled by 2**e, e picked by (seed + b)
STORED = {"bf16": torch.bfloat16, "fp16": torch.float16}
_DTYPES = {"float32": torch.float32, "int32": torch.int32}


def source_hash() -> str:
    """What the golden cache keys this generator by: its declared version."""
    return GENERATOR_VERSION


def arg_dtype(name: str, case: Case) -> torch.dtype:
    """A contract dtype in torch's, for ``case``: bfloat16 arguments follow the case's ``dtype``."""
    return STORED[case.dtype] if name == "bfloat16" else _DTYPES[name]


def input_spec(case: Case) -> dict[str, Any]:
    """The canonical description of a case's inputs: the golden cache key's ``spec``."""
    return {
        "op": case.op,
        "geometry": asdict(case.geometry),
        "seed": case.seed,
        "generator": source_hash(),
        "draws": counter_rng.VERSION,
        **({"dtype": case.dtype} if case.dtype != "bf16" else {}),
    }


def row_scales(seed: int, batch: int) -> list[float]:
    """The power of two each hidden row is scaled by."""
    n = len(ROW_SCALE_EXPONENTS)
    return [2.0 ** ROW_SCALE_EXPONENTS[(seed + b) % n] for b in range(batch)]


def tie_rows(vocab: int) -> tuple[range, range, range, range]:
    """(twins, their originals, near twins, their originals): row ranges of ``lm_head``."""
    m = max(1, vocab // TIE_SHARE) if vocab >= 4 else 0
    return (range(vocab - m, vocab), range(0, m), range(vocab - 2 * m, vocab - m), range(m, 2 * m))


def generate(case: Case, device: torch.device | str = "cpu") -> CaseInputs:
    device = torch.device(device)
    op = OPS[case.op]
    B = case.geometry.batch
    sizes = case.sizes(rows=B)
    shape = {a.name: resolve_shape(a.shape, sizes) for a in op.args}
    stored = STORED[case.dtype]
    seed = case.seed
    B, H = shape["hidden"]
    V = shape["lm_head"][0]

    hidden = counter_rng.draw(seed, "hidden", (B, H), "normal", stored, device)
    picks = (torch.arange(B, device=device) + seed) % len(ROW_SCALE_EXPONENTS)   # nothing crosses from the host
    for i, e in enumerate(ROW_SCALE_EXPONENTS):       # times a power of two: exact
        hidden = torch.where((picks == i)[:, None], hidden * 2.0 ** e, hidden)
    weight = counter_rng.draw(seed, "final_norm_weight", (H,), "normal", torch.float32, device,
                              scale=WEIGHT_STD, shift=1.0)
    lm_head = counter_rng.draw(seed, "lm_head", (V, H), "normal", stored, device, scale=LOGIT_STD / math.sqrt(H))
    twins, originals, near, near_originals = tie_rows(V)
    if len(twins):
        lm_head[twins.start:twins.stop] = lm_head[originals.start:originals.stop]
        lm_head[near.start:near.stop] = lm_head[near_originals.start:near_originals.stop]
        bits = lm_head[near.start:near.stop, 0].view(torch.int16)
        bits.add_(1)                                 # one ulp away from zero, in the first element
    args: dict[str, Any] = {"hidden": hidden, "final_norm_weight": weight, "lm_head": lm_head,
                            "eps": case.geometry.eps}
    outputs = {a.name: (shape[a.name], arg_dtype(a.dtype, case)) for a in op.outputs}
    rows = torch.arange(B, dtype=torch.int64)
    # no cache, every row written: slots mark each row valid, each row its own "sequence"
    return CaseInputs(op, args, outputs, slots=rows.clone(), row_seq=rows, sizes=sizes, spec=input_spec(case))
