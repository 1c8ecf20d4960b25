"""The clean direction: correct kernels get no hygiene finding in a warm worker.

The reference and every kernel of ``tests/outside_kernels/outside`` (torch, torch's SDPA
and flex attention, transformers' Qwen3 modules: libraries that start thread pools and
import modules lazily on first use) run the first case of each shipped tiny matrix, one
warm worker for them all, and none is flagged for process state, threads or processes.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from helpers import ROOT
from harness.casefiles import load_paths
from harness.devices import Device
from harness.outcomes import Outcome
from harness.run.engine import Engine, Planned, RunOptions
from harness.run.spawn import WorkerOptions

OUTSIDE = ROOT / "tests" / "outside_kernels"
KERNELS = ["reference"] + sorted(f"outside.{p.stem}" for p in (OUTSIDE / "outside").glob("[a-z]*.py"))


def test_correct_kernels_are_not_flagged_on_the_tiny_matrices(tmp_path):
    first = {}
    for case in load_paths(sorted(str(p) for p in (ROOT / "cases").glob("*.yaml"))):
        first.setdefault(case.op, case)
    planned = [Planned(i, replace(case, kernel=kernel, case_id=f"{kernel}/{case.case_id}"))
               for i, (kernel, case) in enumerate((k, c) for k in KERNELS for c in first.values())]
    options = RunOptions(devices=[Device("cpu")], worker=WorkerOptions(
        log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "goldens"), kernel_paths=(str(OUTSIDE),)))
    with Engine(options) as engine:
        results = engine.run(planned)
        replacements = engine.workers[0].replacements
    flagged = {r.case_id: r.metrics["hygiene"]["findings"] for r in results
               if r.metrics.get("hygiene", {}).get("findings")}
    assert flagged == {}, "\n".join(f"{k}: {v}" for k, v in flagged.items())
    ran = [r for r in results if r.outcome is not Outcome.BUILD_ERROR]      # ops a kernel does not have
    assert len(ran) >= len(KERNELS) * 2 and replacements == 0
