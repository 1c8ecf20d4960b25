"""Bind a kernel written to another calling convention to an op's signature, declaratively.

The Qwen3 pack's adapter pieces, public as ``harness.adapters`` (kernels import them from there).

A library kernel rarely takes the harness's keywords, cache layout and page table, or
writes its result into a buffer it is given.  ``adapt(op, fn, *pieces, name=...)`` composes
pieces that each translate one thing, and returns a callable with the op's exact
signature (docs/adapters.md):

    rename(query="q")                   keyword names
    drop("eps"), const(causal=False)    arguments the library does not take / extra ones
    cache_layout(k_cache="HND")         NHD, HND, rows ([N*P*Hkv, D]), slots ([N*P, Hkv, D])
    per_layer("k_cache"), expand_layers("wq")   decode_layers: lists of layers, [L, ...] weights
    flashinfer_pages(), fia_pages()     block_table + lengths as FlashInfer / torch-npu FIA take them
    returns("out")                      the library returns the output; it is copied into the buffer

Whatever piece order is given, they apply in one fixed order (returns, layouts, layers,
paging, drop, const, rename), so every piece names the op's own arguments and only
``rename`` sees the names the paging pieces add.  A spec is checked when ``adapt`` runs:
an unknown layout or an argument the op does not have is a one-line ``UsageError``.

Copies are recorded: an output the library returned as a new tensor, and a cache laid
out as a copy and written back after the call, are listed in ``Adapted.last_call``, which
the worker puts in the result's ``metrics["adapter"]``: the harness's return-value and
guard-band checks only see the buffers, so the report says what they did not see.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Union

import torch

from harness.errors import UsageError
from harness.ops import OPS, OpSpec


class Layout(Enum):
    NHD = "NHD"        # [N, P, Hkv, D]: the harness's own
    HND = "HND"        # [N, Hkv, P, D]: a transposed view (a copy with contiguous=True)
    ROWS = "rows"      # [N*P*Hkv, D]: one row per slot and head (pypto-style)
    SLOTS = "slots"    # [N*P, Hkv, D]: one row per slot


# -- pieces ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rename:
    names: tuple[tuple[str, str], ...]          # (op or added name, library keyword)


@dataclass(frozen=True)
class Drop:
    names: tuple[str, ...]


@dataclass(frozen=True)
class Const:
    values: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class CacheLayout:
    layouts: tuple[tuple[str, Layout], ...]
    contiguous: bool


@dataclass(frozen=True)
class PerLayer:
    names: tuple[str, ...]


@dataclass(frozen=True)
class ExpandLayers:
    names: tuple[str, ...]


class PageFormat(Enum):
    FLASHINFER = "flashinfer"    # (indptr [B+1], indices [pages], last_page_len [B])
    FIA = "fia"                  # (block_table [B, MB], actual_seq_lengths_kv: list of ints)


@dataclass(frozen=True)
class Paging:
    format: PageFormat
    names: tuple[str, ...]       # the library's names for what the format produces, in its order


@dataclass(frozen=True)
class Returns:
    outputs: tuple[str, ...]


Piece = Union[Rename, Drop, Const, CacheLayout, PerLayer, ExpandLayers, Paging, Returns]
# The order pieces apply in, whatever order they are given in.
_ORDER = (Returns, CacheLayout, PerLayer, ExpandLayers, Paging, Drop, Const, Rename)


def rename(**names: str) -> Rename:
    """``rename(query="q")``: pass the op's ``query`` as the library's ``q``."""
    return Rename(tuple(names.items()))


def drop(*names: str) -> Drop:
    """Arguments the library does not take."""
    return Drop(tuple(names))


def const(**values: Any) -> Const:
    """Extra library keywords with fixed values (drop an op argument first to replace it)."""
    return Const(tuple(values.items()))


def cache_layout(contiguous: bool = False, **layouts: str) -> CacheLayout:
    """``cache_layout(k_cache="HND", v_cache="HND")``.  Views where possible; ``contiguous=True``
    hands the library a contiguous copy, written back into the harness's cache after the call.
    ``decode_layers`` caches keep their leading ``[L]``."""
    return CacheLayout(tuple((name, _layout(value)) for name, value in layouts.items()), contiguous)


def per_layer(*names: str) -> PerLayer:
    """``decode_layers``: a ``[L, ...]`` argument as a tuple of ``L`` per-layer views."""
    return PerLayer(tuple(names))


def expand_layers(*names: str) -> ExpandLayers:
    """``decode_layers``: a weight every layer shares as ``[L, ...]``, a stride-0 view (no copy)."""
    return ExpandLayers(tuple(names))


def flashinfer_pages(indptr: str = "indptr", indices: str = "indices", last_page_len: str = "last_page_len") -> Paging:
    """``block_table`` (and ``seq_lens``) replaced by FlashInfer's page lists."""
    return Paging(PageFormat.FLASHINFER, (indptr, indices, last_page_len))


def fia_pages(block_table: str = "block_table", actual_seq_lengths_kv: str = "actual_seq_lengths_kv") -> Paging:
    """``block_table`` kept (under the given name), ``seq_lens`` as a list of ints, as torch-npu's FIA takes them."""
    return Paging(PageFormat.FIA, (block_table, actual_seq_lengths_kv))


def returns(*outputs: str) -> Returns:
    """The library returns these outputs (a tensor, or a tuple in this order; trailing extras such
    as a log-sum-exp are ignored) instead of writing them: they are not passed to it, and what it
    returns is copied into the harness's buffers."""
    return Returns(tuple(outputs))


def _layout(value: str | Layout) -> Layout | str:
    if isinstance(value, Layout):
        return value
    for layout in Layout:
        if layout.value == value:
            return layout
    return value     # not a layout: adapt() reports it, knowing the adapter's name


# -- page table conversions ------------------------------------------------------------------

def flashinfer_from_block_table(block_table: torch.Tensor, lengths: torch.Tensor, page_size: int
                                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(indptr, indices, last_page_len)``, int32: sequence ``b`` holds pages
    ``indices[indptr[b]:indptr[b+1]]`` (its first ``ceil(len/P)`` block-table entries), the last
    one filled to ``last_page_len[b]`` (``1..P``; 0 for an empty sequence)."""
    lengths = lengths.to(block_table.device).long()
    pages = (lengths + page_size - 1) // page_size
    indptr = torch.zeros(len(lengths) + 1, dtype=torch.int32, device=block_table.device)
    indptr[1:] = torch.cumsum(pages, 0)
    used = torch.arange(block_table.shape[1], device=block_table.device)[None, :] < pages[:, None]
    indices = block_table[used].to(torch.int32)                 # row-major: sequence by sequence
    last = torch.where(pages > 0, lengths - (pages - 1) * page_size, torch.zeros_like(lengths))
    return indptr, indices, last.to(torch.int32)


def block_table_from_flashinfer(indptr: torch.Tensor, indices: torch.Tensor, last_page_len: torch.Tensor,
                                page_size: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse: ``(block_table [B, width] padded with -1, lengths [B])``, int32."""
    pages = (indptr[1:] - indptr[:-1]).long()
    table = torch.full((len(pages), width), -1, dtype=torch.int32, device=indices.device)
    rows = torch.repeat_interleave(torch.arange(len(pages), device=indices.device), pages)
    cols = torch.arange(len(rows), device=indices.device) - indptr[:-1].long()[rows]
    table[rows, cols] = indices.to(torch.int32)
    lengths = torch.where(pages > 0, (pages - 1) * page_size + last_page_len.long(), torch.zeros_like(pages))
    return table, lengths.to(torch.int32)


def _kv_lengths(op: OpSpec, args: dict[str, Any]) -> torch.Tensor:
    """Positions each sequence has in the cache once the launch wrote its rows."""
    if "seq_lens" in op.arg_names:
        return args["seq_lens"]
    cu = args["cu_seqlens"]                 # prefill: context plus this chunk
    return args["context_lens"] + (cu[1:] - cu[:-1])


# -- the adapted kernel ----------------------------------------------------------------------

@dataclass(frozen=True)
class AdapterCall:
    """What one call copied: outputs the library returned as new tensors, caches it got as copies."""

    adapter: str
    copied_outputs: tuple[str, ...] = ()
    copied_caches: tuple[str, ...] = ()

    def to_metrics(self) -> dict:
        return {"name": self.adapter, "copied_outputs": list(self.copied_outputs),
                "copied_caches": list(self.copied_caches)}


@dataclass
class _Call:
    kwargs: dict[str, Any]
    write_back: list[tuple[str, Layout, torch.Tensor, torch.Tensor]] = field(default_factory=list)


def _to_layout(t: torch.Tensor, layout: Layout) -> torch.Tensor:
    lead = t.shape[:-4]                         # [L] for decode_layers
    N, P, H, D = t.shape[-4:]
    if layout is Layout.HND:
        return t.transpose(-3, -2)
    if layout is Layout.ROWS:
        return t.reshape(*lead, N * P * H, D)
    if layout is Layout.SLOTS:
        return t.reshape(*lead, N * P, H, D)
    return t


def _from_layout(t: torch.Tensor, layout: Layout, shape: torch.Size) -> torch.Tensor:
    return t.transpose(-3, -2) if layout is Layout.HND else t.reshape(shape)


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


class Adapted:
    """A library callable bound to an op's signature by pieces (see ``adapt``)."""

    def __init__(self, op: OpSpec, fn: Callable, pieces: tuple[Piece, ...], name: str):
        self.op, self.fn, self.name = op, fn, name
        self.pieces = tuple(sorted(pieces, key=lambda p: _ORDER.index(type(p))))
        self.last_call: AdapterCall | None = None
        self.__signature__ = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in op.arg_names])
        self.library_args = _check(self)

    def __repr__(self) -> str:
        return f"<adapter {self.name!r} for {self.op.name}: {getattr(self.fn, '__qualname__', self.fn)}>"

    def __call__(self, **args: Any) -> None:
        self.last_call = None
        call = _Call(dict(args))
        returned: tuple[str, ...] = ()
        for piece in self.pieces:
            if isinstance(piece, Returns):
                returned = piece.outputs
                for name in returned:
                    del call.kwargs[name]
            elif isinstance(piece, CacheLayout):
                for name, layout in piece.layouts:
                    original = call.kwargs[name]
                    laid = _to_layout(original, layout)
                    if piece.contiguous:
                        laid = laid.contiguous()
                    if not _shares_memory(laid, original):
                        call.write_back.append((name, layout, original, laid))
                    call.kwargs[name] = laid
            elif isinstance(piece, PerLayer):
                for name in piece.names:
                    call.kwargs[name] = tuple(call.kwargs[name].unbind(0))
            elif isinstance(piece, ExpandLayers):
                layers = int(args["num_layers"])
                for name in piece.names:
                    t = call.kwargs[name]
                    call.kwargs[name] = t.expand(layers, *t.shape)
            elif isinstance(piece, Paging):
                self._page(piece, call.kwargs, args)
            elif isinstance(piece, Drop):
                for name in piece.names:
                    del call.kwargs[name]
            elif isinstance(piece, Const):
                call.kwargs.update(piece.values)
            elif isinstance(piece, Rename):
                call.kwargs = {dict(piece.names).get(k, k): v for k, v in call.kwargs.items()}
        result = self.fn(**call.kwargs)
        copied = self._copy_returned(result, returned, args)
        for _, layout, original, laid in call.write_back:
            original.copy_(_from_layout(laid, layout, original.shape))
        self.last_call = AdapterCall(self.name, copied, tuple(name for name, *_ in call.write_back))
        return None

    def _page(self, piece: Paging, kwargs: dict[str, Any], args: dict[str, Any]) -> None:
        lengths = _kv_lengths(self.op, args)
        kwargs.pop("block_table")
        kwargs.pop("seq_lens", None)
        if piece.format is PageFormat.FLASHINFER:
            page_size = args["k_cache"].shape[-3]
            kwargs.update(zip(piece.names, flashinfer_from_block_table(args["block_table"], lengths, page_size)))
        else:
            kwargs.update(zip(piece.names, (args["block_table"], [int(n) for n in lengths.tolist()])))

    def _copy_returned(self, result: Any, outputs: tuple[str, ...], args: dict[str, Any]) -> tuple[str, ...]:
        if not outputs:
            return ()
        values = (result,) if isinstance(result, torch.Tensor) else (
            tuple(result) if isinstance(result, (tuple, list)) else ())
        if len(values) < len(outputs):
            raise ValueError(f"adapter {self.name!r}: the library returned {len(values)} value(s), "
                             f"expected {', '.join(outputs)}")
        copied = []
        for name, value in zip(outputs, values):
            buf = args[name]
            if not isinstance(value, torch.Tensor):
                raise ValueError(f"adapter {self.name!r}: the library returned {type(value).__name__} for {name}")
            if value.data_ptr() == buf.data_ptr() and value.shape == buf.shape:
                continue                      # it wrote the buffer after all
            if value.numel() != buf.numel():
                raise ValueError(f"adapter {self.name!r}: the library returned {name} as {tuple(value.shape)}, "
                                 f"the harness's buffer is {tuple(buf.shape)}")
            buf.copy_(value.reshape(buf.shape))
            copied.append(name)
        return tuple(copied)


def adapt(op: str, fn: Callable, *pieces: Piece, name: str) -> Adapted:
    """``fn`` (a library callable, by keywords) bound to ``op``'s signature through ``pieces``."""
    if op not in OPS:
        raise UsageError(f"adapter {name!r}: unknown op {op!r} (ops: {', '.join(OPS)})")
    for piece in pieces:
        if type(piece) not in _ORDER:
            raise UsageError(f"adapter {name!r}: {piece!r} is not an adapter piece (rename, drop, const, "
                             "cache_layout, per_layer, expand_layers, flashinfer_pages, fia_pages, returns)")
    return Adapted(OPS[op], fn, pieces, name)


# -- eager validation ------------------------------------------------------------------------

def _check(adapted: Adapted) -> tuple[str, ...]:
    """The library's keyword names, in order; a UsageError naming the adapter and the bad
    argument or layout where a piece does not fit the op."""
    op, who = adapted.op, f"adapter {adapted.name!r}"
    names = list(op.arg_names)
    layered = {a.name for a in op.args if a.shape[:1] == ("L",)}
    laid_out: set[str] = set()

    def need(piece: str, arg: str, among=None) -> None:
        if arg not in (names if among is None else among):
            raise UsageError(f"{who}: {piece}: op {op.name} has no argument {arg!r} here "
                             f"(it has: {', '.join(names if among is None else among)})")

    for piece in adapted.pieces:
        if isinstance(piece, Returns):
            outs = [a.name for a in op.outputs]
            for n in piece.outputs:
                need("returns", n, outs)
                names.remove(n)
        elif isinstance(piece, CacheLayout):
            caches = [a.name for a in op.caches]
            for n, layout in piece.layouts:
                need("cache_layout", n, caches)
                if n in laid_out:
                    raise UsageError(f"{who}: cache_layout: {n} is given a layout twice")
                laid_out.add(n)
                if not isinstance(layout, Layout):
                    raise UsageError(f"{who}: cache_layout: unknown layout {layout!r} for {n} "
                                     f"(layouts: {', '.join(lay.value for lay in Layout)})")
        elif isinstance(piece, (PerLayer, ExpandLayers)):
            label = "per_layer" if isinstance(piece, PerLayer) else "expand_layers"
            if "num_layers" not in op.arg_names:
                raise UsageError(f"{who}: {label}: op {op.name} has no layers (only decode_layers has)")
            for n in piece.names:
                need(label, n)
                if isinstance(piece, PerLayer) and n not in layered:
                    raise UsageError(f"{who}: per_layer: {n} has no [L] dimension (those that have: "
                                     f"{', '.join(sorted(layered))}); expand_layers makes one")
                if isinstance(piece, ExpandLayers) and (n in layered or op.arg(n).role == "scalar"):
                    raise UsageError(f"{who}: expand_layers: {n} is not a shared tensor to expand")
        elif isinstance(piece, Paging):
            need(f"{piece.format.value}_pages", "block_table")
            names.remove("block_table")
            if "seq_lens" in names:
                names.remove("seq_lens")
            for n in piece.names:
                if n in names:
                    raise UsageError(f"{who}: {piece.format.value}_pages: {n!r} is already an argument")
                names.append(n)
        elif isinstance(piece, Drop):
            for n in piece.names:
                need("drop", n)
                names.remove(n)
        elif isinstance(piece, Const):
            for n, _ in piece.values:
                if n in names:
                    raise UsageError(f"{who}: const: {n!r} is already an argument; drop it first")
                names.append(n)
        elif isinstance(piece, Rename):
            renamed = dict(piece.names)
            for n in renamed:
                need("rename", n)
            names = [renamed.get(n, n) for n in names]
            if len(set(names)) != len(names):
                twice = sorted({n for n in names if names.count(n) > 1})
                raise UsageError(f"{who}: rename: two arguments would both be called {', '.join(twice)}")
    try:
        sig = inspect.signature(adapted.fn)
    except (TypeError, ValueError):      # builtins and extension functions: nothing to check
        return tuple(names)
    try:
        sig.bind(**dict.fromkeys(names))
    except TypeError as exc:
        raise UsageError(f"{who}: the library callable does not take the arguments the pieces give it "
                         f"({', '.join(names)}): {exc}") from None
    return tuple(names)
