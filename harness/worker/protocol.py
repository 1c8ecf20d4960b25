"""The messages between the front end (``harness.run.pool``) and a device worker (``serve``).

Frozen records, each with a plain-data wire form (``to_wire``/``from_wire``) that
names its message, and a one-line ``brief`` for the trace (never tensors or logs).
A message travels as one pickled dict per ``send_bytes``, so each side knows its
size.  The worker side imports only this, the case and the outcomes: nothing of
the front end.

    front end                          worker
        <-------------- Ready   (once, after start-up)
        RunRequest ---------->
        <-------------- CaseReply
        Stop ---------------->  (or the pipe closes)
"""
from __future__ import annotations

import enum
import pickle
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

    def to_wire(self) -> dict[str, Any]:
        return {"message": self.kind, "pid": self.pid, "absent": self.absent, "info": dict(self.info)}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> "Ready":
        return cls(pid=data["pid"], absent=data["absent"], info=dict(data["info"]))

    def brief(self) -> str:
        return f"ready pid={self.pid}" + (f" absent: {self.absent}" if self.absent else "")


@dataclass(frozen=True)
class RunRequest:
    """Run ``case`` once with its output redirected into ``log``."""

    kind: ClassVar[str] = "run"
    case: Case
    log: str
    repeat: int = 0
    baseline: str | None = None        # compare every buffer bit for bit with this file (determinism)

    def to_wire(self) -> dict[str, Any]:
        return {"message": self.kind, "case": self.case.to_wire(), "log": self.log, "repeat": self.repeat,
                "baseline": self.baseline}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> "RunRequest":
        return cls(case=Case.from_wire(data["case"]), log=data["log"], repeat=data["repeat"],
                   baseline=data["baseline"])

    def brief(self) -> str:
        return f"run case={self.case.case_id} repeat={self.repeat}" + (" bitwise" if self.baseline else "")


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
    outcome: Outcome | None = None     # None exactly when ``failure`` is set
    summary: str = ""
    report: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    failure: Failure | None = None

    def to_wire(self) -> dict[str, Any]:
        failure = self.failure
        return {
            "message": self.kind, "case_id": self.case_id, "duration_s": self.duration_s,
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
                       Stage(failure["stage"]), failure["exc_type"], failure["message"], failure["traceback"]))

    def brief(self) -> str:
        if self.failure is not None:
            what = f"{self.failure.exc_type} in {self.failure.stage.value}"
        else:
            what = self.outcome.value
        return f"reply case={self.case_id} {what} {self.duration_s:.3f}s"


Message = Ready | RunRequest | Stop | CaseReply
M = TypeVar("M", Ready, RunRequest, Stop, CaseReply)


class ProtocolError(RuntimeError):
    """A message of a kind the receiver was not waiting for (front end and worker out of step)."""


def send(conn: Connection, message: Message) -> int:
    """Send ``message``; returns its size on the wire in bytes."""
    data = pickle.dumps(message.to_wire(), protocol=pickle.HIGHEST_PROTOCOL)
    conn.send_bytes(data)
    return len(data)


def receive(conn: Connection, *expected: type[M]) -> tuple[M, int]:
    """The next message, which must be one of ``expected``, and its size in bytes.

    Raises ``EOFError`` (or ``OSError``) when the other side is gone, as ``Connection.recv`` does.
    """
    data = conn.recv_bytes()
    wire = pickle.loads(data)
    for cls in expected:
        if wire["message"] == cls.kind:
            return cls.from_wire(wire), len(data)
    raise ProtocolError(f"expected {' or '.join(c.kind for c in expected)}, got {wire['message']!r}")
