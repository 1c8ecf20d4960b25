"""``harness dumps``: a folder of dumps written elsewhere against this machine's goldens.

An NPU host's run, or a device-side dump tool, leaves one file per intermediate
(``harness.intermediates.files``); here the case's inputs are drawn from its seed, its goldens
(and their intermediates) come from the golden cache (computed on the host when missing: this
process imports no kernel), and every file goes through the same checks as a live dump
(``harness.worker.dumps.Collector``), one at a time.

Dumps of another case (another seed, batch or op of the same shapes) compare as garbage, and
nothing in the numbers alone says so; so the result says what it compared against (the case
and its inputs' digest) and warns when the dumps cannot be this case's: a ``harness-case.json``
beside them names another case or inputs digest, or every intermediate computed straight
from the inputs (those consuming no other: ``q_norm``, ``k_norm``, ``v``) is uncorrelated
with this case's golden, which no single bug does to all of them.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from harness.case import Case
from harness.goldens.cache import GoldenCache
from harness.intermediates import files
from harness.worker import dumps, inputs
from harness.worker.input_digest import digest_inputs
from harness.worker.spec_inputs import golden_source

# |cosine| of v below this: unrelated data, not a wrong computation (another seed's v measured
# 0.005 to 0.10 here; a wrong scale keeps it near 1)
UNRELATED_COSINE = 0.25


def compare_folder(case: Case, folder: Path, cache_root: str | None, golden_dtype: str = "fp32") -> dict[str, Any]:
    """The case's table of intermediates (``Collector.to_metrics``) for the dumps in ``folder``, with
    ``compared_with`` (the case and its inputs' digest) and ``warnings`` (dumps not this case's)."""
    dtype = {"fp32": torch.float32, "fp64": torch.float64}[golden_dtype]
    ci = inputs.on_host(inputs.generate(case, torch.device("cpu")))
    digest = digest_inputs(ci.op, {**ci.args, **ci.initial}).digest    # as a run's metrics.inputs_digest
    cache = GoldenCache(cache_root or None)
    source = golden_source(case)       # a builtin op's golden, or a spec op's module's (docs/specs.md)
    cache.get_or_compute(source, ci.spec, ci if case.spec is not None else ci.args, dtype)
    collector = dumps.Collector(case, ci, cache.intermediates(source, ci.spec, None, dtype), outputs=False)
    try:
        collector.read_folder(folder)
        found = collector.to_metrics()
    finally:
        collector.close()
    found["compared_with"] = {"case_id": case.case_id, "inputs_digest": digest, "seed": case.seed,
                              "golden_dtype": golden_dtype}
    found["warnings"] = provenance_warnings(case, digest, folder, found["rows"], collector.items)
    return found


def provenance_warnings(case: Case, digest: str, folder: Path, rows: list[dict[str, Any]], items) -> list[str]:
    """Why the dumps in ``folder`` cannot be ``case``'s (empty when nothing says so)."""
    warnings = []
    said = _provenance(folder)
    if isinstance(said, str):
        warnings.append(said)
    else:
        if said.get("case_id") not in (None, case.case_id):
            warnings.append(f"{files.PROVENANCE} says these dumps are case {said['case_id']!r}, not {case.case_id!r}")
        if said.get("inputs_digest") not in (None, digest):
            warnings.append(f"{files.PROVENANCE} gives inputs digest {said['inputs_digest']}; this case's inputs "
                            f"digest to {digest}: the dumps were made from other inputs")
    roots = {i.name: i for i in items if not i.upstream}
    dumped = {r["name"]: r for r in rows if r["name"] in roots and r["verdict"] not in ("missing", "refused")}
    if any(r["verdict"] in ("ok", "bit-exact") for r in dumped.values()):
        return warnings          # one right input-level intermediate: these are this case's inputs
    # v is v_proj·inv_rms rounded once: no bug but a wrong source leaves it uncorrelated (q_norm and
    # k_norm are not evidence: every seed's queries and keys share a leaning direction); a spec op's
    # input-level ones stand in for it
    witnesses = [n for n, i in roots.items() if n in dumped and (i.declared or i.base == "v")]
    cosines = {n: dumped[n]["metrics"].get("cosine") for n in witnesses}
    cosines = {n: c for n, c in cosines.items() if isinstance(c, float) and c == c}
    if cosines and all(abs(c) < UNRELATED_COSINE for c in cosines.values()):
        listed = ", ".join(f"{n} {c:.6f}" for n, c in cosines.items())
        warnings.append(f"these dumps are likely not this case's: {', '.join(cosines)} uncorrelated with "
                        f"its golden (cosine {listed}) and no input-level intermediate agrees; check the case "
                        f"id, seed and batch they were made with")
    return warnings


def _provenance(folder: Path) -> dict[str, Any] | str:
    path = folder / files.PROVENANCE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return f"{files.PROVENANCE}: unreadable ({type(exc).__name__}), so the dumps' case is not checked"
    return data if isinstance(data, dict) else f"{files.PROVENANCE}: not a JSON object, so the dumps' case is not checked"
