"""The messages between the front end (``harness.run.pool``) and a device worker (``serve``).

Frozen records, each with a plain-data wire form (``to_wire``/``from_wire``) that
names its message, and a one-line ``brief`` for the trace (never tensors or logs).
A message travels as one pickled dict per ``send_bytes``, so each side knows its
size; it is read back with a size limit and a deadline, and unpickled as plain data
only (no class is ever looked up), so bytes a kernel writes into the pipe make a
``ProtocolError``, never a hang, a huge allocation or code run in the front end.
Each ``RunRequest`` carries a nonce that its ``CaseReply`` echoes, so a shifted or
stale reply is never taken for another case's.  The worker side imports only this,
the case and the outcomes: nothing of the front end.

    front end                          worker
        <-------------- Ready   (once, after start-up)
        RunRequest ---------->
        <-------------- CaseReply
        Stop ---------------->  (or the pipe closes)

The golden process (``harness.worker.golden_serve``) speaks the same framing with the
front end only: ``Ready``, then ``GoldenRequest`` → ``GoldenReply`` per case, ``Stop``.
A ``GoldenReply``'s ``GoldenRef`` names the cache file the front end passes on to the
device worker in its ``RunRequest``; the device worker never talks to the golden process.
"""
from __future__ import annotations

import enum
import io
import os
import pickle
import select
import struct
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, ClassVar, TypeVar

from harness.case import Case
from harness.outcomes import Outcome


class Stage(str, enum.Enum):
    """Where in a case an exception came from (the value is what summaries and the classifier read)."""

    INPUTS = "inputs"
    GOLDEN = "golden"
    IMPORT = "import"
    CONTRACT = "contract"
    LAUNCH = "launch"
    CHECK = "check"
    DETERMINISM = "determinism"
    SPEC = "spec"            # a spec op's own code (building specs, creating tensors, its golden, its comparator)

    @property
    def harness_side(self) -> bool:
        """An exception here is the harness's own failure, never the kernel's."""
        return self in (Stage.INPUTS, Stage.GOLDEN, Stage.CHECK, Stage.DETERMINISM)


@dataclass(frozen=True)
class Ready:
    """The worker has started: whether its device is there, and what it is."""

    kind: ClassVar[str] = "ready"
    pid: int
    absent: str | None                 # why the device is not usable; None when it is
    info: dict[str, Any] = field(default_factory=dict)
    unhealthy: str | None = None       # present, but a tiny op on it failed (an accelerator after a fault)

    def to_wire(self) -> dict[str, Any]:
        return {"message": self.kind, "pid": self.pid, "absent": self.absent, "info": dict(self.info),
                "unhealthy": self.unhealthy}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> "Ready":
        unhealthy = data.get("unhealthy")
        return cls(pid=data["pid"], absent=data["absent"], info=dict(data["info"]),
                   unhealthy=unhealthy if isinstance(unhealthy, str) else None)

    def brief(self) -> str:
        return f"ready pid={self.pid}" + (f" absent: {self.absent}" if self.absent else "")


@dataclass(frozen=True)
class GoldenRef:
    """Where the golden process left a case's goldens: a golden cache file, and how it got there."""

    path: str                          # the safetensors file (read-only for the device worker)
    key: str                           # the golden cache key the file must carry
    hit: bool                          # found in the cache (True) or computed for this request
    seconds: float                     # the golden process's time for this request
    pid: int                           # the golden process that wrote or checked the file
    device: str = "cpu"                # the device kind it computed on (part of the key unless cpu)

    def to_wire(self) -> dict[str, Any]:
        return {"path": self.path, "key": self.key, "hit": self.hit, "seconds": self.seconds, "pid": self.pid,
                "device": self.device}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> "GoldenRef":
        return cls(path=data["path"], key=data["key"], hit=data["hit"], seconds=data["seconds"], pid=data["pid"],
                   device=data.get("device", "cpu"))


@dataclass(frozen=True)
class RunRequest:
    """Run ``case`` once with its output redirected into ``log``."""

    kind: ClassVar[str] = "run"
    case: Case
    log: str
    repeat: int = 0
    baseline: str | None = None        # compare every buffer bit for bit with this file (determinism)
    nonce: str = ""                    # echoed by the reply: matches it to this launch
    golden: GoldenRef | None = None    # the case's goldens; None only when the golden process could not start
    intermediates: str = "off"         # off | on-failure | always (docs/intermediates.md)

    def to_wire(self) -> dict[str, Any]:
        return {"message": self.kind, "case": self.case.to_wire(), "log": self.log, "repeat": self.repeat,
                "baseline": self.baseline, "nonce": self.nonce,
                "golden": None if self.golden is None else self.golden.to_wire(),
                "intermediates": self.intermediates}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> "RunRequest":
        return cls(case=Case.from_wire(data["case"]), log=data["log"], repeat=data["repeat"],
                   baseline=data["baseline"], nonce=data["nonce"],
                   golden=None if data["golden"] is None else GoldenRef.from_wire(data["golden"]),
                   intermediates=data.get("intermediates", "off"))

    def brief(self) -> str:
        return f"run case={self.case.case_id} repeat={self.repeat}" + (" bitwise" if self.baseline else "")


@dataclass(frozen=True)
class GoldenRequest:
    """Make sure the goldens of ``case`` in ``dtype`` (``fp32``, ``fp64``) are in the golden cache."""

    kind: ClassVar[str] = "golden"
    case: Case
    dtype: str
    nonce: str = ""                    # echoed by the reply

    def to_wire(self) -> dict[str, Any]:
        return {"message": self.kind, "case": self.case.to_wire(), "dtype": self.dtype, "nonce": self.nonce}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> "GoldenRequest":
        return cls(case=Case.from_wire(data["case"]), dtype=data["dtype"], nonce=data["nonce"])

    def brief(self) -> str:
        return f"golden case={self.case.case_id} dtype={self.dtype}"


@dataclass(frozen=True)
class Stop:
    """Exit the message loop."""

    kind: ClassVar[str] = "stop"

    def to_wire(self) -> dict[str, Any]:
        return {"message": self.kind}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> "Stop":
        return cls()

    def brief(self) -> str:
        return "stop"


@dataclass(frozen=True)
class Failure:
    """An exception raised while running a case, tagged with its stage; classified by the front end."""

    stage: Stage
    exc_type: str
    message: str
    traceback: str

    @property
    def first_line(self) -> str:
        return self.message.splitlines()[0] if self.message else ""


@dataclass(frozen=True)
class CaseReply:
    """What one case came to: checked (``outcome`` and the checks' findings) or ``failure``."""

    kind: ClassVar[str] = "reply"
    case_id: str
    duration_s: float
    outcome: Outcome | None = None     # None exactly when ``failure`` or ``deferred`` is set
    summary: str = ""
    report: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    failure: Failure | None = None
    nonce: str = ""                    # the request's (serve sets it)
    replace_worker: str = ""           # why the worker must not run another case ("" when it may)
    warnings: tuple[str, ...] = ()     # what the user must know about the case that is not a failure
    hint: str = ""                     # what a wholesale mismatch looks like (harness/worker/hints.py), or ""
    # the case did not run: the worker's state had changed since it started, before this case's kernel
    # ran (a timer, a finalizer, a callback an earlier kernel left); the front end runs it again elsewhere
    deferred: str = ""
    # the case a deferred change is traced to (code of its kernel made it); "": the worker's last case
    deferred_to: str = ""

    def to_wire(self) -> dict[str, Any]:
        failure = self.failure
        return {
            "message": self.kind, "case_id": self.case_id, "duration_s": self.duration_s,
            "nonce": self.nonce, "replace_worker": self.replace_worker, "deferred": self.deferred,
            "deferred_to": self.deferred_to, "warnings": list(self.warnings), "hint": self.hint,
            "outcome": self.outcome.value if self.outcome else None,
            "summary": self.summary, "report": self.report, "metrics": self.metrics,
            "failure": None if failure is None else {
                "stage": failure.stage.value, "exc_type": failure.exc_type,
                "message": failure.message, "traceback": failure.traceback},
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> "CaseReply":
        failure = data["failure"]
        return cls(case_id=data["case_id"], duration_s=data["duration_s"],
                   outcome=Outcome(data["outcome"]) if data["outcome"] else None,
                   summary=data["summary"], report=data["report"], metrics=data["metrics"],
                   failure=None if failure is None else Failure(
                       Stage(failure["stage"]), failure["exc_type"], failure["message"], failure["traceback"]),
                   nonce=data["nonce"], replace_worker=data["replace_worker"], deferred=data.get("deferred", ""),
                   deferred_to=data.get("deferred_to", ""), warnings=tuple(data.get("warnings", ())), hint=data.get("hint", ""))

    def brief(self) -> str:
        if self.failure is not None:
            what = f"{self.failure.exc_type} in {self.failure.stage.value}"
        elif self.deferred:
            what = f"not run (changed since the worker started: {self.deferred})"
        else:
            what = self.outcome.value
        return f"reply case={self.case_id} {what} {self.duration_s:.3f}s" + (
            f" replace worker: {self.replace_worker}" if self.replace_worker else "")


@dataclass(frozen=True)
class GoldenReply:
    """The goldens of one ``GoldenRequest``: ``golden`` where they are, or the ``failure`` computing them."""

    kind: ClassVar[str] = "golden-reply"
    case_id: str
    nonce: str
    golden: GoldenRef | None = None    # None exactly when ``failure`` is set
    failure: Failure | None = None

    def to_wire(self) -> dict[str, Any]:
        failure = self.failure
        return {"message": self.kind, "case_id": self.case_id, "nonce": self.nonce,
                "golden": None if self.golden is None else self.golden.to_wire(),
                "failure": None if failure is None else {
                    "stage": failure.stage.value, "exc_type": failure.exc_type,
                    "message": failure.message, "traceback": failure.traceback}}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> "GoldenReply":
        failure = data["failure"]
        return cls(case_id=data["case_id"], nonce=data["nonce"],
                   golden=None if data["golden"] is None else GoldenRef.from_wire(data["golden"]),
                   failure=None if failure is None else Failure(
                       Stage(failure["stage"]), failure["exc_type"], failure["message"], failure["traceback"]))

    def brief(self) -> str:
        if self.failure is not None:
            return f"golden-reply case={self.case_id} {self.failure.exc_type}"
        return f"golden-reply case={self.case_id} {'hit' if self.golden.hit else 'computed'} {self.golden.seconds:.3f}s"


Message = Ready | RunRequest | Stop | CaseReply | GoldenRequest | GoldenReply
M = TypeVar("M", Ready, RunRequest, Stop, CaseReply, GoldenRequest, GoldenReply)


MAX_MESSAGE_BYTES = 256 << 20       # a reply is text and metrics: far larger is garbage in the pipe


class ProtocolError(RuntimeError):
    """A message that is not one: of a kind the receiver was not waiting for, not a plain-data
    pickle, of an impossible size, or cut short (front end and worker out of step, or bytes
    a kernel wrote into the pipe)."""


class _PlainData(pickle.Unpickler):
    """Unpickles dicts, lists, strings and numbers only: looking up any class or function is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def plain(value: Any) -> Any:
    """``value`` as plain data, which is all the receiver unpickles: subclasses of str, int and
    float (``torch.__version__``, enums, numpy scalars) as the base type; anything else as its text."""
    if value is None or type(value) in (str, int, float, bool, bytes):
        return value
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(map(plain, value)) if type(value) in (list, tuple) else list(map(plain, value))
    for base in (bool, str, int, float):
        if isinstance(value, base):
            return base.__str__(value) if base is str else base(value)
    if hasattr(value, "item"):        # numpy and torch scalars
        return plain(value.item())
    return str(value)


def send(conn: Connection, message: Message) -> int:
    """Send ``message``; returns its size on the wire in bytes."""
    data = pickle.dumps(plain(message.to_wire()), protocol=pickle.HIGHEST_PROTOCOL)
    conn.send_bytes(data)
    return len(data)


def _read(fd: int, n: int, deadline: float | None) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise ProtocolError(f"a message stopped short: {len(buf)} of {n} bytes")
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def receive(conn: Connection, *expected: type[M], within_s: float | None = None) -> tuple[M, int]:
    """The next message, which must be one of ``expected``, and its size in bytes.

    Reads the framing of ``Connection.send_bytes`` itself (a 4-byte length, then the
    data), so that ``within_s`` bounds the whole message once its first byte is there.
    Raises ``EOFError`` (or ``OSError``) when the other side is gone, ``ProtocolError``
    for anything that is not a message.
    """
    deadline = None if within_s is None else time.monotonic() + within_s
    fd = conn.fileno()
    size, = struct.unpack("!i", _read(fd, 4, deadline))
    if not 0 <= size <= MAX_MESSAGE_BYTES:
        raise ProtocolError(f"a message of impossible size {size}")
    data = _read(fd, size, deadline)
    try:
        wire = _PlainData(io.BytesIO(data)).load()
        kind = wire["message"]
        for cls in expected:
            if kind == cls.kind:
                return cls.from_wire(wire), len(data)
    except ProtocolError:
        raise
    except Exception as exc:      # garbage decodes to anything, or fails anywhere
        raise ProtocolError(f"not a message ({type(exc).__name__}: {exc})"[:300]) from None
    raise ProtocolError(f"expected {' or '.join(c.kind for c in expected)}, got {kind!r}")
