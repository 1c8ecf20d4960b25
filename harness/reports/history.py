"""Past runs read back from the store: the report document of a stored run, whatever its
kind (``harness report RUN_ID``), and a case's history across runs (``harness history``).

A plain run (``run``, ``pytest``) is its own results; a flake hunt adds its
per-case summaries; ``compare`` and ``bisect`` keep their results in child runs
(one per ref or step) and their verdicts in the parent's ``extra``.  Everything
is rebuilt from what the store holds, so any stored run renders in any format.
The domain modules (flake summaries, the compare table, the bisect state) do the
rebuilding here; the renderers beside this module only read the document.

In a history a session's child runs (a bisect's steps, a compare's refs) are one entry
under their parent, not one unrelated line each.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from harness.bisect.driver import BisectState, signature_failure
from harness.bisect.session import devices_provenance
from harness.errors import UsageError
from harness.flake.summary import summarize_hunt
from harness.outcomes import Result
from harness.latency.across import latency_rows
from harness.refs import compare as refcompare
from harness.document import build_document
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
    if kind == "latency-bisect":    # bisect --slower-than: its steps are compares, their refs' results below them
        steps = store.children(run_id)
        results = [r for step in steps for c in store.children(step["run_id"]) for r in store.results(c["run_id"])]
        keys["slower_than"] = (run.get("summary") or {}).get("slower_than")
    elif kind in ("compare", "bisect"):
        children = store.children(run_id)
        results: list[Result] = [r for child in children for r in store.results(child["run_id"])]
        if kind == "compare":
            names = [ref["name"] for ref in extra.get("refs", [])] or sorted({r.ref or "" for r in results})
            refs_by_name = {c["extra"].get("ref", {}).get("name"): c["extra"].get("ref", {}) for c in children}
            keys["refs"] = [{"name": n, "sha": refs_by_name.get(n, {}).get("sha"),
                             "subject": refs_by_name.get(n, {}).get("subject"),
                             "build": refs_by_name.get(n, {}).get("build")} for n in names]
            keys["compare"] = [row.to_json() for row in refcompare.table(results, names)] if results else []
            latency = (extra.get("plan") or {}).get("latency")
            if latency and results:      # a latency compare: its verdicts (docs/latency.md)
                keys["latency"] = latency_rows(results, names, latency["threshold"], latency.get("seeds"))
        else:
            state = BisectState.from_dict(extra["bisect"]["state"])
            keys["bisect"] = {**state.report(), "failure": signature_failure(results, state.signature)}
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


# ``history --kind``: the stored run kinds of each command (a session's child runs, and
# ``bisect-run``, belong to their command's family).
KIND_FAMILIES = {"run": ("run", "pytest"), "flake": ("flake",), "compare": ("compare", "compare-ref"),
                 "bisect": ("bisect", "bisect-step", "bisect-run"), "audit": ("audit", "audit-mutant")}

# Runs of a kernel that is not the user's: an audit's mutation operators.  Their failures are
# the mutant's, never the case's; a history lists them only on request, apart and named.
MUTANT_KINDS = ("audit-mutant",)


@dataclass(frozen=True)
class HistoryEntry:
    """One entry of a case's history: ``row`` as ``Store.history`` gives it (``run_id, case_id, kind,
    ref, ref_sha, started, devices, total, passed, failed, counts, outcomes``); for a session (a
    bisect, a compare) ``row`` is the parent run with its steps' counts summed, and ``steps`` its
    child runs' rows, oldest first.  ``mutants``: with ``case_history(..., mutants=True)``, an
    audit's mutant runs of the case, each row with a ``mutant`` name; never summed into ``row``."""

    row: dict
    steps: tuple[dict, ...] = ()
    mutants: tuple[dict, ...] = ()


def case_history(store: Store, pattern: str, kind: str | None = None, *,
                 mutants: bool = False) -> list[HistoryEntry]:
    """The stored runs with results for a case matching ``pattern`` (``Store.history``), of the
    ``KIND_FAMILIES[kind]`` kinds when ``kind`` is given, child runs grouped under their parent;
    oldest first.  Only runs of the user's kernel count: an audit's mutant runs are left out,
    or with ``mutants`` listed under their audit's own row, named by operator."""
    rows = store.history(pattern)
    if kind is not None:
        rows = [row for row in rows if row["kind"] in KIND_FAMILIES[kind]]
    grouped: dict[tuple, tuple[dict, list[dict]]] = {}
    apart: dict[tuple, list[dict]] = {}
    parents: dict[str, dict | None] = {}
    for row in rows:
        parent_id = row.get("parent_id")
        if row["kind"] in MUTANT_KINDS:
            if mutants:
                apart.setdefault((parent_id, row["case_id"], row["ref"]), []).append(
                    {**row, "mutant": _mutant_name(store.run(row["run_id"]))})
            continue
        if parent_id is None:
            grouped[(row["run_id"], row["case_id"], row["ref"])] = (row, [])
            continue
        if parent_id not in parents:
            parents[parent_id] = store.run(parent_id)
        grouped.setdefault((parent_id, row["case_id"]), (_parent_row(parent_id, parents[parent_id], row), []))[1] \
            .append(row)
    entries = []
    for key, (head, steps) in grouped.items():
        entry = HistoryEntry(_summed(head, steps), tuple(steps)) if steps else HistoryEntry(head)
        entries.append(HistoryEntry(entry.row, entry.steps, tuple(apart.pop(key, ()))))
    for (parent_id, _, _), rows_apart in apart.items():     # the audit's own row is not there (--kind)
        head = _parent_row(parent_id, store.run(parent_id), rows_apart[0])
        entries.append(HistoryEntry({**head, "devices": [], "total": 0, "passed": 0, "failed": 0,
                                     "counts": {}, "outcomes": {}}, (), tuple(rows_apart)))
    return sorted(entries, key=lambda e: e.row["started"])


def _mutant_name(run: dict | None) -> str:
    """The operator an audit-mutant run applied, as its ``extra`` names it."""
    extra = run["extra"] if run else {}
    name = str(extra.get("mutant") or "?")
    return f"{name} (sensitivity step)" if extra.get("sensitivity") else name


def _parent_row(parent_id: str, run: dict | None, first_step: dict) -> dict:
    return {"run_id": parent_id, "case_id": first_step["case_id"], "parent_id": None,
            "kind": run["kind"] if run else None, "ref": run["ref"] if run else None, "ref_sha": None,
            "started": run["started"] if run else first_step["started"],
            "host": run["host"] if run else first_step["host"], "harness_version": first_step["harness_version"]}


def _summed(head: dict, steps: list[dict]) -> dict:
    counts: Counter = Counter()
    outcomes: Counter = Counter()
    devices: list[str] = []
    for step in steps:
        counts.update(step["counts"])
        outcomes.update(step["outcomes"])
        devices += [d for d in step["devices"] if d not in devices]
    return {**head, "devices": devices, "total": sum(s["total"] for s in steps),
            "passed": sum(s["passed"] for s in steps), "failed": sum(s["failed"] for s in steps),
            "counts": dict(sorted(counts.items())), "outcomes": dict(sorted(outcomes.items())),
            "latency_s": []}     # a session's refs and commits differ: each step shows its own
