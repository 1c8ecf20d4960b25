"""A case's memory, estimated from its geometry before anything is allocated (docs/cases.md, "Memory plan").

Pure arithmetic over ``harness/ops/__init__.py`` and ``harness/case.py``: no torch, so the front end
can refuse a case no machine holds when the matrix is expanded, and skip one the device it
is scheduled on cannot hold, before a worker allocates a byte.  The parts follow what the
worker does with one case:

  inputs       read-only arguments, generated on the case's device (``harness/worker/inputs.py``)
  caches       the caches in their pre-launch state, generated there too
  outputs      the poisoned output buffers
  guard_bands  the bands around every writable buffer (``harness/worker/launch.py``)
  pristine     the input guard's copy of every read-only input (``harness/worker/input_guard.py``)
  golden       the golden's results (with their ``@exact`` twins and the golden cache's copy),
               computed on the host in fp32 or fp64, and its peak working set
  generation   the biggest transient of input generation (a weight drawn in fp32, then rounded)
  checks       the biggest transient of the checks (which cache rows changed: one bool per
               element of one layer's cache, compared a layer at a time)

A builtin op's plan is its pack's (``Pack.memory_plan``, the golden's parts being what only
the pack knows); a pack that declares none gets ``contract_plan``, read from the op's
contract alone.  A spec op's plan is read from its table (``_spec_plan``).

What a worker keeps between repeats of a case, to restore instead of generating again, is
``kept_bytes``; ``keep_fits`` says whether it may keep it.

On an accelerator the device holds the generated inputs and caches, the launch (pristine,
the caches' guarded copy, guards, outputs) and what the checks read there (the goldens and
their temporaries); the host holds the golden process's share: the same inputs and caches
drawn on the host, the golden and its working set.  With ``--golden-device`` set to the
case's own accelerator that share moves to the device (the host keeps the golden's copy it
writes to the cache file).  On the CPU the two are one memory: the kernel gets the
generated inputs themselves, and the caches a guarded copy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from harness import packs
from harness.case import Case
from harness.devices import Device, Memory
from harness.ops import OPS, resolve_shape

GOLDEN_DTYPE_BYTES = {"fp32": 4, "fp64": 8}
# Every dtype a contract or a spec op's tensor may have (harness/worker/spec_module.py), by its torch
# name; one it does not know counts as the widest (``dtype_bytes``), so a plan is never low.
DTYPE_BYTES = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "int32": 4, "int16": 2,
               "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
               "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1}
# launch.py's smallest guard band, each side of every writable buffer.
MIN_GUARD_BYTES = 4096
# What the allocator itself moves a case's peak by between runs (measured: 50.3-51.0 MB for one
# layered case of 51 MB planned): a plan that is an upper bound must include it.
ALLOCATOR_SLACK = 2 << 20


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes per part of one case (see the module docstring); ``host``/``device`` per device kind."""

    inputs: int
    caches: int
    outputs: int
    guard_bands: int
    pristine: int
    golden: int            # the golden's results, their @exact twins and the golden cache's copy: held to the end
    golden_working: int    # the golden's peak temporaries while it computes
    generation: int        # input generation's biggest temporary
    checks: int            # the checks' biggest temporary (a layer-sized mask of changed elements)
    # the golden's intermediates (docs/intermediates.md) and their @exact twins: the golden process
    # records them all while it computes (the worker reads them one at a time from the file)
    golden_intermediates: int = 0

    @property
    def launch(self) -> int:
        """What the kernel's device holds during the launch."""
        return self.inputs + self.pristine + self.caches + self.guard_bands + self.outputs

    @property
    def transient(self) -> int:
        """The host's biggest temporary (generation, the golden and the checks run one after another),
        an eighth of the held bytes for the small temporaries not itemised (measured: the
        itemised parts come within 1% of the peak on the CPU), and ``ALLOCATOR_SLACK`` for the
        allocator's own noise, which alone moved one case's peak by 0.7 MB between runs."""
        held = self.launch + self.caches + self.golden
        return max(self.golden_working, self.generation, self.checks) + held // 8 + ALLOCATOR_SLACK

    def device_bytes(self, kind: str, golden_here: bool = False) -> int:
        """Peak bytes on the device the case runs on (``cpu``: the whole case, host included);
        ``golden_here``: the golden process computes on this accelerator too (``--golden-device``)."""
        if kind == "cpu":   # generated inputs are handed over as they are; caches get a guarded copy
            return self.launch + self.caches + self.golden + self.golden_intermediates + self.transient
        # the generated caches stay beside their guarded copy; the checks bring the goldens
        own = self.launch + self.caches + self.golden + max(self.generation, self.checks)
        return own + (self.golden_share if golden_here else 0)

    def host_bytes(self, kind: str, golden_on_host: bool = True) -> int:
        """Peak bytes on the host; for ``cpu`` the same figure as ``device_bytes``.  Off the CPU the
        host holds the golden process's share, or only the golden's copy for the cache file when
        the golden is computed on an accelerator (``golden_on_host`` False)."""
        if kind == "cpu":
            return self.device_bytes(kind)
        return self.golden_share if golden_on_host else self.golden

    @property
    def golden_share(self) -> int:
        """The golden process's bytes for the case: its own draw of the inputs and caches, the
        golden and its working set, and an eighth of the held bytes for small temporaries."""
        drawn = self.inputs + self.caches + self.golden
        return drawn + self.golden_intermediates + max(self.golden_working, self.generation) + drawn // 8

    def kept_bytes(self, kind: str) -> tuple[int, int]:
        """(device, host) bytes a worker keeps between repeats of the case (``harness/worker/repeats.py``):
        the generated inputs and caches (the caches are the pristine copy the buffers are restored
        from), the guarded caches and outputs on the device, and the goldens on the host.  On the
        CPU both figures are the one memory's."""
        device = self.inputs + 2 * self.caches + self.guard_bands + self.outputs
        if kind == "cpu":
            return device + self.golden, device + self.golden
        return device, self.golden

    @property
    def total(self) -> int:
        """The most any one machine must hold to run the case, wherever it runs."""
        return max(self.device_bytes("cpu"), self.device_bytes("npu"), self.host_bytes("npu"))

    def parts(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def rows_bound(case: Case) -> int:
    """Rows one launch writes: the batch, or for an op whose rows belong to sequences
    (``OpEntry.rows_by_sequence``) an upper bound on them (every sequence at its longest chunk)."""
    if not packs.entry(case.op).rows_by_sequence:
        return case.geometry.batch
    longest = case.seq_lens.max_len(case.geometry.page_size)
    return case.geometry.batch * min(case.chunk_size or longest, longest)


def plan(case: Case, golden_dtype: str = "fp32") -> MemoryPlan:
    """The memory plan of ``case``, its golden in ``golden_dtype``: a spec op's from its table, a
    builtin op's from its pack (``Pack.memory_plan``), else from its contract (``contract_plan``)."""
    if case.spec is not None:
        return _spec_plan(case)
    own = packs.pack_of(case.op).memory_plan
    return own(case, golden_dtype) if own is not None else contract_plan(case, golden_dtype)


def dtype_bytes(dtype: str) -> int:
    return DTYPE_BYTES.get(dtype, 8)


def golden_bytes(golden_dtype: str) -> int:
    """Bytes of one golden element; a dtype the plan does not know: the widest, never low."""
    return GOLDEN_DTYPE_BYTES.get(golden_dtype, 8)


def contract_plan(case: Case, golden_dtype: str = "fp32") -> MemoryPlan:
    """A builtin op's plan from its contract (``harness/ops/__init__.py``) alone, its shapes resolved with
    ``rows_bound``: the inputs, caches and outputs in their dtypes, their guard bands, the pristine
    copy, generation and the checks, as the worker sizes them for any op.  What only the op's golden
    knows is bounded from above: it returns every output and every cache whole, each with an
    ``@exact`` twin, and the golden cache keeps a copy (``golden``); it works on every input and
    cache upcast (``golden_working``).  A pack that knows better declares ``Pack.memory_plan``
    (typically this plan with those two parts replaced)."""
    op = OPS[case.op]
    sizes = case.sizes(rows_bound(case))

    def numel(arg) -> int:
        return math.prod(resolve_shape(arg.shape, sizes))

    inputs = sum(numel(a) * dtype_bytes(a.dtype) for a in op.by_role("input"))
    g = golden_bytes(golden_dtype)
    return MemoryPlan(
        inputs=inputs,
        caches=sum(numel(a) * dtype_bytes(a.dtype) for a in op.caches),
        outputs=sum(numel(a) * dtype_bytes(a.dtype) for a in op.outputs),
        guard_bands=2 * sum(_guard_bytes(a, sizes) for a in op.caches + op.outputs),
        pristine=inputs,
        golden=2 * 2 * g * sum(numel(a) for a in op.outputs + op.caches),
        golden_working=g * sum(numel(a) for a in op.by_role("input") + op.caches),
        generation=4 * max((numel(a) for a in op.by_role("input")), default=0),   # drawn in fp32
        checks=max((numel(a) // _layers(a, sizes) for a in op.caches), default=0),   # one bool per element
        golden_intermediates=_golden_intermediates(case, sizes, g),
    )


def _spec_plan(case: Case) -> MemoryPlan:
    """A spec op's plan from its table (docs/specs.md): its inputs and outputs in their dtypes; its
    golden holds its outputs in theirs, twice (two runs, to find an output it leaves unwritten),
    the copies of its inputs it is handed, and the inputs made twice (the reproducibility check)."""
    op = case.op_spec

    def nbytes(arg) -> int:
        return math.prod(int(n) for n in arg.shape) * dtype_bytes(arg.dtype)

    inputs = sum(nbytes(a) for a in op.by_role("input"))
    outputs = sum(nbytes(a) for a in op.outputs)
    return MemoryPlan(
        inputs=inputs + outputs,           # the outputs as the spec initialises them are made with the inputs
        caches=0, outputs=outputs, guard_bands=2 * MIN_GUARD_BYTES * len(op.outputs), pristine=inputs,
        golden=2 * outputs, golden_working=2 * inputs + 4 * outputs, generation=inputs + outputs,
        checks=max((math.prod(int(n) for n in a.shape) * 8 for a in op.outputs), default=0),
        golden_intermediates=0,
    )


def _golden_intermediates(case: Case, s: dict[str, int], g: int) -> int:
    """The intermediates the golden records (harness/intermediates/spec.py), twice (the ``@exact``
    twins), ``g`` bytes per element."""
    from harness.intermediates.spec import intermediates, shape_of

    rows = rows_bound(case)
    items = intermediates(case.op, s["L"])
    return 2 * g * sum(math.prod(shape_of(i, s, rows)) for i in items)


def _layers(arg, sizes: dict[str, int]) -> int:
    """The layers of a per-layer cache (its first dim, ``L``), else 1: the checks compare one at a time."""
    return sizes["L"] if arg.shape[0] == "L" else 1


def _guard_bytes(arg, sizes: dict[str, int]) -> int:
    """One side's band, as launch.py sizes it: caches at least one page of rows."""
    if arg.role != "cache":
        return MIN_GUARD_BYTES
    return max(MIN_GUARD_BYTES, math.prod(resolve_shape(arg.shape, sizes)[-3:]) * dtype_bytes(arg.dtype))


def human_bytes(n: int) -> str:
    """``343 GB``, ``1.2 MB``: decimal units, three significant figures; any int (no float overflow)."""
    for unit, scale in (("EB", 10**18), ("PB", 10**15), ("TB", 10**12), ("GB", 10**9), ("MB", 10**6),
                        ("kB", 10**3)):
        if n >= scale:
            whole = n // scale
            if whole >= 10**6:       # past float range for the hugest geometries: digits, not float
                digits = str(whole)
                return f"{digits[0]}.{digits[1:3]}e{len(digits) - 1} {unit}"
            return f"{n / scale:.3g} {unit}" if whole < 1000 else f"{whole} {unit}"
    return f"{n} B"


def fit_problem(plan: MemoryPlan, device: Device, on_device: Memory | None, on_host: Memory | None,
                golden_device: str = "cpu") -> str | None:
    """Why ``plan`` cannot run on ``device`` now (``needs 343 GB; cpu has 23 GB available``), or None.
    A memory with no figure (None) is not held against the case.  ``golden_device``: where the
    golden process computes (``--golden-device``); on the case's accelerator its share is
    counted there.  (With prefetch the next case's golden may be computed beside this case:
    the plan counts this case's.)"""
    checks = [(str(device), plan.device_bytes(device.kind, golden_here=golden_device == str(device)), on_device)]
    if device.kind != "cpu":
        checks.append(("the host", plan.host_bytes(device.kind, golden_on_host=golden_device == "cpu"), on_host))
    for where, need, memory in checks:
        if memory is not None and need > memory.available:
            place = "" if device.kind == "cpu" else f" on {where}"
            return f"needs {human_bytes(need)}{place}; {where} has {human_bytes(memory.available)} available"
    return None


def keep_fits(kept: list[MemoryPlan], kind: str, on_device: Memory | None, on_host: Memory | None,
              held: tuple[int, int]) -> bool:
    """Whether a worker may keep the repeat state of every case in ``kept`` (``kept_bytes``) and still
    run the biggest of them once more.  ``on_device``/``on_host``: measured now, while the worker
    holds ``held`` (device, host) bytes that keeping would not add.  A memory with no figure keeps
    nothing but the newest state (one case, as a worker without reuse would hold while it runs)."""
    if not kept:
        return True
    memories = [(0, on_device)] if kind == "cpu" else [(0, on_device), (1, on_host)]
    for side, memory in memories:
        if memory is None:
            if len(kept) > 1:
                return False
            continue
        room = memory.available + held[side]
        need = sum(p.kept_bytes(kind)[side] for p in kept)
        # a repeat of one of them needs its peak beyond what it keeps
        peak = max((p.device_bytes(kind) if side == 0 else p.host_bytes(kind)) - p.kept_bytes(kind)[side]
                   for p in kept)
        if need + max(peak, 0) > room:
            return False
    return True
