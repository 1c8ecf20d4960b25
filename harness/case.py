"""The values one expanded case carries: geometry, input modes, tolerances.

Pure data with plain-JSON wire forms, so a case crosses the pipe to a device
worker and into the store unchanged.  ``harness.casefiles`` builds these from
YAML and validates them; ``harness.worker.inputs`` turns them into tensors (through their pack's generator).
"""
from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from harness import packs
from harness.packs import PackView


@dataclass(frozen=True)
class Geometry:
    batch: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    page_size: int
    hidden: int
    intermediate: int
    vocab: int
    num_layers: int
    rope_theta: float
    eps: float
    num_pages: int | None = None   # None: derived from batch and the longest sequence

    @property
    def group(self) -> int:
        return self.num_heads // self.num_kv_heads


GEOMETRY_FIELDS = tuple(f for f in Geometry.__dataclass_fields__)

# CI-sized: every structural feature of a real decoder (GQA group > 1, several pages per
# sequence, head_dim with a real rotate-half split), CPU-cheap.  A model's own sizes are its
# pack's presets (``Pack.presets``: the Qwen3 pack's ``qwen3-14b``).
TINY = Geometry(
    batch=4, num_heads=4, num_kv_heads=2, head_dim=32, page_size=16,
    hidden=128, intermediate=256, vocab=512, num_layers=1,
    rope_theta=1_000_000.0, eps=1e-6,
)


def _presets() -> dict[str, Geometry]:
    return {**packs.presets(), "tiny": TINY}


# Geometry presets a case file may name: every pack's, then ``tiny``.
PRESETS: Mapping[str, Geometry] = PackView(_presets)


def shape_sizes(geo: Geometry, *, max_blocks: int | None = None, num_pages: int | None = None,
                rows: int | None = None) -> dict[str, int]:
    """The shape symbols of ``harness/ops/__init__.py`` in numbers (docs/contracts.md): those of the geometry,
    and those a case derives from its lengths (``MB``, ``max_pos``; ``N``; ``T``) when given."""
    sizes = {"B": geo.batch, "Hq": geo.num_heads, "Hkv": geo.num_kv_heads, "D": geo.head_dim, "P": geo.page_size,
             "H": geo.hidden, "I": geo.intermediate, "V": geo.vocab, "L": geo.num_layers}
    if max_blocks is not None:
        sizes.update(MB=max_blocks, max_pos=max_blocks * geo.page_size)
    if num_pages is not None:
        sizes["N"] = num_pages
    if rows is not None:
        sizes["T"] = rows
    return sizes


@dataclass(frozen=True)
class SeqLens:
    """``const(n)`` | ``uniform(lo, hi)`` (inclusive) | an explicit list | ``multi_block``."""

    kind: str                      # const | uniform | list | multi_block
    values: tuple[int, ...] = ()

    def max_len(self, page_size: int) -> int:
        if self.kind == "multi_block":
            return max(multi_block_lengths(page_size))
        if self.kind == "uniform":
            return self.values[1]
        return max(self.values)

    def __str__(self) -> str:
        if self.kind == "const":
            return f"const({self.values[0]})"
        if self.kind == "uniform":
            return f"uniform({self.values[0]},{self.values[1]})"
        if self.kind == "multi_block":
            return "multi_block"
        return "[" + ",".join(str(v) for v in self.values) + "]"


def multi_block_lengths(page_size: int) -> tuple[int, ...]:
    """Lengths that end just before, on, and just after page boundaries (1 to 4 pages)."""
    p = page_size
    lengths = (p - 1, p, p + 1, 2 * p - 1, 2 * p + 1, 3 * p, 3 * p + 1, 4 * p)
    return tuple(dict.fromkeys(n for n in lengths if n >= 1))   # page_size 1: no empty sequence


@dataclass(frozen=True)
class SlotMode:
    """``arange`` | ``random`` | ``const(v)`` | ``padded(f)``."""

    kind: str                      # arange | random | const | padded
    value: float | int | None = None

    def __str__(self) -> str:
        if self.kind == "const":
            return f"const({self.value})"
        if self.kind == "padded":
            return f"padded({self.value:g})"
        return self.kind


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    max_error_ratio: float
    argmax_margin: float | None = None   # logits only: golden top-2 gap below which an argmax flip is a near tie
    # atol follows the signal: each row's atol is this fraction of the golden row's RMS (one
    # head's D values), at most ``atol`` (harness/worker/ratio_allclose.py); None: atol as given
    atol_rms: float | None = None


DEFAULT_TOLERANCE = Tolerance(atol=3e-3, rtol=3e-3, max_error_ratio=0.005)
# A logits output (an LM head's, fp32) takes this one unless its pack declares another: a near
# tie of the golden's top two (``argmax_margin``) flips the argmax legitimately.
DEFAULT_LOGITS_TOLERANCE = Tolerance(atol=5e-2, rtol=2e-2, max_error_ratio=0.01, argmax_margin=5e-2)


# Precision presets (docs/contracts.md, "Precision presets"): how many roundings a kernel may do
# before it stores an output, as the tolerances that admit them; each pack declares its ops' per
# preset (``OpEntry.precision_tolerances``).  ``fp32-compute`` is the default.
PRECISIONS = ("fp32-compute", "bf16-compute")
DEFAULT_PRECISION = "fp32-compute"


def default_tolerance(op: str, name: str, precision: str = DEFAULT_PRECISION) -> Tolerance:
    """What ``name`` of ``op`` is compared with when the case file gives no tolerance: its pack's
    for the precision preset, else its pack's default, else the generic one."""
    declared = packs.find(op)
    if declared is not None:
        preset = declared.precision_tolerances.get(precision, {})
        if name in preset:
            return preset[name]
        if name in declared.tolerances:
            return declared.tolerances[name]
    return DEFAULT_LOGITS_TOLERANCE if name == "logits" else DEFAULT_TOLERANCE


# Stored dtypes (docs/contracts.md, "dtype"): the caches and every output the contract stores in
# bf16 are stored in this dtype instead; fp32 arguments (inputs, logits) stay fp32.
DTYPES = ("bf16", "fp16")
DEFAULT_DTYPE = "bf16"


_TOLERANCE_FIELDS = tuple(Tolerance.__dataclass_fields__)

# How peaked the generated attention is (docs/cases.md, "attention"): the spread of the
# attention logits, in units of the logits' standard deviation.  q and k are unit-RMS after
# the QK-norm, so ``scale·q·k`` is about N(0, 1) per key ("uniform": the inputs before
# this axis, nearly flat softmax over long sequences); the q/k norm weights (or the
# query and the cached keys) are scaled by sqrt(spread), making the logits about
# N(0, spread²).  "peaked" is the default: over thousands of keys a handful carry most of
# the weight, as in real models, so the output keeps an O(1) magnitude and a wrong page
# or one key too few moves it by more than the tolerance.
ATTENTION_SPREADS: dict[str, float] = {"uniform": 1.0, "peaked": 2.0, "sharp": 3.0}
DEFAULT_ATTENTION = "peaked"


@dataclass(frozen=True)
class LatencySpec:
    """How a case is timed after its checks pass (``--latency``, a case file's ``latency:`` block;
    docs/latency.md).  Sampling stops when the median's 95% interval is within ``target`` of it
    (relative half-width) or after ``budget_s`` of samples, whichever comes first."""

    target: float = 0.02
    budget_s: float = 1.0
    warmup_s: float = 0.1
    cold: bool | None = None       # flush the caches before each sample; None: on for accelerators
    restore: bool = False          # writable buffers back to their pre-launch bytes before each sample
    min_samples: int = 10
    max_samples: int = 5000
    clock: str = "auto"            # host: "cpu" (the process's CPU time, auto) or "wall"; accelerators: events

    def to_wire(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class Case:
    case_id: str
    matrix: str                     # the matrix name (file stem unless `name:` is given)
    source: str                     # "cases/decode.yaml:12": where the case was defined
    op: str
    kernel: str                     # builtin name or "package.module:callable"
    geometry: Geometry
    seq_lens: SeqLens
    slot_mode: SlotMode
    seed: int
    tolerance: dict[str, Tolerance] = field(default_factory=dict)  # per output/cache name; missing → default
    chunk_size: int | None = None
    block_value: int | None = None
    scratch_pages: int | None = None
    timeout_s: float = 60.0
    env: dict[str, str] = field(default_factory=dict)
    tier: str = "ci"
    params: dict[str, Any] = field(default_factory=dict)   # every value the case was given, for reports
    command: dict[str, Any] | None = None   # a command case's wire form (harness.commands); None: a kernel case
    latency: LatencySpec | None = None                      # timed after its checks pass (docs/latency.md)
    attention: str = DEFAULT_ATTENTION                      # a key of ATTENTION_SPREADS
    precision: str = DEFAULT_PRECISION   # one of PRECISIONS: the tolerances' preset
    dtype: str = DEFAULT_DTYPE           # bf16 | fp16: the stored dtype of caches and bf16 outputs
    # A spec op's case (docs/specs.md): its module, golden, build params, comparators and the
    # table of its tensors (``harness.ops.spec_op``); None: a builtin op of harness/ops/__init__.py
    spec: dict[str, Any] | None = None

    @property
    def op_spec(self):
        """The op's contract as data: ``harness.ops.OPS[op]``, or the spec op's built from its table."""
        from harness.ops import OPS, spec_op
        return spec_op(self.spec) if self.spec is not None else OPS[self.op]

    # -- derived geometry --------------------------------------------------
    @property
    def max_blocks(self) -> int:
        """MB: blocks per sequence, enough for the longest sequence the spec can produce."""
        return max(1, math.ceil(self.seq_lens.max_len(self.geometry.page_size) / self.geometry.page_size))

    @property
    def max_pos(self) -> int:
        return self.max_blocks * self.geometry.page_size

    @property
    def num_pages(self) -> int:
        if self.scratch_pages is not None:
            return self.scratch_pages
        if self.geometry.num_pages is not None:
            return self.geometry.num_pages
        return self.geometry.batch * self.max_blocks

    def sizes(self, rows: int) -> dict[str, int]:
        """Every shape symbol in numbers; ``rows``: the rows one launch writes (``T`` of prefill)."""
        return shape_sizes(self.geometry, max_blocks=self.max_blocks, num_pages=self.num_pages, rows=rows)

    def tolerance_for(self, name: str) -> Tolerance:
        if name in self.tolerance:
            return self.tolerance[name]
        return default_tolerance(self.op, name, self.precision)

    # -- wire form ---------------------------------------------------------
    def to_wire(self) -> dict[str, Any]:
        # Written out rather than dataclasses.asdict: this runs once per case launch, and
        # asdict's deep copy was a third of the harness's per-case overhead.
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["geometry"] = {name: getattr(self.geometry, name) for name in GEOMETRY_FIELDS}
        data["seq_lens"] = {"kind": self.seq_lens.kind, "values": list(self.seq_lens.values)}
        data["slot_mode"] = {"kind": self.slot_mode.kind, "value": self.slot_mode.value}
        data["tolerance"] = {name: {f: getattr(tol, f) for f in _TOLERANCE_FIELDS}
                             for name, tol in self.tolerance.items()}
        data["env"] = dict(self.env)
        data["params"] = copy.deepcopy(self.params)
        if self.command is not None:
            data["command"] = copy.deepcopy(self.command)
        if self.spec is not None:
            data["spec"] = copy.deepcopy(self.spec)
        data["latency"] = self.latency.to_wire() if self.latency else None
        return data

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> "Case":
        data = dict(data)
        data["geometry"] = Geometry(**data["geometry"])
        data["seq_lens"] = SeqLens(data["seq_lens"]["kind"], tuple(data["seq_lens"]["values"]))
        data["slot_mode"] = SlotMode(data["slot_mode"]["kind"], data["slot_mode"]["value"])
        data["tolerance"] = {k: Tolerance(**v) for k, v in data["tolerance"].items()}
        data["latency"] = LatencySpec(**data["latency"]) if data.get("latency") else None
        data.setdefault("spec", None)
        return cls(**data)

    def with_seed(self, seed: int) -> "Case":
        return replace(self, seed=seed)

    def with_latency(self, spec: LatencySpec | None) -> "Case":
        return replace(self, latency=spec)
