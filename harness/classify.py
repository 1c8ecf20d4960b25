"""Name a failure from what the worker saw: the exception, its log, its exit status.

Data-driven: a table of rules, each a pattern with the outcome it means, the
code it carries, and whether the fault is sticky (the device context is
poisoned, so the worker must be replaced).  The earliest matching line in the
evidence wins: a root cause printed before a cascade (an AICore exception
before 507018) names the failure, the cascade is kept as secondary.
"""
from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field
from pathlib import Path

from harness.outcomes import Outcome

_LOG_HEAD = 64 * 1024
_LOG_TAIL = 256 * 1024


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern
    outcome: Outcome
    sticky: bool
    meaning: str
    code_group: str | None = "code"     # the regex group that holds the code, if any
    code: int | str | None = None       # a fixed code when the pattern carries none


def _rule(name, pattern, outcome, sticky, meaning, code_group="code", code=None) -> Rule:
    return Rule(name, re.compile(pattern, re.MULTILINE), outcome, sticky, meaning, code_group, code)


RULES: tuple[Rule, ...] = (
    _rule("pto2_orch_error", r"orch_error_code=(?P<code>\d+)\s+sched_error_code=(?P<sched>\d+)",
          Outcome.ORCH_ERROR, True, "PTO2 runtime orchestration/scheduler error"),
    _rule("npu_error_code", r"error code is (?P<code>507\d{3})", Outcome.DEVICE_FAULT, True,
          "CANN runtime device fault (ACL_ERROR_RT_*)"),
    _rule("npu_oom", r"error code is (?P<code>207\d{3})", Outcome.OOM, False, "NPU device memory exhausted"),
    _rule("cuda_illegal_address", r"an illegal memory access was encountered", Outcome.DEVICE_FAULT, True,
          "CUDA error 700: illegal address", code_group=None, code=700),
    _rule("cuda_device_assert", r"device-side assert triggered", Outcome.DEVICE_FAULT, True,
          "CUDA error 710: device-side assert", code_group=None, code=710),
    _rule("cuda_misaligned", r"misaligned address", Outcome.DEVICE_FAULT, True,
          "CUDA error 716: misaligned address", code_group=None, code=716),
    _rule("cuda_launch_failure", r"unspecified launch failure", Outcome.DEVICE_FAULT, True,
          "CUDA error 719: launch failure", code_group=None, code=719),
    _rule("cuda_oom", r"CUDA out of memory", Outcome.OOM, False, "CUDA allocator out of memory",
          code_group=None),
    _rule("python_memory_error", r"^MemoryError", Outcome.OOM, False, "host memory exhausted", code_group=None),
)


@dataclass(frozen=True)
class Classification:
    outcome: Outcome
    code: int | str | None
    summary: str
    sticky: bool
    rule: str | None = None
    secondary: tuple[str, ...] = field(default_factory=tuple)   # other signatures seen, as labels


def read_log(path: str | Path | None) -> str:
    """Head and tail of a log, bounded, never failing on bad bytes."""
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(0)
            if size <= _LOG_HEAD + _LOG_TAIL:
                data = fh.read()
            else:
                head = fh.read(_LOG_HEAD)
                fh.seek(size - _LOG_TAIL)
                data = head + b"\n...\n" + fh.read()
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


def match_rules(text: str, rules: tuple[Rule, ...] = RULES) -> list[tuple[int, Rule, re.Match]]:
    """Every rule hit in the text, earliest first."""
    hits = []
    for rule in rules:
        m = rule.pattern.search(text)
        if m:
            hits.append((m.start(), rule, m))
    return sorted(hits, key=lambda h: h[0])


def _code(rule: Rule, m: re.Match) -> int | str | None:
    if rule.code_group and rule.code_group in m.groupdict():
        raw = m.group(rule.code_group)
        return int(raw) if raw.isdigit() else raw
    return rule.code


def classify_exception(stage: str, exc_type: str, message: str, traceback_text: str,
                       log_text: str = "") -> Classification:
    """A Python exception raised while importing or running the kernel."""
    first_line = f"{exc_type}: {message}".splitlines()[0][:300]
    if stage == "import":
        return Classification(Outcome.BUILD_ERROR, None, f"kernel import failed: {first_line}", False, "import")
    if stage == "contract":
        return Classification(Outcome.CONTRACT, None, message.splitlines()[0][:300], False, "signature")
    hits = match_rules(log_text + "\n" + traceback_text + "\n" + f"{exc_type}: {message}")
    if hits:
        _, rule, m = hits[0]
        code = _code(rule, m)
        secondary = tuple(
            f"FAIL_{_code(r, mm)}" if _code(r, mm) is not None else r.name for _, r, mm in hits[1:]
        )
        return Classification(rule.outcome, code, f"{rule.meaning}: {first_line}", rule.sticky, rule.name,
                               secondary)
    return Classification(Outcome.CRASH, None, f"kernel raised {first_line}", False, "exception")


def classify_exit(returncode: int | None, log_text: str = "") -> Classification:
    """The worker process died while running a case."""
    hits = match_rules(log_text)
    if hits:
        _, rule, m = hits[0]
        return Classification(rule.outcome, _code(rule, m), f"{rule.meaning} (worker died)", True, rule.name)
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return Classification(Outcome.CRASH, name, f"worker killed by {name} while running the kernel", True,
                              "signal")
    return Classification(Outcome.CRASH, returncode, f"worker exited with status {returncode} mid-case", True,
                          "exit")


def classify_timeout(timeout_s: float) -> Classification:
    return Classification(Outcome.HANG, None, f"no result within timeout_s={timeout_s:g}; worker killed",
                          True, "timeout")
