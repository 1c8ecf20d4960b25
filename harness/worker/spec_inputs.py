"""A spec op's inputs and golden (docs/specs.md): the module's tensors created from the case's seed,
and its golden run in the golden process with what a kernel gets there (its outputs checked
for being written, its inputs for being left alone).

``harness.worker.inputs`` hands a case with ``spec`` here; the rest of the
worker (launch, checks, digest, repeats) reads the ``CaseInputs`` it returns as it reads a
builtin op's.  The golden process calls ``golden_for(case)``: a ``Golden`` the golden cache
keys and stores as it does a builtin op's (``goldens/cache.py``).
"""
from __future__ import annotations

from typing import Any

import torch

from harness.case import Case
from harness.goldens.cache import Golden
from harness.intermediates.spec import declares_dump
from harness.worker import spec_module
from harness.worker.case_inputs import CaseInputs
from harness.worker.input_digest import digest_inputs
from harness.worker.input_guard import bits
from harness.worker.spec_module import SpecError


def input_spec(case: Case, module=None) -> dict[str, Any]:
    """The canonical description of a spec case's inputs (the golden cache key's ``spec``): the
    module, its source hash, the golden, the params, the seed, the seeding and the table."""
    spec = case.spec
    module = module or spec_module.import_module(spec["module"])
    return {"spec_module": spec["module"], "source": spec_module.source_hash(module), "golden": spec["golden"],
            "params": spec["params"], "seed": case.seed, "seeding": spec_module.SEEDING, "args": spec["args"]}


def _created(case: Case):
    spec = case.spec
    module, entries, values = spec_module.created(spec["module"], spec["params"], case.seed)
    now = spec_module.table(entries)
    if now != spec["args"]:
        raise SpecError(f"spec module {spec['module']}: build_tensor_specs({spec['params']}) gave another table "
                        f"than when the case file was loaded: {_table_diff(spec['args'], now)}")
    return module, entries, values


def _table_diff(was: list, now: list) -> str:
    for a, b in zip(was, now):
        if a != b:
            return f"{a} then, {b} now"
    return f"{len(was)} specs then, {len(now)} now"


def generate(case: Case, device: torch.device):
    """The ``CaseInputs`` of a spec case: inputs and scalars in ``args`` (inputs on ``device``),
    outputs as (shape, dtype) and, in ``initial``, as the spec initialises them (on the host)."""
    module, entries, values = _created(case)
    op = case.op_spec
    args: dict[str, Any] = {}
    outputs: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
    initial: dict[str, torch.Tensor] = {}
    for e in entries:
        if isinstance(e, spec_module.TensorEntry) and e.is_output:
            outputs[e.name] = (e.shape, e.dtype)
            initial[e.name] = values[e.name]
        else:
            v = values[e.name]
            args[e.name] = v.to(device) if isinstance(v, torch.Tensor) else v
    empty = torch.zeros(0, dtype=torch.int64)
    return CaseInputs(op=op, args=args, outputs=outputs, slots=empty, row_seq=empty, sizes={},
                      spec=input_spec(case, module), initial=initial)


class SpecGolden(Golden):
    """A spec module's golden, in the golden process: run on copies of the inputs with the outputs as
    the spec initialises them, written in place.  It is user code: whatever goes wrong is a
    ``SpecError`` (the case's ``GOLDEN_ERROR``): it raises, it writes an input, it leaves an
    output unwritten (run once more with every output's bits inverted: an element unchanged in
    both runs was never written), or the inputs differ between two creations with the same seed."""

    def __init__(self, case: Case) -> None:
        self.case = case
        self.op = case.op
        self._module = spec_module.import_module(case.spec["module"])
        self._golden_name, self._fn = spec_module.golden_function(self._module, case.spec["golden"])
        self._outputs = tuple(a.name for a in case.op_spec.outputs)
        self._dtypes = {a["name"]: spec_module.torch_dtype(a["dtype"], a["name"])
                        for a in case.spec["args"] if a["role"] == "output"}
        self._digest = ""
        # INTERMEDIATES: the names its golden may dump (docs/intermediates.md); the golden gets
        # ``dump`` when it declares it, recording only in the first of its two runs
        self._intermediates = tuple(name for name, _ in case.spec.get("intermediates") or ())
        self._dumps = declares_dump(self._fn)

    def source_hash(self) -> str:
        return f"{spec_module.source_hash(self._module)}:{self._golden_name}"

    def names(self) -> tuple[str, ...]:
        return self._outputs

    def dtype(self, name: str, golden_dtype: torch.dtype) -> torch.dtype:
        return self._dtypes[name]

    def metadata(self) -> dict[str, str]:
        return {"inputs_digest": self._digest} if self._digest else {}

    def make_inputs(self):
        """The case's inputs as the device worker makes them.  The first case of each module, golden
        and params in this process creates them twice and compares (a draw from an unseeded source,
        or from state the module keeps between creations, differs there); every case's digest is
        then compared with the device worker's creation (``check_reproduced``)."""
        first = generate(self.case, torch.device("cpu"))
        d1 = digest_inputs(first.op, {**first.args, **first.initial})
        family = (self.case.spec["module"], self._golden_name, repr(sorted(self.case.spec["params"].items())))
        if family not in _REPRODUCED:
            again = generate(self.case, torch.device("cpu"))
            if d1.digest != digest_inputs(again.op, {**again.args, **again.initial}).digest:
                differ = [n for n, v in first.args.items() if isinstance(v, torch.Tensor)
                          and not torch.equal(bits(v), bits(again.args[n]))]
                differ += [n for n, v in first.initial.items() if not torch.equal(bits(v), bits(again.initial[n]))]
                raise SpecError(f"spec module {self.case.spec['module']}: inputs differ between two creations with "
                                f"seed {self.case.seed} ({', '.join(differ) or 'scalars'}): build_tensor_specs or an "
                                f"init_value draws from a source the harness does not seed (random, numpy and "
                                f"torch's global generators are)")
            _REPRODUCED.add(family)
        self._digest = d1.digest
        return first

    def compute(self, inputs, dtype, intermediates=None) -> dict[str, torch.Tensor]:
        ci = inputs
        where = f"golden {self.case.spec['module']}.{self._golden_name}"
        recorded: dict[str, torch.Tensor] = {}
        first = self._run(ci, {n: t.clone() for n, t in ci.initial.items()}, where,
                          self._recorder(recorded, dtype, where))
        inverted = {n: _inverted(t) for n, t in ci.initial.items()}
        second = self._run(ci, {n: t.clone() for n, t in inverted.items()}, where,
                           (lambda name, tensor: None) if self._dumps else None)
        for name in self._outputs:
            same_1 = bits(first[name]) == bits(ci.initial[name])
            same_2 = bits(second[name]) == bits(inverted[name])
            never = same_1 & same_2
            n = int(never.sum())
            if n:
                index = tuple(int(i) for i in never.nonzero()[0]) if never.dim() else ()
                raise SpecError(f"{where} left {n} of {never.numel()} elements of output {name} unwritten "
                                f"(first at {list(index)}): a golden writes every output in place")
        if intermediates is not None:
            intermediates.update(recorded)
        return {name: first[name].contiguous() for name in self._outputs}

    def _recorder(self, into: dict[str, torch.Tensor], dtype: torch.dtype, where: str):
        """The golden's ``dump(name, tensor)``: each of the module's INTERMEDIATES, once, a float tensor,
        kept on the host in the golden dtype (as a builtin golden's ``record``); None when the
        golden takes no ``dump``.  A dump the ABI refuses is the golden's error (GOLDEN_ERROR)."""
        if not self._dumps:
            return None

        def dump(name: Any = None, tensor: Any = None, *rest: Any) -> None:
            if not self._intermediates:     # no INTERMEDIATES: nothing is compared, nothing kept
                return
            if rest or not isinstance(name, str) or name not in self._intermediates:
                raise SpecError(f"{where} dumped {name!r}: not one of INTERMEDIATES "
                                f"({', '.join(self._intermediates)})")
            if name in into:
                raise SpecError(f"{where} dumped intermediate {name} twice")
            if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
                what = f"a {tensor.dtype} tensor" if isinstance(tensor, torch.Tensor) else type(tensor).__name__
                raise SpecError(f"{where} dumped {name} as {what}; intermediates are float tensors")
            into[name] = tensor.detach().to("cpu", dtype).clone()
        return dump

    def _run(self, ci, outputs: dict[str, torch.Tensor], where: str, dump=None) -> dict[str, torch.Tensor]:
        inputs = {n: (v.clone() if isinstance(v, torch.Tensor) else v) for n, v in ci.args.items()}
        tensors = {}
        for a in ci.op.args:      # the module's order: inputs, scalars and outputs by name
            tensors[a.name] = outputs[a.name] if a.role == "output" else inputs[a.name]
        try:
            with torch.no_grad():
                self._fn(tensors, **({} if dump is None else {"dump": dump}))
        except SpecError:
            raise
        except Exception as exc:
            raise SpecError(f"{where} raised {type(exc).__name__}: {exc}") from exc
        for n, v in ci.args.items():
            if isinstance(v, torch.Tensor) and not torch.equal(bits(inputs[n]), bits(v)):
                raise SpecError(f"{where} wrote into input {n}: a golden writes its outputs only")
        for name in self._outputs:
            t = tensors.get(name)
            if t is not outputs[name]:
                raise SpecError(f"{where} replaced output {name} in the dict instead of writing it in place")
        return outputs


# (module, golden, params) whose inputs this process created twice and found equal
_REPRODUCED: set[tuple[str, str, str]] = set()


def _inverted(t: torch.Tensor) -> torch.Tensor:
    """``t`` with every bit flipped (bool: negated): the second run's starting outputs."""
    if t.dtype is torch.bool:
        return ~t
    return torch.bitwise_not(bits(t.contiguous())).view(t.dtype)


def golden_for(case: Case) -> SpecGolden:
    return SpecGolden(case)


def golden_source(case: Case) -> "str | SpecGolden":
    """What the golden cache keys a case's goldens (and golden intermediates) by: a builtin op's
    name, or a spec op's ``SpecGolden`` (its module's golden, run on the host)."""
    return case.op if case.spec is None else golden_for(case)


def check_reproduced(case: Case, golden_path: str, digest: str) -> None:
    """The worker's inputs are the golden's: the digest the golden process recorded is this one."""
    from harness.goldens.cache import file_metadata

    recorded = file_metadata(golden_path).get("inputs_digest")
    if recorded and recorded != digest:
        raise SpecError(f"spec module {case.spec['module']}: the inputs of seed {case.seed} differ between the golden "
                        f"process (digest {recorded}) and this worker (digest {digest}): build_tensor_specs or an "
                        f"init_value draws from a source the harness does not seed")


__all__ = ["SpecGolden", "check_reproduced", "generate", "golden_for", "golden_source", "input_spec"]

