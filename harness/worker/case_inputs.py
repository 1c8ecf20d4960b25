"""What a case's inputs are once generated, whatever made them: a pack's generator
(``Pack.inputs``) or a spec op's module (``harness/worker/spec_inputs.py``).  The rest of the worker
(launch, checks, digest, repeats, dumps) reads only this."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from harness.ops import OpSpec


@dataclass
class CaseInputs:
    op: OpSpec
    args: dict[str, Any]                 # every kernel argument but the outputs; caches in pre-launch state
    outputs: dict[str, tuple[tuple[int, ...], torch.dtype]]
    slots: torch.Tensor                  # int64 slot per written row (decode: per batch row, prefill: per token)
    row_seq: torch.Tensor                # int64 sequence index per written row
    sizes: dict[str, int]                # geometry symbols resolved for this case
    spec: dict[str, Any]                 # canonical description of the inputs (the golden cache key)
    # a spec op's outputs as its spec initialises them (what its golden starts from; docs/specs.md)
    initial: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def valid_rows(self) -> torch.Tensor:
        """Rows of slot-masked outputs that are checked: the ones with a valid slot."""
        return self.slots >= 0


def on_host(ci: CaseInputs) -> CaseInputs:
    """``ci`` with its tensors copied to the CPU (``ci`` itself when they are there): what the
    checks and an in-process golden read while the kernel gets the device's."""
    moved = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in ci.args.items()}
    if all(moved[k] is v for k, v in ci.args.items()):
        return ci
    return replace(ci, args=moved)
