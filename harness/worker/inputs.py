"""One case's inputs, generated from its seed on the device that runs the case (in the device
worker) or on the host (the golden process).

The same case always yields the same bytes, so goldens can be cached by the
input spec, and a failing seed replays alone.  Every random value is a counter-based
draw (``counter_rng``): a pure function of (seed, tensor name, element index), so
the bytes do not depend on threads, chunking or the device that draws them.  The
small integer choices (uniform sequence lengths, random page order, padded rows)
come from one seeded ``torch.Generator`` on the host, as do the RoPE tables (float64
there, then rounded): they are small, and the host is where their bytes are defined.
Everything else is drawn where the case runs, with operations whose results are exact
on any device (see ``counter_rng``), so no cache crosses from the host.  Caches come
back in their pre-launch state: a random canary everywhere, valid context rows where
the op reads them.
"""
from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from harness.case import Case
from harness.ops import OPS, OpSpec, resolve_shape
from harness.worker import counter_rng

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "int32": torch.int32}
# A case's ``dtype`` (harness.case.DTYPES) -> what the contract's bf16 arguments are stored in.
STORED = {"bf16": torch.bfloat16, "fp16": torch.float16}


def arg_dtype(name: str, case: Case) -> torch.dtype:
    """The torch dtype of an argument declared ``name`` in harness/ops.py, for ``case``: every
    bf16 argument (caches, stored outputs, stored inputs and weights) follows ``case.dtype``."""
    return STORED[case.dtype] if name == "bfloat16" else DTYPES[name]
_CANARY_PERIOD = 4093  # prime, so the pattern never lines up with rows or pages
_CANARY_REPEATS = -(-(_CANARY_PERIOD + counter_rng.WINDOW) // _CANARY_PERIOD)   # a window from any phase


@dataclass
class CaseInputs:
    op: OpSpec
    args: dict[str, Any]                 # every kernel argument but the outputs; caches in pre-launch state
    outputs: dict[str, tuple[tuple[int, ...], torch.dtype]]
    slots: torch.Tensor                  # int64 slot per written row (decode: per batch row, prefill: per token)
    row_seq: torch.Tensor                # int64 sequence index per written row
    sizes: dict[str, int]                # geometry symbols resolved for this case
    spec: dict[str, Any]                 # canonical description of the inputs (the golden cache key)

    @property
    def valid_rows(self) -> torch.Tensor:
        """Rows of slot-masked outputs that are checked: the ones with a valid slot."""
        return self.slots >= 0


def on_host(ci: CaseInputs) -> CaseInputs:
    """``ci`` with its tensors copied to the CPU (``ci`` itself when they are there): what the
    checks and an in-process golden read while the kernel gets the device's."""
    moved = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in ci.args.items()}
    if all(moved[k] is v for k, v in ci.args.items()):
        return ci
    return replace(ci, args=moved)


def inputs_source_hash() -> str:
    """Changes with this module or the draws it makes, so the golden cache keys follow both."""
    sources = (Path(__file__), Path(counter_rng.__file__))
    return hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:16]


def input_spec(case: Case) -> dict[str, Any]:
    return {
        "op": case.op,
        "geometry": asdict(case.geometry),
        "num_pages": case.num_pages,
        "max_blocks": case.max_blocks,
        "seq_lens": str(case.seq_lens),
        "slot_mode": str(case.slot_mode),
        "chunk_size": case.chunk_size,
        "block_value": case.block_value,
        "seed": case.seed,
        "generator": inputs_source_hash(),
        "draws": counter_rng.VERSION,
        # Only where it is not the default, so every bf16 case keeps its key.
        **({"dtype": case.dtype} if case.dtype != "bf16" else {}),
    }


def generate(case: Case, device: torch.device | str = "cpu") -> CaseInputs:
    """The case's inputs, drawn on ``device`` (same bytes on every device); ``slots``,
    ``row_seq`` and ``sizes`` stay on the host."""
    device = torch.device(device)
    g = torch.Generator().manual_seed(case.seed)
    geo = case.geometry
    op = OPS[case.op]
    B, P = geo.batch, geo.page_size
    seq_lens = _seq_lens(case, g)
    block_table = _block_table(case, seq_lens, g)

    if case.op == "prefill_attention":
        chunk = [min(case.chunk_size or s, s) for s in seq_lens]
        context = [s - c for s, c in zip(seq_lens, chunk)]
        row_seq = torch.cat([torch.full((c,), b, dtype=torch.int64) for b, c in enumerate(chunk)])
        positions = torch.cat([torch.arange(ctx, ctx + c) for ctx, c in zip(context, chunk)])
        filled = context                                   # cached positions per sequence
    else:
        row_seq = torch.arange(B)
        positions = torch.tensor(seq_lens, dtype=torch.int64) - 1
        # paged_decode_attention reads every position from the cache, the others write the last one
        filled = seq_lens if case.op == "paged_decode_attention" else [s - 1 for s in seq_lens]
    sizes = case.sizes(rows=len(positions))
    pages = block_table[row_seq, positions // P].to(torch.int64)
    slots = _slots(case, pages * P + positions % P, g)

    gains = _decode_weight_gains(seq_lens) if case.op == "decode_layers" else {}
    args: dict[str, Any] = {}
    for arg in op.args:
        if arg.role == "input":
            args[arg.name] = _generate_input(arg.name, resolve_shape(arg.shape, sizes), arg_dtype(arg.dtype, case), case.seed,
                                             device, gains.get(arg.name, 1.0))
    rope_cos, rope_sin = rope_tables(case.max_pos, geo.head_dim, geo.rope_theta)
    derived = {
        "rope_cos": rope_cos,
        "rope_sin": rope_sin,
        "positions": positions.to(torch.int32),
        "slot_mapping": slots.to(torch.int32),
        "block_table": block_table,
        "seq_lens": torch.tensor(seq_lens, dtype=torch.int32),
    }
    if case.op == "prefill_attention":
        derived["cu_seqlens"] = torch.tensor([0, *itertools.accumulate(chunk)], dtype=torch.int32)
        derived["context_lens"] = torch.tensor(context, dtype=torch.int32)
    args.update({name: value.to(device) for name, value in derived.items() if name in args})
    for arg in op.by_role("scalar"):
        args[arg.name] = {
            "eps": geo.eps, "scale": 1.0 / math.sqrt(geo.head_dim), "num_layers": geo.num_layers,
        }[arg.name]
    for arg in op.caches:
        args[arg.name] = _cache(arg.name, resolve_shape(arg.shape, sizes), block_table, filled, P, case.seed, device,
                                arg_dtype(arg.dtype, case))

    outputs = {a.name: (resolve_shape(a.shape, sizes), arg_dtype(a.dtype, case)) for a in op.outputs}
    return CaseInputs(op, args, outputs, slots, row_seq, sizes, input_spec(case))


def rope_tables(max_pos: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """NeoX layout: the frequency table repeated for both halves, so ``x*cos + rotate_half(x)*sin``."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


# -- pieces -------------------------------------------------------------------

def _seq_lens(case: Case, g: torch.Generator) -> list[int]:
    spec, B, P = case.seq_lens, case.geometry.batch, case.geometry.page_size
    if spec.kind == "const":
        return [spec.values[0]] * B
    if spec.kind == "list":
        return list(spec.values)
    if spec.kind == "uniform":
        lo, hi = spec.values
        return torch.randint(lo, hi + 1, (B,), generator=g).tolist()
    from harness.case import multi_block_lengths
    choices = multi_block_lengths(P)
    # Every boundary shape appears once before any repeats, in a seeded order.
    order = torch.randperm(len(choices), generator=g).tolist()
    return [choices[order[b % len(choices)]] for b in range(B)]


def _block_table(case: Case, seq_lens: list[int], g: torch.Generator) -> torch.Tensor:
    B, P, MB, N = case.geometry.batch, case.geometry.page_size, case.max_blocks, case.num_pages
    if case.block_value is not None:       # warmup: every block of every sequence on one page
        return torch.full((B, MB), case.block_value, dtype=torch.int32)
    needed = [math.ceil(s / P) for s in seq_lens]
    if case.slot_mode.kind == "random":
        pool = torch.randperm(N, generator=g)
    else:
        pool = torch.arange(N)
    table = torch.full((B, MB), -1, dtype=torch.int32)
    start = 0
    for b, n in enumerate(needed):
        table[b, :n] = pool[start:start + n].to(torch.int32)
        start += n
    return table


def _slots(case: Case, mapped: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    mode = case.slot_mode
    if mode.kind == "const":
        return torch.full_like(mapped, int(mode.value))
    if mode.kind == "padded":
        rows = len(mapped)
        padded = torch.randperm(rows, generator=g)[: round(float(mode.value) * rows)]
        mapped = mapped.clone()
        mapped[padded] = -1
    return mapped


def _generate_input(name: str, shape: tuple[int, ...], dtype: torch.dtype, seed: int,
                    device: torch.device, gain: float = 1.0) -> torch.Tensor:
    """One input tensor; scales and shifts go into the draw's table (rounded once, no extra pass)."""
    if dtype == torch.int32:
        return torch.zeros(shape, dtype=dtype, device=device)   # indices are filled in by generate()
    if name.startswith("rope_"):
        return torch.empty(shape, dtype=dtype, device=device)   # replaced by rope_tables()
    if name == "inv_rms":
        return counter_rng.draw(seed, name, shape, "uniform", dtype, device, shift=0.5)
    if name.endswith("_weight"):                           # norm weights: near one, not one
        return counter_rng.draw(seed, name, shape, "normal", dtype, device, scale=0.1, shift=1.0)
    if name.startswith("w") or name == "lm_head":          # weights: fan-in scaled
        gain /= math.sqrt(shape[0] if name != "lm_head" else shape[1])
    return counter_rng.draw(seed, name, shape, "normal", dtype, device, scale=gain)


def _decode_weight_gains(seq_lens: list[int]) -> dict[str, float]:
    """Every sublayer must move the residual stream by O(1), so a broken attention cannot hide.

    Attention averages about s/e value rows (N(0,1) softmax logits), shrinking its
    output by sqrt(e/s); ``wo`` gets that factor back.  The MLP's silu·up product
    has RMS ≈ 0.6, so ``w_down`` gets 1/0.6.
    """
    typical = sum(seq_lens) / len(seq_lens)
    return {"wo": max(1.0, math.sqrt(typical / math.e)), "w_down": 1 / 0.6}


def _cache(name: str, shape: tuple[int, ...], block_table: torch.Tensor, filled: list[int], P: int,
           seed: int, device: torch.device, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Canary everywhere (values no valid row has), valid context where it is read.

    Sized for qwen3-14b (40 layers of [N, 128, 8, 128]): each byte is written once.
    Context element ``f`` of a layer is element ``f`` of that layer's stream, drawn in
    place over runs of consecutive context rows; the canary is tiled over the rest.
    """
    row = math.prod(shape[-2:])                            # elements per cache row (one slot)
    rows = math.prod(shape[-4:-2])                         # slots per layer
    cache = torch.empty(shape, dtype=dtype, device=device)
    layers = cache.view(-1, rows * row)
    context = torch.zeros(rows, dtype=torch.bool)
    for b, count in enumerate(filled):
        if count > 0:
            pos = torch.arange(count)
            context[block_table[b, pos // P].to(torch.int64) * P + pos % P] = True
    context_runs, canary_runs = _runs_of(context)
    period = counter_rng.draw(seed, f"{name}.canary", (_CANARY_PERIOD,), "uniform", torch.float32, device)
    period = period.mul_(512).floor_().mul_(0.125).sub_(32).to(dtype)   # [-32, 32) in steps of 1/8: exact in bf16, fp16
    tiled = period.repeat(_CANARY_REPEATS)
    for layer_index, layer in enumerate(layers):
        stream = name if len(shape) == 4 else f"{name}[{layer_index}]"
        counter_rng.fill(layer, seed, stream, "normal", [(start * row, count * row) for start, count in context_runs])
        for start, count in canary_runs:
            _tile_canary(layer[start * row:(start + count) * row], (layer_index * rows + start) * row, tiled)
    return cache



def _runs_of(mask: torch.Tensor) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(start, count) runs of True and of False in a 1-D bool mask."""
    edges = (torch.nonzero(mask[1:] != mask[:-1]).flatten() + 1).tolist()
    bounds = [0, *edges, len(mask)]
    runs: tuple[list[tuple[int, int]], list[tuple[int, int]]] = ([], [])
    for start, end in zip(bounds, bounds[1:]):
        runs[0 if mask[start] else 1].append((start, end - start))
    return runs


def _tile_canary(target: torch.Tensor, first: int, tiled: torch.Tensor) -> None:
    """``target[j] = canary[(first + j) % period]``: rows of ``counter_rng.WINDOW`` elements copied
    in one ``index_select`` from the windows of ``tiled`` (the period repeated), the rest sliced."""
    W = counter_rng.WINDOW
    rows = target.numel() // W
    if rows:
        starts = (torch.arange(rows, dtype=torch.int64, device=tiled.device) * W + first) % _CANARY_PERIOD
        torch.index_select(tiled.unfold(0, W, 1), 0, starts, out=target[:rows * W].view(rows, W))
    phase, rest = (first + rows * W) % _CANARY_PERIOD, target.numel() - rows * W
    target[rows * W:] = tiled[phase:phase + rest]
