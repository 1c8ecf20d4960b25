"""The report document of a stored run, whatever its kind, for ``harness report RUN_ID``.

A plain run (``run``, ``pytest``) is its own results; a flake hunt adds its
per-case summaries; ``compare`` and ``bisect`` keep their results in child runs
(one per ref or step) and their verdicts in the parent's ``extra``.  Everything
is rebuilt from what the store holds, so any stored run renders in any format.
The domain modules (flake summaries, the compare table, the bisect state) do the
rebuilding here, below the renderers, which only read the document.
"""
from __future__ import annotations

from harness.bisect.driver import BisectState
from harness.bisect.session import devices_provenance
from harness.errors import UsageError
from harness.flake.summary import summarize_hunt
from harness.outcomes import Result
from harness.refs import compare as refcompare
from harness.report_document import build_document
from harness.store import Store


def stored_document(store: Store, run_id: str) -> dict:
    """Raises ``UsageError`` (one line) when the store has no such run."""
    run = store.run(run_id)
    if run is None:
        raise UsageError(f"no run {run_id} in {store.path}")
    kind = run["kind"]
    extra = run["extra"]
    keys: dict = {"kind": kind, "run_id": run_id, "shard": extra.get("shard")}
    provenance = run["provenance"]
    if kind in ("compare", "bisect"):
        children = store.children(run_id)
        results: list[Result] = [r for child in children for r in store.results(child["run_id"])]
        if kind == "compare":
            names = [ref["name"] for ref in extra.get("refs", [])] or sorted({r.ref or "" for r in results})
            refs_by_name = {c["extra"].get("ref", {}).get("name"): c["extra"].get("ref", {}) for c in children}
            keys["refs"] = [{"name": n, "sha": refs_by_name.get(n, {}).get("sha"),
                             "subject": refs_by_name.get(n, {}).get("subject"),
                             "build": refs_by_name.get(n, {}).get("build")} for n in names]
            keys["compare"] = [row.to_json() for row in refcompare.table(results, names)] if results else []
        else:
            state = BisectState.from_dict(extra["bisect"]["state"])
            keys["bisect"] = state.report()
            keys["refs"] = state.endpoint_refs()
            if "devices" not in provenance:     # an unfinished bisect, or one stored by an older harness
                provenance = {**provenance, "devices": devices_provenance(store, run_id)}
    else:
        results = store.results(run_id, include_resumes=True)
        if kind == "flake":
            conf = (extra.get("flake") or {}).get("conf", 0.95)
            keys["flake"] = {case_id: s.to_json() for case_id, s in summarize_hunt(results, conf).items()}
    doc = build_document(results, started=run["started"], devices=run["devices"], command=run["command"],
                         provenance=provenance, **keys)
    doc["finished"] = run["finished"]
    doc["host"] = run["host"]
    doc["harness_version"] = run["harness_version"]
    return doc
