"""``harness dumps``: a folder of dumps written elsewhere against this machine's goldens.

An NPU host's run, or a device-side dump tool, leaves one file per intermediate
(``harness.intermediates.files``); here the case's inputs are drawn from its seed, its goldens
(and their intermediates) come from the golden cache (computed on the host when missing: this
process imports no kernel), and every file goes through the same checks as a live dump
(``harness.worker.dumps.Collector``), one at a time.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.case import Case


def compare_folder(case: Case, folder: Path, cache_root: str | None, golden_dtype: str = "fp32") -> dict[str, Any]:
    """The case's table of intermediates (``Collector.to_metrics``) for the dumps in ``folder``."""
    import torch

    from harness.goldens.cache import GoldenCache
    from harness.worker import dumps, inputs

    dtype = {"fp32": torch.float32, "fp64": torch.float64}[golden_dtype]
    ci = inputs.on_host(inputs.generate(case, torch.device("cpu")))
    cache = GoldenCache(cache_root or None)
    cache.get_or_compute(case.op, ci.spec, ci.args, dtype)
    collector = dumps.Collector(case, ci, cache.intermediates(case.op, ci.spec, None, dtype))
    try:
        collector.read_folder(folder)
        return collector.to_metrics()
    finally:
        collector.close()
