"""A case's inputs, from whoever makes them: a spec op's module (``harness/worker/spec_inputs.py``)
or the generator its op's pack declares (``Pack.inputs``: a module with ``generate(case, device)``,
``input_spec(case)`` and ``source_hash()``).  Every generator yields the same bytes for the same
case on any device, so goldens are cached by ``input_spec`` and a failing seed replays alone."""
from __future__ import annotations

from typing import Any

import torch

from harness import packs
from harness.case import Case
from harness.worker import spec_inputs
from harness.worker.case_inputs import CaseInputs, on_host


def generator(case: Case):
    """The module that makes ``case``'s inputs: its op's pack's generator."""
    return packs.resolve(packs.pack_of(case.op).inputs)


def input_spec(case: Case) -> dict[str, Any]:
    """The canonical description of ``case``'s inputs: the golden cache key's ``spec``."""
    if case.spec is not None:
        return spec_inputs.input_spec(case)
    return generator(case).input_spec(case)


def generate(case: Case, device: torch.device | str = "cpu") -> CaseInputs:
    """The case's inputs, drawn on ``device`` (the same bytes on every device)."""
    device = torch.device(device)
    if case.spec is not None:
        return spec_inputs.generate(case, device)
    return generator(case).generate(case, device)


__all__ = ["CaseInputs", "generate", "generator", "input_spec", "on_host"]
