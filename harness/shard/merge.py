"""``harness report --merge``: the outputs of several shards as one report document.

A source is a JSON document written by ``harness run --json`` or a results store
(an SQLite file written by any harness front end), told apart by content: an
SQLite header is a store, a file starting with ``{`` is JSON, anything else is an
error.  A store contributes every run in it whose ``extra`` carries a ``shard``
(resumed runs are folded into the run they resumed); ``PATH::RUN_ID`` picks one
run, sharded or not.

The merged document has the ``--json`` format (docs/json-schema.md) with
``kind: "merge"``, a ``shards`` list (one entry per source run), ``missing_shards``
and ``warnings``; see docs/sharding.md.  Sources that do not belong together
(different harness versions, matrices, case lists, shard counts or durations,
the same shard twice, a case two shards planned or, with every shard given, a
case none planned, the same result twice) are refused with a one-line
``MergeError`` naming two of them, unless ``force``: then they are merged and
each difference becomes a ``warnings`` entry.
"""
from __future__ import annotations

import json
import math
import socket
import sqlite3
import statistics
import sys
import warnings as warnings_mod
from collections import Counter
from collections.abc import Iterable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import __version__
from harness.errors import UsageError
from harness.outcomes import Outcome, Result
from harness.document import SCHEMA_VERSION
from harness.document.summary import strict_json, summarize
from harness.store import Store, StoreError

SQLITE_MAGIC = b"SQLite format 3\x00"
RUN_SEPARATOR = "::"
FORCE_HINT = "use --force to merge anyway"


class MergeError(UsageError):
    """The sources cannot be merged (unreadable, not a report, not from one sharded run). One line."""


@dataclass
class Source:
    """One shard's output: a JSON document or one run of a store."""

    label: str                       # as the user would name it: "reports/shard-2.json", "r.sqlite::RUN"
    path: Path
    order: int                       # position among the arguments (ties, "later")
    run_id: str | None
    shard: dict | None
    host: str | None
    harness_version: str | None
    started: float | None
    finished: float | None
    devices: list[str]
    provenance: dict
    results: list[dict]
    notes: list[str] = field(default_factory=list)   # rows the store skipped

    @property
    def shard_name(self) -> str | None:
        s = self.shard
        return f"{s.get('index')}/{s.get('total')}" if s else None

    @property
    def when(self) -> float:
        """When its run ended (or started): the later of two sources wins a duplicate."""
        return _num(self.finished) if self.finished is not None else _num(self.started)

    def sort_key(self) -> tuple:
        index = self.shard.get("index") if self.shard else None
        return (index if isinstance(index, int) else math.inf, self.order)


# -- reading sources -----------------------------------------------------------

def split_source(spec: str | Path) -> tuple[Path, str | None]:
    """``"reports/r.sqlite::RUN_ID"`` → ``(Path("reports/r.sqlite"), "RUN_ID")``; a path that
    exists as written is taken whole."""
    text = str(spec)
    if RUN_SEPARATOR in text and not Path(text).exists():
        path, run_id = text.rsplit(RUN_SEPARATOR, 1)
        if path and run_id:
            return Path(path), run_id
    return Path(text), None


def source_kind(path: Path, label: str | None = None) -> str:
    """``"store"`` or ``"json"`` from the file's first bytes; ``MergeError`` if neither or unreadable."""
    label = label or str(path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise MergeError(f"{label}: cannot read: {exc.strerror or exc}") from None
    if head.startswith(SQLITE_MAGIC):
        return "store"
    if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
        return "json"
    raise MergeError(f"{label}: neither a harness JSON report nor a results store")


def read_sources(specs: Iterable[str | Path]) -> list[Source]:
    """Every source run named by ``specs`` (paths, or ``PATH::RUN_ID`` for one run of a store)."""
    out: list[Source] = []
    for spec in specs:
        path, run_id = split_source(spec)
        if source_kind(path, str(spec)) == "json":
            if run_id is not None:
                raise MergeError(f"{spec}: {RUN_SEPARATOR}RUN_ID picks a run of a results store; "
                                 f"{path} is a JSON report")
            out.append(_read_json(path, len(out)))
        else:
            out.extend(_read_store(path, run_id, len(out)))
    return out


def _read_json(path: Path, order: int) -> Source:
    label = str(path)
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as exc:
        raise MergeError(f"{label}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise MergeError(f"{label}: not a harness JSON report (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise MergeError(f"{label}: not a harness JSON report: invalid JSON at line {exc.lineno}, "
                         f"column {exc.colno}: {exc.msg}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise MergeError(f"{label}: not a harness JSON report (no \"results\" list)")
    schema = doc.get("schema")
    if isinstance(schema, int) and schema > SCHEMA_VERSION:
        raise MergeError(f"{label}: report schema {schema} was written by a newer harness (this one, "
                         f"{__version__}, reads up to {SCHEMA_VERSION})")
    for i, r in enumerate(doc["results"]):
        if not (isinstance(r, dict) and isinstance(r.get("case_id"), str) and isinstance(r.get("outcome"), str)):
            raise MergeError(f"{label}: results[{i}] is not a result (needs \"case_id\" and \"outcome\")")
    shard = doc.get("shard")
    return Source(label=label, path=path, order=order, run_id=_str_or_none(doc.get("run_id")),
                  shard=shard if isinstance(shard, dict) else None, host=_str_or_none(doc.get("host")),
                  harness_version=_str_or_none(doc.get("harness_version")),
                  started=_num_or_none(doc.get("started")), finished=_num_or_none(doc.get("finished")),
                  devices=[str(d) for d in doc.get("devices") or []],
                  provenance=doc.get("provenance") if isinstance(doc.get("provenance"), dict) else {},
                  results=list(doc["results"]))


def _probe_store(path: Path, label: str) -> None:
    """Refuse an SQLite file that is not a results store without writing to it (``Store``
    would create its tables in an empty database)."""
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error:
        return                                  # let Store say what is wrong
    with closing(conn):
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc) or "malformed" in str(exc):
                raise MergeError(f"{label}: not a readable SQLite database: {exc}") from None
            return                              # e.g. a WAL file we may not open read-only: Store decides
    if not {"runs", "results"} <= tables:
        raise MergeError(f"{label}: an SQLite database but not a harness results store")


def _read_store(path: Path, run_id: str | None, order: int) -> list[Source]:
    label = str(path)
    _probe_store(path, label)
    try:
        with Store(path) as store:
            if run_id is not None:
                run = store.run(run_id)
                if run is None:
                    raise MergeError(f"{label}{RUN_SEPARATOR}{run_id}: no run {run_id} in the store")
                runs = [run]
            else:
                runs = _sharded_runs(store.runs(limit=2 ** 62))
                if not runs:
                    raise MergeError(f"{label}: no sharded run in the store (none recorded by harness run "
                                     f"--shard); name a run with {label}{RUN_SEPARATOR}RUN_ID")
            out = []
            for run in runs:
                with warnings_mod.catch_warnings(record=True) as caught:
                    warnings_mod.simplefilter("always")
                    results = store.results(run["run_id"], include_resumes=True)
                shard = run["extra"].get("shard")
                out.append(Source(
                    label=f"{label}{RUN_SEPARATOR}{run['run_id']}", path=path, order=order + len(out),
                    run_id=run["run_id"], shard=shard if isinstance(shard, dict) else None, host=run.get("host"),
                    harness_version=run.get("harness_version"), started=_num_or_none(run.get("started")),
                    finished=_num_or_none(run.get("finished")), devices=[str(d) for d in run["devices"]],
                    provenance=run["provenance"], results=[strict_json(r.to_json()) for r in results],
                    notes=[str(w.message) for w in caught]))
            return out
    except StoreError as exc:
        raise MergeError(str(exc)) from None


def _sharded_runs(runs: list[dict]) -> list[dict]:
    """The runs with ``extra.shard``, oldest first, less those resumed from one of them
    (their results are read with the run they resumed)."""
    parent = {r["run_id"]: r.get("resumed_from") for r in runs}
    sharded = [r for r in runs if isinstance(r["extra"].get("shard"), dict)]
    ids = {r["run_id"] for r in sharded}

    def resumes_a_sharded_run(run_id: str) -> bool:
        seen = set()
        up = parent.get(run_id)
        while up is not None and up not in seen:
            if up in ids:
                return True
            seen.add(up)
            up = parent.get(up)
        return False

    kept = [r for r in sharded if not resumes_a_sharded_run(r["run_id"])]
    return sorted(kept, key=lambda r: (_num(r.get("started")), r["run_id"]))


# -- checks --------------------------------------------------------------------

def _matrices(s: Source) -> list[str]:
    """The matrices the source's run was planned over: recorded with the shard, else those of its results."""
    if s.shard and isinstance(s.shard.get("matrices"), list):
        return sorted(set(map(str, s.shard["matrices"])))
    return sorted({str(r.get("matrix", "")) for r in s.results})


def _short(value: Any) -> str:
    return value[:12] if isinstance(value, str) else str(value)


def _differences(sources: list[Source]) -> list[tuple[Source, Source, str]]:
    """``(a, b, what)`` for each way a source differs from the first one (and each shard given twice)."""
    out = []
    ref = sources[0]
    for s in sources[1:]:
        whats = []
        if s.harness_version != ref.harness_version:
            whats.append(f"different harness versions ({ref.harness_version} and {s.harness_version})")
        if _matrices(s) != _matrices(ref):
            names = [", ".join(_matrices(x)) or "none" for x in (ref, s)]
            whats.append(f"different matrices ({names[0]} and {names[1]})")
        if ref.shard and s.shard:
            a, b = ref.shard, s.shard
            if a.get("fingerprint") != b.get("fingerprint"):
                prints = [_short(x.get("fingerprint")) for x in (a, b)]
                whats.append(f"different case lists (fingerprints {prints[0]} and {prints[1]})")
            if a.get("total") != b.get("total"):
                whats.append(f"different shard counts (shards {ref.shard_name} and {s.shard_name})")
            elif a.get("durations_fingerprint") != b.get("durations_fingerprint"):
                splits = [f"{x.get('balanced_by')}, {_short(x.get('durations_fingerprint'))}" for x in (a, b)]
                whats.append(f"split with different durations ({splits[0]} and {splits[1]}): "
                             "cases may be missing or doubled")
        out.extend((ref, s, what) for what in whats)
    first_of: dict[tuple, Source] = {}
    for s in sources:
        if s.shard:
            key = (s.shard.get("fingerprint"), s.shard.get("total"), s.shard.get("index"))
            if key in first_of:
                out.append((first_of[key], s, f"both are shard {s.shard_name}"))
            else:
                first_of[key] = s
    return out


def _ids(value: Any) -> list[str] | None:
    return [str(x) for x in value] if isinstance(value, list) else None


def _plan_conflicts(sources: list[Source]) -> list[tuple[Source, Source, str]]:
    """``(a, b, what)`` for a case two shards of one split both planned (an overlap) and, when
    every shard of the split is given, a case of it that none planned (a gap).  Only shards
    that recorded their plan (``shard.planned``, ``shard.split_cases``) are checked."""
    out = []
    groups: dict[tuple, list[Source]] = {}
    for s in sources:
        if s.shard and _ids(s.shard.get("planned")) is not None:
            groups.setdefault((s.shard.get("fingerprint"), s.shard.get("total")), []).append(s)
    for (_, total), group in groups.items():
        planner: dict[str, Source] = {}
        for s in group:
            for case_id in _ids(s.shard["planned"]):
                other = planner.setdefault(case_id, s)
                if other is not s and other.shard_name != s.shard_name:
                    out.append((other, s, f"case {case_id} is planned by both shards {other.shard_name} and "
                                          f"{s.shard_name} (overlapping splits)"))
                    break
        whole = next((_ids(s.shard.get("split_cases")) for s in group
                      if _ids(s.shard.get("split_cases")) is not None), None)
        if whole is None or {s.shard.get("index") for s in group} != set(range(1, _int(total) + 1)):
            continue
        gap = next((case_id for case_id in whole if case_id not in planner), None)
        if gap is not None:
            names = _and([s.shard_name for s in group])
            out.append((group[0], group[-1], f"case {gap} of the split is planned by none of shards {names} "
                                             "(a gap in the splits)"))
    return out


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _duplicates(sources: list[Source]) -> tuple[dict[tuple, Source], list[tuple[Source, Source, int, tuple]]]:
    """Who keeps each ``(case_id, repeat)``: the later source when two have it.  Also
    ``(loser, winner, count, first key)`` per pair of sources that share results."""
    owner: dict[tuple, Source] = {}
    pairs: dict[tuple[int, int], list] = {}
    for s in sources:
        for key in dict.fromkeys(_key(r) for r in s.results):
            other = owner.get(key)
            if other is None:
                owner[key] = s
                continue
            loser, winner = (other, s) if (other.when, other.order) <= (s.when, s.order) else (s, other)
            owner[key] = winner
            entry = pairs.setdefault((loser.order, winner.order), [loser, winner, 0, key])
            entry[2] += 1
    return owner, [tuple(v) for v in pairs.values()]


def _key(r: dict) -> tuple:
    repeat = r.get("repeat", 0)
    return (r["case_id"], repeat if isinstance(repeat, int) else 0)


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _coverage(sources: list[Source]) -> tuple[list[str], list[str]]:
    """``(missing shards as "I/N", warnings)``: shards of the split not given, shards that
    have fewer results than cases planned."""
    notes = []
    sharded = [s for s in sources if s.shard]
    missing: list[str] = []
    if sharded:
        splits = {(s.shard.get("fingerprint"), s.shard.get("total")) for s in sharded}
        total = sharded[0].shard.get("total")
        if len(splits) > 1 or not isinstance(total, int):
            notes.append("cannot tell which shards are missing: the sources were split differently")
        else:
            present = {s.shard.get("index") for s in sharded}
            missing = [f"{i}/{total}" for i in range(1, total + 1) if i not in present]
            if missing:
                notes.append(f"shard{'s' if len(missing) > 1 else ''} {_and(missing)} missing: the merged "
                             f"report covers {total - len(missing)} of {total} shards")
    for s in sharded:
        planned = s.shard.get("cases")
        have = len({r["case_id"] for r in s.results})
        if isinstance(planned, int) and have < planned:
            notes.append(f"{s.label} (shard {s.shard_name}): {have} of {planned} cases have a result "
                         f"(an interrupted run?)")
    return missing, notes


# -- the document ----------------------------------------------------------------

def _summary(results: list[dict]) -> tuple[dict, list[str]]:
    """``summarize`` over the results; outcomes this harness does not know are counted in
    ``total``/``counts``/``outcomes`` only (neither passed nor failed)."""
    known, unknown = [], []
    for r in results:
        try:
            data = dict(r)
            if not isinstance(data.get("duration_s"), (int, float)):
                data["duration_s"] = 0.0
            known.append(Result.from_json(data))
        except (ValueError, TypeError, KeyError):
            unknown.append(r)
    summary = summarize(known)
    notes = []
    if unknown:
        summary["total"] += len(unknown)
        labels = Counter(str(r.get("label", r.get("outcome"))) for r in unknown)
        outcomes = Counter(str(r.get("outcome")) for r in unknown)
        summary["counts"] = dict(sorted((Counter(summary["counts"]) + labels).items()))
        summary["outcomes"] = dict(sorted((Counter(summary["outcomes"]) + outcomes).items()))
        notes.append(f"{len(unknown)} result(s) with an outcome this harness does not know "
                     f"({', '.join(sorted(outcomes))}): counted, neither passed nor failed")
    return summary, notes


def _shard_entry(s: Source) -> dict:
    summary, _ = _summary(s.results)
    return {
        "source": s.label, "path": str(s.path), "run_id": s.run_id, "shard": s.shard, "host": s.host,
        "harness_version": s.harness_version, "started": s.started, "finished": s.finished,
        "devices": s.devices, "results": len(s.results), "cases": len({r["case_id"] for r in s.results}),
        "summary": summary, "provenance": s.provenance,
    }


def merge(sources: Iterable[str | Path], *, force: bool = False, command: list[str] | None = None) -> dict:
    """One report document (the ``--json`` format, ``kind: "merge"``) from shard outputs.

    ``sources``: JSON reports, results stores, ``STORE::RUN_ID``.  Raises ``MergeError``
    (one line naming two sources) for sources that do not belong together unless
    ``force``; missing or partial shards are only ``warnings``.
    """
    runs = sorted(read_sources(sources), key=Source.sort_key)
    if not runs:
        raise MergeError("nothing to merge: no sources given")
    warnings: list[str] = [note for s in runs for note in s.notes]
    for a, b, what in _differences(runs) + _plan_conflicts(runs):
        if not force:
            raise MergeError(f"cannot merge {a.label} and {b.label}: {what}; {FORCE_HINT}")
        warnings.append(f"{a.label} and {b.label}: {what} (merged with --force)")
    owner, dups = _duplicates(runs)
    for loser, winner, count, (case_id, repeat) in dups:
        if not force:
            raise MergeError(f"cannot merge {loser.label} and {winner.label}: {count} result(s) in both "
                             f"(first: {case_id} repeat {repeat}); use --force to keep the later ones")
        warnings.append(f"{loser.label} and {winner.label}: {count} result(s) in both (first: {case_id} "
                        f"repeat {repeat}): kept those of {winner.label}, which finished later")
    results = [r for s in runs for r in s.results if owner[_key(r)] is s]
    missing, coverage_notes = _coverage(runs)
    warnings.extend(coverage_notes)
    summary, summary_notes = _summary(results)
    warnings.extend(summary_notes)

    versions = {s.harness_version for s in runs}
    devices = list(dict.fromkeys(d for s in runs for d in s.devices))
    device_info: dict = {}
    for s in runs:
        for name, info in (s.provenance.get("devices") or {}).items():
            device_info.setdefault(name, info)
    starts = [s.started for s in runs if s.started is not None]
    ends = [s.finished if s.finished is not None else s.started for s in runs]
    ends = [e for e in ends if e is not None]
    return {
        "schema": SCHEMA_VERSION,
        "harness_version": versions.pop() if len(versions) == 1 and None not in versions else __version__,
        "command": list(command if command is not None else sys.argv),
        "host": socket.gethostname(),
        "started": min(starts) if starts else None,
        "finished": max(ends) if ends else None,
        "devices": devices,
        "provenance": strict_json({"run": runs[0].provenance.get("run") or {}, "devices": device_info}),
        "results": results,
        "summary": summary,
        "kind": "merge",
        "shards": strict_json([_shard_entry(s) for s in runs]),
        "missing_shards": missing,
        "warnings": warnings,
    }


def load_durations(spec: str | Path, device: str | None = None) -> dict[str, float]:
    """Median ``duration_s`` per case id (SKIPPED left out) from a JSON report (a merged one
    too) or a results store (``Store.durations``: every stored result): what ``--shard``
    balances by.  ``device`` as in ``Store.durations``."""
    path, run_id = split_source(spec)
    if source_kind(path, str(spec)) == "store" and run_id is None:
        _probe_store(path, str(path))
        try:
            with Store(path) as store:
                return store.durations(device)
        except StoreError as exc:
            raise MergeError(str(exc)) from None
    by_case: dict[str, list[float]] = {}
    for s in read_sources([spec]):
        for r in s.results:
            d, dev = r.get("duration_s"), str(r.get("device", ""))
            if r.get("outcome") == Outcome.SKIPPED.value or not isinstance(d, (int, float)) or isinstance(d, bool):
                continue
            if device and not (dev == device or dev.startswith(device + ":")):
                continue
            if math.isfinite(d):
                by_case.setdefault(r["case_id"], []).append(float(d))
    return {case_id: statistics.median(v) for case_id, v in sorted(by_case.items())}


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _num_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)
