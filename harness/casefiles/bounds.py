"""How big a case may be: the bytes it needs (``harness.memory_plan``) against what any machine holds.

A case past ``machine_bound`` could run nowhere, so a kernel matrix and a spec file both refuse
it when the file is read, naming the value that made it too big.
"""
from __future__ import annotations

import functools

from harness import memory_plan
from harness.case import Case
from harness.devices import host_memory

# More than any accelerator holds (1 TiB): a case that needs more than this and more than the
# host has in all fits on no machine (docs/cases.md, "Memory plan").
MAX_CASE_BYTES = 2**40


def case_bytes(case: Case) -> int:
    """The most bytes one machine must hold to run ``case`` (``harness.memory_plan``, golden in fp32)."""
    return memory_plan.plan(case).total


def machine_bound() -> int:
    """The most a case may need: the bigger of this host's total memory and ``MAX_CASE_BYTES``,
    more than any accelerator holds (a case past it could run nowhere)."""
    return max(MAX_CASE_BYTES, host_total())


@functools.lru_cache(maxsize=1)   # asked per case; a host's total memory does not change
def host_total() -> int:
    """This host's MemTotal in bytes; 0 where it cannot be read."""
    host = host_memory()
    return host.total if host else 0


__all__ = ["MAX_CASE_BYTES", "case_bytes", "host_total", "machine_bound"]
