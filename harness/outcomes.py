"""Outcome classes and the result record (docs/contracts.md).

Outcomes are a fixed set decided by the kind of failure; a result is a frozen
record of fields, rendered late (labels, JSON, reports).
"""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class Outcome(str, enum.Enum):
    PASS = "PASS"
    NEAR_TIE = "NEAR_TIE"          # argmax flipped only inside the golden's near-tie margin: a pass
    MISMATCH = "MISMATCH"
    NONFINITE = "NONFINITE"
    UNWRITTEN = "UNWRITTEN"        # poison left in an output
    OOB_WRITE = "OOB_WRITE"        # guard band touched
    CONTRACT = "CONTRACT"          # row outside the slot mapping changed, wrong buffer returned, bad signature
    DEVICE_FAULT = "DEVICE_FAULT"  # sticky device/runtime fault (507018, CUDA 700, ...)
    ORCH_ERROR = "ORCH_ERROR"
    HANG = "HANG"
    CRASH = "CRASH"
    OOM = "OOM"
    BUILD_ERROR = "BUILD_ERROR"
    HARNESS_ERROR = "HARNESS_ERROR"
    ENV_ERROR = "ENV_ERROR"        # the machine or cluster failed (runtime start, device ids, collective set-up, a peer): not the kernel, not the harness
    GOLDEN_ERROR = "GOLDEN_ERROR"  # a spec op's own code failed: its golden, specs, inputs or comparator (docs/specs.md)
    SKIPPED = "SKIPPED"
    FAILED = "FAILED"              # a command case (or one of its tests) failed with no device or runtime signature

    @property
    def passed(self) -> bool:
        return self in (Outcome.PASS, Outcome.NEAR_TIE)

    @property
    def failed(self) -> bool:
        return not self.passed and self is not Outcome.SKIPPED


# When several checks fail in one case, the most specific cause is reported:
# a write outside the buffer explains a mismatch, not the other way round.
CHECK_PRECEDENCE = (
    Outcome.OOB_WRITE,
    Outcome.CONTRACT,
    Outcome.UNWRITTEN,
    Outcome.NONFINITE,
    Outcome.MISMATCH,
    Outcome.NEAR_TIE,
    Outcome.PASS,
)


def label(outcome: Outcome | str, code: int | str | None = None) -> str:
    """The display label teams already use: ``FAIL_507018`` for a coded device fault."""
    outcome = Outcome(outcome)
    if code is not None and outcome in (Outcome.DEVICE_FAULT, Outcome.ORCH_ERROR, Outcome.OOM):
        return f"FAIL_{code}"
    return outcome.value


@dataclass(frozen=True)
class Result:
    """What one case came to, run once on one device."""

    case_id: str
    outcome: Outcome
    matrix: str = ""
    op: str = ""
    kernel: str = ""
    seed: int | None = None
    code: int | str | None = None
    summary: str = ""
    report: str = ""                      # the fixed-format comparison text, "" when it passed
    metrics: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    repeat: int = 0
    device: str = ""
    log: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    sticky: bool = False                  # the worker must be replaced before the next case
    ref: str | None = None                # the kernel-library ref it ran on (compare, bisect), else None
    warnings: tuple[str, ...] = ()        # what the user must know that is not a failure (the worker undid an env change)
    hint: str = ""                        # what a wholesale mismatch looks like ("looks like interleaved RoPE"), or ""

    @property
    def label(self) -> str:
        return label(self.outcome, self.code)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["outcome"] = self.outcome.value
        data["label"] = self.label
        # docs/intermediates.md: the table of intermediates, when the case dumped any
        dumped = self.metrics.get("intermediates") or {}
        data["first_bad_intermediate"] = dumped.get("first_bad_intermediate")
        data["intermediates"] = [{"name": r["name"], "verdict": r["verdict"], "metrics": r["metrics"]}
                                 for r in dumped.get("rows", ())]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Result":
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["outcome"] = Outcome(fields["outcome"])
        if "warnings" in fields:
            fields["warnings"] = tuple(fields["warnings"] or ())
        return cls(**fields)
