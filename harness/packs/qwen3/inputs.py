"""A Qwen3 case's inputs (the pack's generator, ``Pack.inputs``), generated from its seed on the device that runs the case (in the device
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
back in their pre-launch state: a canary everywhere, valid context rows where the op
reads them.

Attention is shaped on purpose (docs/cases.md, "attention"; docs/contracts.md, "What the
kernel finds in its buffers"): the q/k norm weights, the query and the cached keys are
scaled so the logits spread as the case's ``attention`` asks; q and k share a recency
component that RoPE turns into a score decaying with distance; the cached key at position
0 is a mild sink; and every query head carries a shared component on its slowest RoPE
pair, which positions barely rotate.  The
canary keys point along that pair, so any query that reads a row it must not read gives
it a dominant score (a *hot* canary), and the canary values lie far from every real
value: one stray read moves the output far beyond the tolerance.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy
import torch

from harness.case import ATTENTION_SPREADS, Case
from harness.ops import OPS, resolve_shape
from harness.worker import counter_rng, prefault
from harness.worker.case_inputs import CaseInputs

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "int32": torch.int32}
# A case's ``dtype`` (harness.case.DTYPES) -> what the contract's bf16 arguments are stored in.
STORED = {"bf16": torch.bfloat16, "fp16": torch.float16}


def arg_dtype(name: str, case: Case) -> torch.dtype:
    """The torch dtype of an argument declared ``name`` in harness/ops/__init__.py, for ``case``: every
    bf16 argument (caches, stored outputs, stored inputs and weights) follows ``case.dtype``."""
    return STORED[case.dtype] if name == "bfloat16" else DTYPES[name]
_CANARY_PERIOD = 4093  # prime, so the pattern never lines up with rows or pages
_CANARY_REPEATS = -(-(_CANARY_PERIOD + counter_rng.WINDOW) // _CANARY_PERIOD)   # a window from any phase
# The shared query component: q_proj's elements on each head's slowest RoPE pair are
# ``_SHARED_LEVEL + x/4`` (x the N(0, 1) draw, |x| < 4.4), so every query leans the same
# way there whatever its position.  Its part of q·k against a real key is as random as the
# rest (real keys get no shared part).
_SHARED_LEVEL = 4.0
# Recency: q and k (q_proj and k_proj, before the norm and RoPE; the cached keys and paged
# decode's query as RoPE leaves them) share ``_RECENCY`` on every other dimension, so
# ``q·k`` holds a sum of cos((query position - key position)·f) over the RoPE frequencies:
# largest for the nearest keys and decaying with distance, as RoPE attention does.  The
# most recent keys, those a boundary, page or length bug touches first, carry weight.
_RECENCY = 1.0
# Canary scores aimed at (before the spread of the weights): far above the largest real
# logit (about 4.4·spread·1.2 at most), far below exp's float32 overflow (88) even for a
# kernel that subtracts the real maximum only.
_CANARY_SCORE = {"base": 24.0, "per_spread": 8.0}
# An attention sink, as trained models have on their first token: the cached key at position
# 0 gets a score about this much higher on the shared pair, so a kernel that loses the first
# key loses real weight (and the canaries still outscore it by 10 and more).
_SINK_SCORE = {"base": 2.0, "per_spread": 1.0}
# Ops whose canaries are hot: those whose query the generator shapes.  decode_layers'
# queries come out of its own weights from the hidden state; its canary stays the cold one.
_COLD_CANARY_OPS = ("decode_layers",)
CANARY_VALUE_MIN = 16.0     # every hot canary value has |x| >= this; every real value is below 6.7


# The generator's version, in every golden cache key (``input_spec``'s ``generator``): it names the
# bytes the generator draws for a case, so a change to what it generates must change it.
# tests/unit/test_pack_parity.py pins the inputs of the shipped and bug-class cases (and a spread of
# dtypes, attention and slot modes) to it: a change that moves a byte fails there until the version
# is changed and the record rewritten (bench/pack_parity.py --write).  A version declared, not the
# module's source hash, so moving or rewording the generator does not throw away every cache.  Its
# value is the source hash the generator had when the version was declared (it was
# harness/worker/inputs.py), so caches filled before keep serving.  counter_rng.VERSION names the draws.
GENERATOR_VERSION = "f9baa67f31da56fe"


def source_hash() -> str:
    """What the golden cache keys this generator by: its declared version."""
    return GENERATOR_VERSION


def input_spec(case: Case) -> dict[str, Any]:
    """The canonical description of a case's inputs: the golden cache key's ``spec``."""
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
        "attention": case.attention,
        "generator": source_hash(),
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

    spread = ATTENTION_SPREADS[case.attention]
    gains = _decode_weight_gains(seq_lens, spread) if case.op == "decode_layers" else {}
    args: dict[str, Any] = {}
    for arg in op.args:
        if arg.role == "input":
            args[arg.name] = _generate_input(arg.name, resolve_shape(arg.shape, sizes), arg_dtype(arg.dtype, case), case.seed,
                                             device, gains.get(arg.name, 1.0), spread)
    hot = case.op not in _COLD_CANARY_OPS
    if hot and "q_proj" in args:
        _share(args["q_proj"].view(-1, geo.num_heads, geo.head_dim), _SHARED_LEVEL)
        _lean(args["q_proj"].view(-1, geo.num_heads, geo.head_dim))
        _lean(args["k_proj"].view(-1, geo.num_kv_heads, geo.head_dim))
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
    leaning = None
    if hot:   # built on the device from the RoPE tables (paged decode has none among its arguments)
        leaning = _leaning(*(args[n] if n in args else t.to(device)
                             for n, t in (("rope_cos", rope_cos), ("rope_sin", rope_sin))))
    if "query" in args and leaning is not None:   # paged decode: as the norm and RoPE would leave q
        last = args["seq_lens"].long() - 1
        args["query"] = _query(args["query"], leaning[last], spread).to(STORED[case.dtype])   # the draw is float32; stored as the case says
    for arg in op.by_role("scalar"):
        args[arg.name] = {
            "eps": geo.eps, "scale": 1.0 / math.sqrt(geo.head_dim), "num_layers": geo.num_layers,
        }[arg.name]
    canary = _CanaryKeys(geo.head_dim, spread) if hot else None
    key_scale = math.sqrt(spread) * (_key_norm_factor(geo.head_dim) if hot else 1.0)
    extra = None                                           # what each cached key position gets added
    if leaning is not None and "block_table" in args:      # rope_kv_write reads no cached key
        extra = _key_extra(leaning.mul_(key_scale), canary.sink)
    for arg in op.caches:
        args[arg.name] = _cache(arg.name, resolve_shape(arg.shape, sizes), block_table, filled, P, case.seed, device,
                                arg_dtype(arg.dtype, case), key_scale, canary, extra)

    outputs = {a.name: (resolve_shape(a.shape, sizes), arg_dtype(a.dtype, case)) for a in op.outputs}
    return CaseInputs(op, args, outputs, slots, row_seq, sizes, input_spec(case))


def rope_tables(max_pos: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """NeoX layout: the frequency table repeated for both halves, so ``x*cos + rotate_half(x)*sin``."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos().float(), angles.sin().float()      # each half's, then repeated
    return torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)


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
    # The last page is handed out last, so whenever a sequence leaves blocks at -1 (fewer
    # pages needed than exist) it is owned by no sequence: what a -1 entry reaches when a
    # kernel uses it as an index (cache[-1]) is a page of hot canaries.
    if case.slot_mode.kind == "random":
        pool = torch.cat([torch.randperm(N - 1, generator=g), torch.tensor([N - 1])])
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
                    device: torch.device, gain: float = 1.0, spread: float = 1.0) -> torch.Tensor:
    """One input tensor; scales and shifts go into the draw's table (rounded once, no extra pass)."""
    if dtype == torch.int32:
        return torch.zeros(shape, dtype=dtype, device=device)   # indices are filled in by generate()
    if name.startswith("rope_"):
        return torch.empty(shape, dtype=dtype, device=device)   # replaced by rope_tables()
    if name == "inv_rms":
        return counter_rng.draw(seed, name, shape, "uniform", dtype, device, shift=0.5)
    if name in ("q_norm_weight", "k_norm_weight"):         # near sqrt(spread): logits spread by `spread`
        root = math.sqrt(spread)
        return counter_rng.draw(seed, name, shape, "normal", dtype, device, scale=0.1 * root, shift=root)
    if name.endswith("_weight"):                           # norm weights: near one, not one
        return counter_rng.draw(seed, name, shape, "normal", dtype, device, scale=0.1, shift=1.0)
    if name == "query":                                    # paged decode: shaped by generate()
        return counter_rng.draw(seed, name, shape, "normal", torch.float32, device)
    if name.startswith("w") or name == "lm_head":          # weights: fan-in scaled
        gain /= math.sqrt(shape[0] if name != "lm_head" else shape[1])
    return counter_rng.draw(seed, name, shape, "normal", dtype, device, scale=gain)


def _decode_weight_gains(seq_lens: list[int], spread: float = 1.0) -> dict[str, float]:
    """Every sublayer must move the residual stream by O(1), so a broken attention cannot hide.

    Attention with N(0, spread²) softmax logits averages about s·exp(-spread²) value
    rows (the effective count of log-normal weights; s/e for spread 1), shrinking its
    output by the square root of that; ``wo`` gets the factor back.  The MLP's silu·up
    product has RMS ≈ 0.6, so ``w_down`` gets 1/0.6.
    """
    typical = sum(seq_lens) / len(seq_lens)
    return {"wo": max(1.0, math.sqrt(typical * math.exp(-spread * spread))), "w_down": 1 / 0.6}


def _pair(head_dim: int) -> tuple[int, int]:
    """The slowest-rotating NeoX RoPE pair of a head: (D/2 - 1, D - 1)."""
    return head_dim // 2 - 1, head_dim - 1


def _share(heads: torch.Tensor, level: float) -> None:
    """In place on ``[..., H, D]`` float32 draws: the slowest pair's elements become
    ``level + x/4`` (exact float32 operations, the same bytes on every device)."""
    for d in _pair(heads.shape[-1]):
        heads[..., d].mul_(0.25).add_(level)


def _norm_factor(head_dim: int) -> float:
    """What the QK-norm multiplies a q_proj head by on average: its mean square is
    ((D-2)·(1 + recency²) + 2·level²) / D."""
    return math.sqrt(head_dim / ((head_dim - 2) * (1 + _RECENCY ** 2) + 2 * _SHARED_LEVEL ** 2))


def _key_norm_factor(head_dim: int) -> float:
    """The same for a k_proj head: ((D-2)·(1 + recency²) + 2) / D."""
    return math.sqrt(head_dim / ((head_dim - 2) * (1 + _RECENCY ** 2) + 2))


def _lean(heads: torch.Tensor) -> None:
    """In place on ``[..., H, D]`` float32: ``_RECENCY`` added to every dimension but the slowest pair."""
    a, b = _pair(heads.shape[-1])
    heads[..., :a].add_(_RECENCY)
    heads[..., a + 1:b].add_(_RECENCY)


def _leaning(rope_cos: torch.Tensor, rope_sin: torch.Tensor) -> torch.Tensor:
    """``[max_pos, D]`` float32 where the tables are: the shared recency vector as RoPE leaves it at
    each position (exact products, one rounded sum: the same bytes on every device)."""
    u = torch.full((rope_cos.shape[1],), _RECENCY, device=rope_cos.device)
    a, b = _pair(len(u))
    u[a] = u[b] = 0.0
    half = len(u) // 2
    rotated = torch.cat([-u[half:], u[:half]])
    return u * rope_cos + rotated * rope_sin


def _key_extra(leaning: torch.Tensor, sink: float) -> torch.Tensor:
    """``[max_pos, D]`` float32: what the cached key at each position gets added, its leaning
    and, at position 0, ``sink`` on the shared pair."""
    extra = leaning.clone()
    first = torch.arange(len(extra), device=extra.device) == 0
    for d in _pair(extra.shape[-1]):
        extra[:, d] += first * sink
    return extra


def _draw_leaned(rows: torch.Tensor, stream: counter_rng.Stream, runs: list[tuple[int, int, int]],
                 extra: torch.Tensor) -> None:
    """Every context key (``rows``: one layer's ``[slots, H, D]``) is its draw plus the extra of
    its position, both in the cache's dtype, added as that dtype adds (in float32, rounded once;
    ``extra`` in ``rows.dtype``).  A slot that several positions share (``block_value``) is
    drawn once and gets each one's extra in turn, in sequence order.

    Each slice is drawn and leaned while it is in cache: no second pass over the keys and no
    float32 copy of them."""
    row = math.prod(rows.shape[1:])
    drawn = numpy.zeros(len(rows), dtype=bool)
    for slot, pos, count in runs:
        seen = drawn[slot:slot + count]
        edges = (numpy.flatnonzero(seen[1:] != seen[:-1]) + 1).tolist()
        for first, end in zip([0, *edges], [*edges, count]):      # parts all drawn or all fresh
            fresh = not seen[first]
            for at in range(first, end, _LEAN_ROWS):
                n = min(_LEAN_ROWS, end - at)
                target = rows[slot + at:slot + at + n]
                if fresh:
                    stream.write(target, (slot + at) * row)
                target.add_(extra[pos + at:pos + at + n, None, :])
        seen[:] = True


def _context_runs(block_table: torch.Tensor, filled: list[int], P: int) -> list[tuple[int, int, int]]:
    """(first slot, first position, rows) of each run of context rows on consecutive slots."""
    table = block_table.tolist()
    runs: list[tuple[int, int, int]] = []
    for b, count in enumerate(filled):
        for pos in range(0, count, P):
            slot, n = table[b][pos // P] * P, min(P, count - pos)
            if pos and runs[-1][0] + runs[-1][2] == slot:      # the page after the sequence's last one
                runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + n)
            else:
                runs.append((slot, pos, n))
    return runs


_LEAN_ROWS = 256        # context rows drawn and leaned at a time: 512 KiB of a qwen3 bf16 cache, in L2


def _query(q: torch.Tensor, leaning: torch.Tensor, spread: float) -> torch.Tensor:
    """paged_decode_attention's query from its float32 draw: what the QK-norm and RoPE would
    make of a shaped q_proj with weights sqrt(spread) (the leaning at each row's position)."""
    _share(q, _SHARED_LEVEL)
    q.add_(leaning[:, None, :])
    return q.mul_(math.sqrt(spread) * _norm_factor(q.shape[-1]))


@dataclass(frozen=True)
class _CanaryKeys:
    """Canary key rows: ``level`` on the slowest RoPE pair, the small canary pattern elsewhere.

    A query's slowest pair holds about ``sqrt(spread)·norm·_SHARED_LEVEL`` per element
    (positions rotate it by under 0.02 rad up to 10^4 tokens at rope_theta 10^6), so its
    score against a canary key is about ``2·level·that/sqrt(D)``; ``level`` puts that at
    ``_CANARY_SCORE``."""

    level: float
    sink: float                 # what the sink key (cached position 0) gets on the same pair

    def __init__(self, head_dim: int, spread: float) -> None:
        per_query = math.sqrt(spread) * _SHARED_LEVEL * _norm_factor(head_dim)
        for name, aim in (("level", _CANARY_SCORE), ("sink", _SINK_SCORE)):
            score = aim["base"] + aim["per_spread"] * spread
            object.__setattr__(self, name, score * math.sqrt(head_dim) / (2 * per_query))


def _cache(name: str, shape: tuple[int, ...], block_table: torch.Tensor, filled: list[int], P: int,
           seed: int, device: torch.device, dtype: torch.dtype = torch.bfloat16, key_scale: float = 1.0,
           hot: "_CanaryKeys | None" = None, extra: torch.Tensor | None = None) -> torch.Tensor:
    """Canary everywhere (values no valid row has), valid context where it is read.

    Context keys are N(0, 1) times ``key_scale`` (sqrt(spread) and, for hot ops, the
    norm factor of a k_proj head, as the QK-norm and its weight scale a fresh key).  With ``hot``: canary keys are the small pattern (|x| <= 1)
    with ``hot.level`` on the slowest RoPE pair, canary values the pattern pushed to
    16 <= |x| < 48, beyond every real value (|x| < 4.5); else the pattern itself.

    Sized for qwen3-14b (40 layers of [N, 128, 8, 128]): each byte is written once.
    Context element ``f`` of a layer is element ``f`` of that layer's stream, drawn in
    place over runs of consecutive context rows; the canary is tiled over the rest.  With
    ``extra`` (a hot key cache the op reads), each context key gets the extra of its position
    added as it is drawn (``_draw_leaned``).
    """
    row = math.prod(shape[-2:])                            # elements per cache row (one slot)
    rows = math.prod(shape[-4:-2])                         # slots per layer
    cache = prefault.empty(shape, dtype, device)         # its pages mapped before the draws (prefault.py)
    layers = cache.view(-1, rows * row)
    context = torch.zeros(rows, dtype=torch.bool)
    for b, count in enumerate(filled):
        if count > 0:
            pos = torch.arange(count)
            context[block_table[b, pos // P].to(torch.int64) * P + pos % P] = True
    context_runs, canary_runs = _runs_of(context)
    period = counter_rng.draw(seed, f"{name}.canary", (_CANARY_PERIOD,), "uniform", torch.float32, device)
    period = period.mul_(512).floor_().mul_(0.125).sub_(32)      # [-32, 32) in steps of 1/8: exact
    is_key = name.startswith("k")
    if hot is not None:
        period = period.mul_(1 / 32) if is_key else period.add_(torch.where(period >= 0, CANARY_VALUE_MIN, -CANARY_VALUE_MIN))
    tiled = period.to(dtype).repeat(_CANARY_REPEATS)      # exact in bf16 and fp16 (steps of 1/256, |x| < 48)
    scale = key_scale if is_key else 1.0
    leaned = extra is not None and is_key
    key_runs = _context_runs(block_table, filled, P) if leaned else []
    key_extra = extra.to(dtype) if leaned else None       # rounded once to the cache's dtype
    for layer_index, layer in enumerate(layers):
        stream = name if len(shape) == 4 else f"{name}[{layer_index}]"
        if leaned:
            draws = counter_rng.Stream(seed, stream, "normal", dtype, device, int(context.sum()) * row, scale=scale)
            _draw_leaned(layer.view(rows, *shape[-2:]), draws, key_runs, key_extra)
        else:
            counter_rng.fill(layer, seed, stream, "normal", [(start * row, count * row) for start, count in context_runs],
                             scale=scale)
        for start, count in canary_runs:
            _tile_canary(layer[start * row:(start + count) * row], (layer_index * rows + start) * row, tiled)
            if hot is not None and is_key:
                heads = layer[start * row:(start + count) * row].view(count, shape[-2], shape[-1])
                for d in _pair(shape[-1]):
                    heads[..., d] = hot.level
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
