"""Writes into read-only inputs (runs in the device worker; docs/contracts.md, "Checks and outcomes").

Every tensor the op contract gives the role ``input`` (``harness/ops/__init__.py``) is copied on its
own device right before the launch and compared with that copy bit for bit after the
device is synchronized.  A copy, not a digest: one ``clone`` and one ``torch.equal`` per
input cost less than a digest in eager torch (which needs widened temporaries of the
same size), the comparison cannot collide, and the copy is the pristine
value that localises a change (measured on the CPU: 3.5-26x cheaper than an int64
position-weighted sum, docs/benchmarks.md).  The price is device memory equal to the
inputs: about 2.2 GB for a whole qwen3-14b decoder stack, whose weights dominate, beside
its 10 GB of caches.  Caches and outputs are not inputs: the other checks judge them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

# Same-sized integer views: compared bit for bit, so -0.0 vs 0.0 and NaN payloads count.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True)
class InputWrite:
    """One input the kernel changed."""

    name: str
    changed: torch.Tensor          # bool, the input's shape, on its device: True where the bits differ
    first: tuple[int, ...]         # index of the first changed element (row-major)
    was: float                     # its value before the launch
    now: float                     # and after


def bits(t: torch.Tensor) -> torch.Tensor:
    """A same-sized integer view of ``t``'s bytes: compared bit for bit, NaN payloads and -0.0 count."""
    return t.view(_BITS[t.element_size()])


class InputSeal:
    """Copies of the inputs a kernel is handed, taken on their device before it runs."""

    def __init__(self, inputs: Mapping[str, torch.Tensor]) -> None:
        self._given = dict(inputs)
        self._copies = {name: t.clone() for name, t in self._given.items()}

    def written(self) -> tuple[InputWrite, ...]:
        """The inputs whose bits changed, in contract order; call after the device is synchronized."""
        found = []
        for name, now in self._given.items():
            was = self._copies[name]
            if torch.equal(bits(now), bits(was)):
                continue
            changed = bits(now) != bits(was)
            first = first_set(changed)
            found.append(InputWrite(name, changed, first, float(was[first]), float(now[first])))
        return tuple(found)



def first_set(mask: torch.Tensor) -> tuple[int, ...]:
    """The row-major index of ``mask``'s first True element, found on its device (argmax returns
    the first maximum), so only the index comes back to the host."""
    flat = int(mask.flatten().to(torch.uint8).argmax())
    index = []
    for n in reversed(mask.shape):
        flat, i = divmod(flat, n)
        index.append(i)
    return tuple(reversed(index))
