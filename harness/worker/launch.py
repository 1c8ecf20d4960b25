"""Launch one kernel call the way docs/contracts.md prescribes (runs in the device worker).

Every writable buffer (outputs and caches) is a view into a larger allocation
whose guard bands hold a byte pattern: a write before the buffer start (the
``slot = -1`` bug on hardware) changes them.  Outputs are poisoned with a NaN
whose payload no arithmetic produces, so "never written" and "computed NaN"
are told apart.  The signature is verified before the call, the read-only inputs
are copied before it (``input_guard``), the device is synchronized after it, and
the returned value and the inputs are held against the contract.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import torch

from harness.intermediates.spec import declares_dump
from harness.worker.input_guard import InputSeal, InputWrite
from harness.worker.case_inputs import CaseInputs

GUARD_BYTE = 0xA5
# Quiet NaNs with a payload (mantissa 0x65...) that no kernel arithmetic produces.
POISON_BITS = {torch.bfloat16: 0x7FE5, torch.float16: 0x7E65, torch.float32: 0x7FE5A5A5}
_BITS_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}
_MIN_GUARD_BYTES = 4096


class ContractError(Exception):
    """The kernel does not fit the op's ABI (signature); raised before launch."""


@dataclass
class GuardedBuffer:
    name: str
    storage: torch.Tensor      # 1-D: guard | tensor | guard
    view: torch.Tensor         # what the kernel gets
    guard: int                 # elements on each side

    @classmethod
    def allocate(cls, name: str, content: torch.Tensor, device: torch.device, guard_elems: int) -> "GuardedBuffer":
        numel = content.numel()
        storage = torch.empty(numel + 2 * guard_elems, dtype=content.dtype, device=device)
        view = storage[guard_elems: guard_elems + numel].view(content.shape)
        buf = cls(name, storage, view, guard_elems)
        buf.fill(content)
        return buf

    def fill(self, content: torch.Tensor) -> None:
        """Guard bands to their pattern and the tensor to ``content``: the pre-launch bytes, in place."""
        as_bytes = self.storage.view(torch.uint8)
        band = self.guard * self.storage.element_size()
        as_bytes[:band] = GUARD_BYTE
        as_bytes[len(as_bytes) - band:] = GUARD_BYTE
        self.view.copy_(content)

    def guard_damage(self) -> tuple[list[int], list[int]]:
        """Element offsets (relative to the tensor start) of guard elements whose bytes changed."""
        itemsize = self.storage.element_size()
        as_bytes = self.storage.view(torch.uint8)
        n = self.guard * itemsize
        # Only the bands travel to the host, not the (possibly many-GB) buffer between them.
        before = (as_bytes[:n].cpu() != GUARD_BYTE).nonzero().flatten()
        after = (as_bytes[len(as_bytes) - n:].cpu() != GUARD_BYTE).nonzero().flatten()
        numel = self.view.numel()
        before_elems = sorted({int(b) // itemsize - self.guard for b in before})
        after_elems = sorted({numel + int(b) // itemsize for b in after})
        return before_elems, after_elems


# Other dtypes a spec op's outputs may have (docs/specs.md): float64 a NaN with the same kind of
# payload; the float8 types their NaN (e4m3fn has only one, so a computed NaN reads as poison);
# integers and bool the byte 0xA5 in every byte (for bool an invalid value, never a written one).
_SIGNED = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_FLOAT8_NAN = {"float8_e4m3fn": 0x7F, "float8_e5m2": 0x7E, "float8_e4m3fnuz": 0x80, "float8_e5m2fnuz": 0x80}


def _poison(dtype: torch.dtype) -> tuple[torch.dtype, int]:
    """(same-sized integer view, its value) that poisons ``dtype``."""
    if dtype in POISON_BITS:
        return _BITS_VIEW[dtype], POISON_BITS[dtype]
    if dtype is torch.float64:
        return torch.int64, 0x7FFA5A5A5A5A5A5A
    name = str(dtype).removeprefix("torch.")
    if name in _FLOAT8_NAN:
        return torch.uint8, _FLOAT8_NAN[name]
    size = torch.empty((), dtype=dtype).element_size()
    if size == 1:
        return torch.uint8, GUARD_BYTE
    pattern = int.from_bytes(bytes([GUARD_BYTE]) * size, "little", signed=True)
    return _SIGNED[size], pattern


def poisoned(shape: tuple[int, ...], dtype: torch.dtype, value: int | None = None) -> torch.Tensor:
    """An output's pre-launch content; ``value``: an integer output's own poison (``integer_poison``)."""
    if value is not None:
        return torch.full(shape, value, dtype=dtype)
    view, bits = _poison(dtype)
    return torch.full(shape, bits, dtype=view).view(dtype)


def poison_mask(t: torch.Tensor, value: int | None = None) -> torch.Tensor:
    """True where an output element still holds the harness's poison (``value``: the one it chose
    for this integer output)."""
    if value is not None:
        return t == value
    view, bits = _poison(t.dtype)
    return t.view(view) == bits


def integer_poison(dtype: torch.dtype, golden: torch.Tensor | None) -> int | None:
    """The poison of an integer output, chosen away from every value its golden holds.  A float
    output's poison is a NaN no arithmetic makes; an integer has no such value (the byte 0xA5 in an
    int8 is -91, a code a quantising kernel writes), so an element equal to the poison could be a
    correct one.  The poison is the value farthest from the golden's (at least 2 away: a comparator
    may admit one code off), so a kernel that writes what the golden says never writes it.  None:
    the fixed pattern (not an integer, no golden, or nothing 2 away from it in range)."""
    if golden is None or dtype is torch.bool or dtype.is_floating_point or dtype.is_complex:
        return None
    info = torch.iinfo(dtype)
    values = torch.unique(golden.detach().to("cpu", torch.float64).round().clamp(info.min, info.max))
    if not len(values):
        return None
    pattern = float(poisoned((), dtype).item())     # the fixed pattern, read as a number of dtype

    def distance(v: float) -> float:
        i = int(torch.searchsorted(values, torch.tensor([v], dtype=torch.float64)))
        near = [values[j] for j in (i - 1, i) if 0 <= j < len(values)]
        return min(abs(float(n) - v) for n in near)

    if distance(pattern) >= 2:
        return None            # the fixed pattern is already far from every golden value
    candidates = [float(info.min), float(info.max)]
    gaps = values[1:] - values[:-1]
    if len(gaps):
        widest = int(torch.argmax(gaps))
        candidates.append(float((values[widest] + values[widest + 1]) // 2))
    best = max(candidates, key=distance)
    return int(best) if distance(best) >= 2 else None


@dataclass
class Launched:
    """What the launch left, where it left it: the outputs and caches are the guarded buffers'
    views on the kernel's device, and the checks read them there (no host copy of a many-GB
    cache); the guard damage and the input writes are already found."""

    outputs: dict[str, torch.Tensor]
    caches: dict[str, torch.Tensor]
    guard_damage: dict[str, tuple[list[int], list[int]]]
    returned: str | None               # None when the return value fits the contract, else what was wrong
    inputs_written: tuple[InputWrite, ...] = ()   # read-only inputs the kernel changed
    buffers: "Buffers | None" = None   # the guarded buffers themselves, on the device: a repeat restores them

    @property
    def poison(self) -> dict[str, int]:
        """Integer outputs' own poison (``integer_poison``), as the buffers were filled with it."""
        return self.buffers.poison if self.buffers is not None else {}

    @property
    def guards_intact(self) -> bool:
        return not any(before or after for before, after in self.guard_damage.values())


def verify_signature(kernel: Callable, kwargs: dict[str, Any], op_name: str) -> None:
    try:
        sig = inspect.signature(kernel)
    except (TypeError, ValueError):      # builtins and extension functions: nothing to check
        return
    try:
        sig.bind(**kwargs)
    except TypeError as exc:
        missing = [n for n in kwargs if n not in sig.parameters] if not any(
            p.kind is p.VAR_KEYWORD for p in sig.parameters.values()) else []
        detail = f"; it does not accept {', '.join(missing)}" if missing else ""
        raise ContractError(
            f"kernel signature {sig} does not fit op {op_name}: {exc}{detail}"
        ) from None


def allowed_returns(output_names: list[str]) -> str:
    """What a kernel may return, in words: the one list the return check and its message share."""
    first = f"the '{output_names[0]}' buffer"
    names = ", ".join(output_names) + ("," if len(output_names) == 1 else "")
    return f"None, {first}, or the tuple ({names}) of the buffers passed in"


def _returned_problem(ret: Any, outputs: list[GuardedBuffer], by_name: bool = False) -> str | None:
    """None when ``ret`` is None, the first output, or all outputs in declared order; else what
    was returned and what is allowed, in one line."""
    if ret is None:
        return None

    def same(t: Any, buf: GuardedBuffer) -> bool:
        return isinstance(t, torch.Tensor) and t.data_ptr() == buf.view.data_ptr() and t.shape == buf.view.shape

    def what(t: Any) -> str:
        for buf in outputs:
            if same(t, buf):
                return f"the '{buf.name}' buffer"
        if isinstance(t, torch.Tensor):
            return f"a tensor {tuple(t.shape)} {t.dtype} the harness did not pass in"
        return type(t).__name__

    if same(ret, outputs[0]):
        return None
    allowed = allowed_returns([b.name for b in outputs])
    if by_name and isinstance(ret, dict):      # a spec op's kernel: its outputs by name (docs/specs.md)
        allowed += ", or a dict of them by name"
        names = {b.name: b for b in outputs}
        if set(ret) <= set(names) and all(same(t, names[k]) for k, t in ret.items()):
            return None
        wrong = next((k for k, t in ret.items() if k not in names or not same(t, names[k])), None)
        return f"returned a dict whose {wrong!r} is {what(ret[wrong])}; allowed: {allowed}"
    if by_name:
        allowed += ", or a dict of them by name"
    if isinstance(ret, (tuple, list)):
        kind = type(ret).__name__
        if len(ret) == len(outputs) and all(map(same, ret, outputs)):
            return None
        if len(ret) != len(outputs):
            got = ", ".join(what(t) for t in ret[:4]) + (", ..." if len(ret) > 4 else "")
            return f"returned a {kind} of {len(ret)} ({got}); allowed: {allowed}"
        wrong = next(i for i, (t, buf) in enumerate(zip(ret, outputs)) if not same(t, buf))
        return (f"returned a {kind} whose element {wrong} is {what(ret[wrong])}, not the "
                f"'{outputs[wrong].name}' buffer; allowed: {allowed}")
    for buf in outputs[1:]:
        if same(ret, buf):
            return f"returned the '{buf.name}' buffer instead of '{outputs[0].name}'; allowed: {allowed}"
    if isinstance(ret, torch.Tensor):
        return (f"returned a tensor {tuple(ret.shape)} {ret.dtype} that is not the '{outputs[0].name}' "
                f"buffer the harness passed in; allowed: {allowed}")
    return f"returned {type(ret).__name__}; allowed: {allowed}"


class Buffers:
    """The guarded buffers of one launch: every cache (a copy of the generated one) and every
    output (poisoned), each inside its guard bands, on the kernel's device."""

    def __init__(self, by_name: dict[str, GuardedBuffer], poison: dict[str, int] | None = None) -> None:
        self.by_name = by_name
        self.poison = poison or {}

    @classmethod
    def allocate(cls, ci: CaseInputs, device: torch.device,
                 goldens: "dict[str, torch.Tensor] | None" = None) -> "Buffers":
        """``goldens``: the case's, so an integer output's poison is chosen away from its values."""
        buffers: dict[str, GuardedBuffer] = {}
        poison: dict[str, int] = {}
        for arg in ci.op.caches:
            content = ci.args[arg.name]
            # At least one cache row (and a page where pages are small) on each side:
            # a slot of -1 computed with raw offsets lands inside the band.
            row = content.shape[-2] * content.shape[-1]
            guard = max(_MIN_GUARD_BYTES // content.element_size(), row * content.shape[-3])
            buffers[arg.name] = GuardedBuffer.allocate(arg.name, content, device, guard)
        for arg in ci.op.outputs:
            shape, dtype = ci.outputs[arg.name]
            guard = _MIN_GUARD_BYTES // torch.empty((), dtype=dtype).element_size()
            value = integer_poison(dtype, (goldens or {}).get(arg.name))
            if value is not None:
                poison[arg.name] = value
            buffers[arg.name] = GuardedBuffer.allocate(arg.name, poisoned(shape, dtype, value), device, guard)
        return cls(buffers, poison)

    def restore(self, ci: CaseInputs) -> None:
        """Every buffer back to the bytes ``allocate`` gave it, in place: a repeat of the case
        (``harness/worker/repeats.py``).  The generated caches in ``ci`` are the pristine copy;
        the poison and the bands are constant patterns, refilled."""
        for arg in ci.op.caches:
            self.by_name[arg.name].fill(ci.args[arg.name])
        for arg in ci.op.outputs:
            buf = self.by_name[arg.name]
            value = self.poison.get(arg.name)
            buf.fill(poisoned((), buf.view.dtype, value).to(buf.view.device).expand(buf.view.shape))

    @property
    def nbytes(self) -> int:
        return sum(b.storage.numel() * b.storage.element_size() for b in self.by_name.values())


def kernel_kwargs(ci: CaseInputs, device: torch.device, buffers: Buffers) -> dict[str, Any]:
    """The kernel's arguments: the inputs on its device, the scalars, the guarded buffers' views
    (a timed call after the checks passes the very same ones: ``harness/worker/timing.py``)."""
    kwargs: dict[str, Any] = {}
    for arg in ci.op.args:
        if arg.role == "input":
            kwargs[arg.name] = ci.args[arg.name].to(device)
        elif arg.role == "scalar":
            kwargs[arg.name] = ci.args[arg.name]
    kwargs.update({name: buf.view for name, buf in buffers.by_name.items()})
    return kwargs


def launch(kernel: Callable, ci: CaseInputs, device: torch.device, synchronize: Callable[[], None],
           buffers: Buffers | None = None, dump: Callable[..., None] | None = None,
           goldens: dict[str, torch.Tensor] | None = None) -> Launched:
    """One call of ``kernel``; ``buffers``: guarded buffers in their pre-launch state (a repeat's,
    restored), else allocated here.  ``dump``: passed as ``dump=`` to a kernel that declares
    that parameter (docs/intermediates.md); any other kernel is called as without it."""
    if buffers is None:
        buffers = Buffers.allocate(ci, device, goldens)
    kwargs = kernel_kwargs(ci, device, buffers)

    verify_signature(kernel, kwargs, ci.op.name)
    if dump is not None and declares_dump(kernel):
        kwargs["dump"] = dump
    seal = InputSeal({a.name: kwargs[a.name] for a in ci.op.by_role("input")})
    ret = kernel(**kwargs)
    synchronize()

    by_name = buffers.by_name
    return Launched(
        outputs={a.name: by_name[a.name].view for a in ci.op.outputs},
        caches={a.name: by_name[a.name].view for a in ci.op.caches},
        guard_damage={name: buf.guard_damage() for name, buf in by_name.items()},
        returned=_returned_problem(ret, [by_name[a.name] for a in ci.op.outputs], ci.op.returns_by_name),
        inputs_written=seal.written(),
        buffers=buffers,
    )
