"""The report document of a stored run, whatever its kind, for ``harness report RUN_ID``.

A plain run (``run``, ``pytest``) is its own results; a flake hunt adds its
per-case summaries; ``compare`` and ``bisect`` keep their results in child runs
(one per ref or step) and their verdicts in the parent's ``extra``.  Everything
is rebuilt from what the store holds, so any stored run renders in any format.
"""
from __future__ import annotations

from harness.errors import UsageError
from harness.flake import hunt as flake
from harness.refs import compare as refcompare
from harness.outcomes import Result
from harness.reports.json_report import build_document
from harness.store import Store


def stored_document(store: Store, run_id: str) -> dict:
    """Raises ``UsageError`` (one line) when the store has no such run."""
    run = store.run(run_id)
    if run is None:
        raise UsageError(f"no run {run_id} in {store.path}")
    kind = run["kind"]
    extra = run["extra"]
    keys: dict = {"kind": kind, "run_id": run_id, "shard": extra.get("shard")}
    if kind in ("compare", "bisect"):
        children = store.children(run_id)
        results: list[Result] = [r for child in children for r in store.results(child["run_id"])]
        if kind == "compare":
            names = [ref["name"] for ref in extra.get("refs", [])] or sorted({r.ref or "" for r in results})
            refs_by_name = {c["extra"].get("ref", {}).get("name"): c["extra"].get("ref", {}) for c in children}
            keys["refs"] = [{"name": n, "sha": refs_by_name.get(n, {}).get("sha"),
                             "subject": refs_by_name.get(n, {}).get("subject"),
                             "build": refs_by_name.get(n, {}).get("build")} for n in names]
            keys["compare"] = refcompare.table(results, names) if results else []
        else:
            from harness.bisect.driver import BisectState
            state = BisectState.from_dict(extra["bisect"]["state"])
            keys["bisect"] = state.report()
            keys["refs"] = state.endpoint_refs()
    else:
        results = store.results(run_id, include_resumes=True)
        if kind == "flake":
            conf = (extra.get("flake") or {}).get("conf", 0.95)
            keys["flake"] = flake.summarize_hunt(results, conf)
    doc = build_document(results, started=run["started"], devices=run["devices"], command=run["command"],
                         provenance=run["provenance"], **keys)
    doc["finished"] = run["finished"]
    doc["host"] = run["host"]
    doc["harness_version"] = run["harness_version"]
    return doc
