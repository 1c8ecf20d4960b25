"""The mutation operators as data: name, the bug class, the ops each applies to.

The core holds the generic ones, which apply to every op of every pack (and to spec ops);
each op pack declares those that only its ops can show (``Pack.operators``).  ``OPERATORS``
is all of them, in the order their ``position`` gives (``harness/packs/``, loaded on first use).

The operators themselves run in the device worker (``harness.kernels.mutants.operators``);
the front end only picks the cases each applies to and names the kernel that wraps the
case's own.  Output-side operators wrap any kernel; ``internal`` ones act inside the
computation and apply to cases whose kernel is the reference only.  The ``generic`` ones
also apply to spec ops (docs/specs.md): the output they act on and the input they write
are read from the case's own table (``target_output``, ``target_input``) and travel in its
environment, since the wrapper sees only ``fn(**tensors)``.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from harness import packs
from harness.case import Case
from harness.errors import UsageError

# The worker side's names (kernels/mutants/operators.py), kept here as data: the front end
# does not import a kernel module.
WRAPPER = "harness.kernels.mutants.operators"
MUTANT_VAR = "HARNESS_MUTANT"
KERNEL_VAR = "HARNESS_MUTANT_KERNEL"
DELTA_VAR = "HARNESS_MUTANT_DELTA"
SHAPE_VAR = "HARNESS_MUTANT_SHAPE"
OUTPUT_VAR = "HARNESS_MUTANT_OUTPUT"     # which output (default the op's first; a spec op's always set)
INPUT_VAR = "HARNESS_MUTANT_INPUT"       # input_clobber: which input (default the op's first; a spec op's set)
SPEC_WRAPPER = WRAPPER + ":spec_op"     # a spec op's kernel is one callable, whatever its op's name
REFERENCE = "reference"
HEAD_PERTURBED = "head_perturbed"      # the operator whose delta the sensitivity search sets

class OperatorError(UsageError):
    """``--mutants`` names an operator that does not exist."""


@dataclass(frozen=True)
class Operator:
    name: str
    bug: str                            # the bug class, in words
    ops: tuple[str, ...] | None         # the ops it applies to; None: every op of every pack
    internal: bool = False              # acts inside the computation: reference kernel only
    needs_negative_slot: bool = False   # only a row with slot < 0 can show it
    needs_valid_slot: bool = False      # only a row with slot >= 0 can show it
    perturbs_value: bool = False        # a finite change to an output's values: a tolerance can admit it
    generic: bool = False               # also applies to spec ops (acts on their table's first output/input)
    needs_float: bool = False           # acts on values: a spec op needs a floating output
    needs_input: bool = False           # writes an input: a spec op needs an input tensor
    needs_two_rows: bool = False        # only an output of two rows or more can show it
    # where it stands in OPERATORS (ties: the core's, then each pack's in its order): the core's
    # generic ones stand at 10-50, a pack's at 100 unless it places one among them
    position: int = 100

    def applies_to(self, case: Case) -> bool:
        if case.spec is not None:
            return self.generic and (not self.needs_float or bool(value_outputs(case))) and \
                (not self.needs_input or bool(case.op_spec.by_role("input")))
        return (self.ops is None or case.op in self.ops) and (not self.internal or case.kernel == REFERENCE)


def _floating(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def value_outputs(case: Case) -> tuple[str, ...]:
    """The outputs whose values an operator may scale or make NaN, the first being the one it
    does by default: a builtin op's every output, a spec op's floating ones."""
    outputs = case.op_spec.outputs
    return tuple(a.name for a in outputs if case.spec is None or _floating(a.dtype))


def target_output(case: Case, operator: "Operator") -> str:
    """The output ``operator`` acts on by default: the first (a value operator: the first floating)."""
    if operator.needs_float:
        return value_outputs(case)[0]
    return case.op_spec.outputs[0].name


def target_rows(case: Case, operator: "Operator") -> int:
    """The rows (first dim) of the output ``operator`` acts on (1 when it has no dims)."""
    shape = case.op_spec.arg(target_output(case, operator)).shape
    return int(shape[0]) if shape and shape[0].isdigit() else 1


def target_input(case: Case) -> str:
    """The input ``input_clobber`` writes: the op's first input tensor."""
    return case.op_spec.by_role("input")[0].name


# The core's operators: they act on any op's outputs and inputs, whatever its pack.
GENERIC: tuple[Operator, ...] = (
    Operator("half_written", "half of one output left as the kernel found it", None, generic=True, position=10),
    Operator("nan_element", "one output element NaN", None, generic=True, needs_float=True, position=20),
    Operator("head_perturbed", "one head (or one block of a row) of one output scaled by (1 + delta)", None,
             perturbs_value=True, generic=True, needs_float=True, position=30),
    Operator("input_clobber", "an input tensor overwritten after the launch", None, generic=True, needs_input=True,
             position=40),
    # spec ops only: a builtin op's rows may be a cache's or padding
    Operator("row_dropped", "one row of one output dropped: its last row holds the row before it", (),
             generic=True, needs_two_rows=True, position=50),
)


def operators() -> tuple[Operator, ...]:
    """Every operator, the core's and every pack's, in the order of their ``position``."""
    found = GENERIC + tuple(o for pack in packs.packs() for o in pack.operators)
    return tuple(sorted(found, key=lambda o: o.position))


def by_name() -> dict[str, Operator]:
    return {o.name: o for o in operators()}


def __getattr__(name: str):
    """``OPERATORS`` and ``BY_NAME``, read from the packs when first asked (not at import: a pack
    imports ``Operator`` from here)."""
    if name == "OPERATORS":
        return operators()
    if name == "BY_NAME":
        return by_name()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def parse_mutants(text: str | None) -> tuple[Operator, ...]:
    """``--mutants a,b``: those operators in the order given; None: every operator."""
    if not text:
        return operators()
    known = by_name()
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise OperatorError(f"--mutants {text!r}: no operator {', '.join(unknown) or '(empty)'} "
                            f"(operators: {', '.join(known)})")
    return tuple(known[n] for n in dict.fromkeys(names))


def mutated(case: Case, operator: Operator, delta: float | None = None, shape: str = "head",
            output: str | None = None) -> Case:
    """``case`` run by the wrapper with ``operator`` around its own kernel; id unchanged
    (``delta``, ``shape``, ``output``: what ``head_perturbed`` scales, and by how much; delta has
    no default, output defaults to the op's first)."""
    if operator.name == "head_perturbed" and delta is None:
        raise ValueError("head_perturbed needs a delta")
    if case.spec is not None:     # the wrapper cannot tell a spec op's outputs from its inputs: it is told
        output = output or target_output(case, operator)
    env = {**case.env, MUTANT_VAR: operator.name, KERNEL_VAR: case.kernel, SHAPE_VAR: shape,
           **({} if delta is None else {DELTA_VAR: repr(delta)}), **({OUTPUT_VAR: output} if output else {}),
           **({INPUT_VAR: target_input(case)} if case.spec is not None and operator.needs_input else {})}
    return replace(case, kernel=WRAPPER if case.spec is None else SPEC_WRAPPER, env=env)


def applicable(cases: Sequence[Case], operator: Operator) -> list[Case]:
    return [c for c in cases if operator.applies_to(c)]
