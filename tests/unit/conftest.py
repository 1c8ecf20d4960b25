"""Fixtures the golden-cache tests share."""
from __future__ import annotations

import pytest
import torch

from harness import goldens


@pytest.fixture
def counted(monkeypatch) -> list[str]:
    """Counts calls of the golden itself (the op of each), the cache's work made visible."""
    calls: list[str] = []
    real = goldens.compute

    def compute(op, inputs, dtype=torch.float32, **kwargs):
        calls.append(op)
        return real(op, inputs, dtype, **kwargs)

    monkeypatch.setattr(goldens, "compute", compute)
    return calls
