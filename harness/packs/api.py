"""What an op pack declares (docs/architecture.md, "Op packs").

A pack is data: the ops it brings, each with its contract, tolerances, intermediates and the
knowledge the generic machinery asks of it, and the pack-wide parts (its input generator, its
builtin kernels and mutants, its hint finders, mutation operators and coverage conditions).
The front end reads a pack without torch: every worker-side part is named by import path
(``package.module`` or ``package.module:function``) and imported where it runs.

A TensorSpec module (docs/specs.md) is the smallest form: one op, its inputs drawn by its
specs, its golden written in place; a pack is what an op needs beyond that.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.comparators import parse_comparator

# The annotations name harness.ops.OpSpec, harness.case's Case, Geometry and Tolerance,
# harness.intermediates.spec.Intermediate and harness.memory_plan.MemoryPlan without importing
# them: those modules look packs up, so the API they are declared with imports none of them
# (harness.comparators looks nothing up).


@dataclass(frozen=True)
class OpEntry:
    """One op of a pack: everything the core asks of it, by name."""

    contract: "OpSpec"
    # per argument, what its indices mean: the layout column of docs/contracts.md and `harness ops`
    layouts: Mapping[str, str]
    # the golden: a module with ``compute(inputs, dtype, *, record=None, rounding=True) -> dict``
    # and ``ROUNDING_CHANGES`` (docs/contracts.md, "Rounding spread"), in the golden process only
    golden: str
    # per output or cache: the tolerance a case gets when its file gives none
    tolerances: Mapping[str, "Tolerance"] = field(default_factory=dict)
    # per precision preset (harness.case.PRECISIONS): per output or cache, the tolerance it admits
    precision_tolerances: Mapping[str, Mapping[str, "Tolerance"]] = field(default_factory=dict)
    # its named intermediates in dataflow order, given the case's layer count (docs/intermediates.md)
    intermediates: Callable[[int], tuple["Intermediate", ...]] | None = None
    # the output every intermediate takes the tolerance of; None: each its own nearest output
    intermediate_tolerance: str | None = None
    # the shape symbol that counts the rows one launch writes, and what one is called in a report
    rows: str = "B"
    row_noun: str = "row"
    # the rows belong to sequences (several rows a sequence): findings are grouped by sequence
    rows_by_sequence: bool = False
    # case-file keys only this op takes (validated by harness/casefiles/matrix.py)
    case_keys: tuple[str, ...] = ()
    # the condition under which a row is written, as the contract table states it (Markdown)
    write_condition: str | None = None
    # a layer count ``L`` stacks the op (its intermediates and cache writes repeat per layer)
    layered: bool = False
    # per output: the comparator it is judged by instead of the elementwise one, in the text form of
    # a spec case's ``compare:`` (harness/comparators.py), e.g. ``{"topk_indices": "topk_pairs(topk_values)"}``
    compare: Mapping[str, str] = field(default_factory=dict)
    # worker-side checks of its own: "module:function", each ``(case, ci, launched, goldens, metrics)
    # -> list[Finding]``, called after the generic checks (harness/worker/checks.py) on every launch
    checks: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.contract.name


@dataclass(frozen=True)
class Pack:
    """A family of ops and what ships with them."""

    name: str
    ops: Mapping[str, OpEntry]
    # builtin kernel name -> {op -> "package.module:callable"}: the reference, adapted library
    # kernels and mutants the pack ships (the names ``--kernel`` and case files take)
    kernels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # the worker-side input generator: a module with ``generate(case, device) -> CaseInputs`` and
    # ``input_spec(case) -> dict`` (the golden cache key's inputs part) and ``source_hash()``
    inputs: str = ""
    # worker-side finders of what a wholesale MISMATCH looks like: "module:function", each
    # ``(case, ci, golden, compared, mismatched, golden_dtype) -> str | None``, asked in order after
    # the generic ones until one names something (harness/worker/hints.py)
    hints: tuple[str, ...] = ()
    # worker-side: "module:function" ``(ci, row_bytes, layers) -> (bytes_read, flops | None)`` what an op
    # moves beyond its inputs, outputs and cache rows written (harness/worker/work.py), and its flops
    work: str | None = None
    # front end, torch-free: ``(case, golden_dtype) -> MemoryPlan`` before anything is allocated
    memory_plan: Callable[["Case", str], "MemoryPlan"] | None = None
    # front end: mutation operators (harness.audit.operators.Operator) that apply to its ops
    operators: tuple[Any, ...] = ()
    # front end: the boundary conditions `harness audit` looks for, (name, text, test(case))
    conditions: tuple[tuple[str, str, Callable[["Case"], bool]], ...] = ()
    # front end: the rows one launch writes for a case (None: known only once lengths are drawn)
    rows: Callable[["Case"], int | None] | None = None
    # geometry presets a case file may name (``geometry: qwen3-14b``)
    presets: Mapping[str, "Geometry"] = field(default_factory=dict)

    def __post_init__(self):
        for name, entry in self.ops.items():
            if entry.name != name:
                raise ValueError(f"pack {self.name}: op {name!r} declares the contract of {entry.name!r}")
            for arg in entry.contract.args:
                if arg.name not in entry.layouts:
                    raise ValueError(f"pack {self.name}: op {name} has no layout for argument {arg.name!r}")
            outputs = {a.name for a in entry.contract.outputs}
            for output, text in entry.compare.items():
                if output not in outputs:
                    raise ValueError(f"pack {self.name}: op {name} declares a comparator for {output!r}, "
                                     f"not one of its outputs")
                parse_comparator(text)      # ValueError with the reason
        for kernel, table in self.kernels.items():
            unknown = sorted(set(table) - set(self.ops))
            if unknown:
                raise ValueError(f"pack {self.name}: kernel {kernel!r} names ops it does not have: {unknown}")
