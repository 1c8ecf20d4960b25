"""The results store: one SQLite file (WAL), a row per run and a row per result.

Written by the front end (never by a device worker) the moment a result exists:
each ``add_result`` is its own committed transaction, so ``kill -9`` of the
front end at any moment loses no result it had written and leaves a database
that opens (WAL: a committed transaction is in the ``-wal`` file before
``COMMIT`` returns; a killed writer's half transaction is simply not there).
Several processes (pytest-xdist workers, shards on one host) may write the same
file at once: writers take the write lock with ``BEGIN IMMEDIATE`` and wait up
to ``timeout`` seconds for it instead of failing.

Durability: ``synchronous=FULL`` (fsync of the WAL at every commit).  A process
kill is survived with ``NORMAL`` as well; ``FULL`` also survives the host going
down, which a device fault can cause, and costs under 1 ms per result on ext4 (see
``Store`` docstring) next to a kernel case's 100 ms or more.

Reading follows the Hypothesis database habits: a row that does not decode
(garbled JSON, an outcome this harness does not know) is skipped with a
``StoreWarning``, never a crash.  A file written by a *newer* harness (higher
schema version) is a clear ``StoreOpenError``; an older one is migrated on open.

Schema (version 1; ``PRAGMA user_version``):

- ``runs``: one row per run (``kind`` run | pytest | flake | compare | bisect ...):
  ids, ``parent_id`` (a flake/compare/bisect session grouping runs),
  ``resumed_from``, ``ref``/``ref_sha`` (the kernel checkout's name and sha for
  compare/bisect), start/finish times, host, pid, harness version, command,
  devices, provenance, env, summary, and an ``extra`` JSON blob (run options for
  ``--resume``, shard, anything later).
- ``planned``: the cases a run intends, ``(run_id, case_id, repeat)`` unique,
  with the seed and the case's wire form, so ``--resume`` reruns exactly what is
  missing.
- ``results``: one row per result: the full strict-JSON ``Result.to_json()`` in
  ``data`` (plus an ``extra`` blob) and indexed copies of run_id, case_id,
  repeat, outcome, code, label, device, seed, duration_s, log, ref, matrix, op,
  kernel, created_at: enough for history, flake counts, compare tables and
  shard durations without a migration.

No import-time side effects: nothing is opened until a ``Store`` is made.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import socket
import sqlite3
import statistics
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness import __version__
from harness.errors import HarnessError, UsageError
from harness.outcomes import Outcome, Result
from harness.path_kinds import special_kind
from harness.document.summary import strict_json as strict_json_value

DEFAULT_STORE = Path("reports/results.sqlite")
SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 30.0
APPLICATION_ID = 0x4B48524E  # "KHRN": marks the file as a harness results store
_EFFECTIVE = os.access in os.supports_effective_ids


class StoreError(HarnessError):
    """The store failed while in use (a write failed: disk full, ...). One line, names the path."""


class StoreOpenError(StoreError, UsageError):
    """The store cannot be opened (bad path, not a store, newer schema): the user's to fix."""


class StoreWarning(UserWarning):
    """A stored row was unreadable and was skipped."""


# Statements of the current schema, run in order on an empty file.
_SCHEMA = (
    """CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        kind TEXT NOT NULL DEFAULT 'run',
        parent_id TEXT,
        resumed_from TEXT,
        ref TEXT,
        ref_sha TEXT,
        started REAL NOT NULL,
        finished REAL,
        host TEXT NOT NULL,
        pid INTEGER,
        harness_version TEXT NOT NULL,
        command TEXT NOT NULL,
        devices TEXT NOT NULL,
        provenance TEXT NOT NULL,
        env TEXT NOT NULL,
        summary TEXT,
        extra TEXT NOT NULL DEFAULT '{}'
    )""",
    "CREATE INDEX runs_started ON runs(started)",
    "CREATE INDEX runs_parent ON runs(parent_id)",
    "CREATE INDEX runs_resumed ON runs(resumed_from)",
    """CREATE TABLE planned (
        run_id TEXT NOT NULL,
        case_id TEXT NOT NULL,
        repeat INTEGER NOT NULL DEFAULT 0,
        seed INTEGER,
        wire TEXT,
        UNIQUE (run_id, case_id, repeat)
    )""",
    """CREATE TABLE results (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        case_id TEXT NOT NULL,
        repeat INTEGER NOT NULL DEFAULT 0,
        outcome TEXT NOT NULL,
        code TEXT,
        label TEXT NOT NULL,
        device TEXT,
        seed INTEGER,
        duration_s REAL,
        log TEXT,
        ref TEXT,
        matrix TEXT,
        op TEXT,
        kernel TEXT,
        created_at REAL NOT NULL,
        data TEXT NOT NULL,
        extra TEXT NOT NULL DEFAULT '{}'
    )""",
    "CREATE INDEX results_run ON results(run_id, case_id, repeat)",
    "CREATE INDEX results_case ON results(case_id, created_at)",
    "CREATE INDEX results_outcome ON results(outcome, code)",
)

# MIGRATIONS[v](conn) takes a version-v file to version v+1, inside the open transaction.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {}


# -- helpers ---------------------------------------------------------------

def new_run_id(now: float | None = None) -> str:
    """Short, readable, sortable by start time: ``20261130-181500-a1b2``."""
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + "-" + secrets.token_hex(2)


def planned_entry(case: Any, repeat: int = 0) -> dict:
    """The planned form of a ``Case`` (anything with ``case_id``, ``seed`` and ``to_wire()``)."""
    return {"case_id": case.case_id, "repeat": repeat, "seed": getattr(case, "seed", None),
            "case": case.to_wire()}


def planned_entries(items: Iterable[tuple[Any, int]]) -> list[dict]:
    """``planned_entry`` for each ``(case, repeat)``, the wire form written once per distinct case
    (a hunt of 1000 iterations plans one case definition, not 1000 copies of it)."""
    out, seen = [], set()
    for case, repeat in items:
        entry = planned_entry(case, repeat)
        key = (case.case_id, entry["seed"])
        if key in seen:
            entry["case"] = None
        seen.add(key)
        out.append(entry)
    return out


def check_path(path: str | os.PathLike, *, create: bool = True) -> Path:
    """Validate a store path without opening it; raise ``StoreOpenError`` naming the path.

    The file's own directory is created when missing if *its* parent exists
    (``reports/`` in a fresh checkout); a deeper missing directory, a directory
    we cannot create files in (SQLite's WAL needs ``-wal``/``-shm`` next to the
    file), a read-only file or a path that is a directory is an error.  Creates
    nothing but that one directory, and not even that with ``create=False`` (a
    front end validating early for a store another process opens later).
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise StoreOpenError(f"store {path}: is a directory, not a database file")
    kind = special_kind(path)       # stat only: SQLite would block on a FIFO, write through a device
    if kind:
        raise StoreOpenError(f"store {path}: is {kind}, not a database file")
    if not directory.exists():
        if not directory.parent.is_dir():
            raise StoreOpenError(f"store {path}: directory {directory} does not exist (nor does {directory.parent})")
        if not create:
            if not os.access(directory.parent, os.W_OK | os.X_OK, effective_ids=_EFFECTIVE):
                raise StoreOpenError(f"store {path}: cannot create directory {directory}: "
                                     f"{directory.parent} is not writable")
            return path
        try:
            directory.mkdir()
        except FileExistsError:
            pass
        except OSError as exc:
            raise StoreOpenError(f"store {path}: cannot create directory {directory}: {exc.strerror or exc}") from None
    if not directory.is_dir():
        raise StoreOpenError(f"store {path}: {directory} is not a directory")
    # access() also says no for root on read-only mounts and immutable directories; anything
    # it misses (odd network file systems) fails SQLite's own open and write probe instead.
    if not os.access(directory, os.W_OK | os.X_OK, effective_ids=_EFFECTIVE):
        raise StoreOpenError(f"store {path}: directory {directory} is not writable")
    if path.exists() and not os.access(path, os.R_OK | os.W_OK,
                                       effective_ids=_EFFECTIVE):
        raise StoreOpenError(f"store {path}: file is not writable")
    return path


def _dumps(value: Any) -> str:
    """Strict JSON (NaN → null, ±inf → "Infinity"/"-Infinity"), anything odd as its str()."""
    return json.dumps(strict_json_value(value), default=str, allow_nan=False, separators=(",", ":"))


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if -(2 ** 63) <= value < 2 ** 63 else None


def _matcher(pattern: str | Callable[[str], bool]) -> Callable[[str], bool]:
    """A callable as is; a string with ``*``/``?`` as a whole-id glob (brackets are literal,
    as in case ids); any other string as a substring."""
    if callable(pattern):
        return pattern
    if "*" in pattern or "?" in pattern:
        rx = re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern) + r"\Z",
                        re.DOTALL)
        return lambda case_id: rx.match(case_id) is not None
    return lambda case_id: pattern in case_id


def _skip(what: str, exc: BaseException) -> None:
    warnings.warn(f"results store: skipped unreadable {what}: {type(exc).__name__}: {exc}", StoreWarning,
                  stacklevel=3)


_RUN_JSON = {"command": [], "devices": [], "provenance": {}, "env": {}, "summary": None, "extra": {}}


# -- the store ---------------------------------------------------------------

class Store:
    """Results of runs in one SQLite file.  Thread-safe (one connection behind a lock);
    several processes may write one file at once.

    Measured (ext4, a cloud VM disk): 300 ``add_result`` calls take 0.42-0.54 s with
    ``synchronous=FULL`` for results with mismatch-sized metrics (1.4-1.8 ms each, of
    which ~0.8 ms is encoding the JSON) and 0.26 s with ``NORMAL``; 0.87 vs 0.14 ms
    for a bare PASS.  The fsync per result is noise next to a kernel launch.
    """

    synchronous = "FULL"

    def __init__(self, path: str | os.PathLike, *, timeout: float = BUSY_TIMEOUT_S):
        self.path = check_path(path)
        self._lock = threading.RLock()
        self._timeout = timeout
        try:
            self._conn = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None,
                                         check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreOpenError(f"store {self.path}: cannot open: {exc}") from None
        try:
            self._configure()
            self._ensure_schema()
        except BaseException:
            self._conn.close()
            raise

    # -- opening ---------------------------------------------------------
    def _configure(self) -> None:
        try:
            self._retry_locked(lambda: self._conn.execute("PRAGMA journal_mode=WAL").fetchone())
            self._conn.execute(f"PRAGMA synchronous={self.synchronous}")
        except sqlite3.DatabaseError as exc:
            raise self._error("cannot open", exc, StoreOpenError) from None

    def _retry_locked(self, fn: Callable[[], Any]) -> Any:
        """Switching to WAL can report 'locked' without waiting while another process creates the file."""
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _ensure_schema(self) -> None:
        try:
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            self._check_version(version)
            # One write transaction on every open: proves the file is writable before any case runs
            # (setting user_version writes even when unchanged; BEGIN alone would not notice).
            with self._write() as conn:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                self._check_version(version)
                if version == 0:
                    tables = [r[0] for r in conn.execute(
                        "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")]
                    if tables:
                        raise StoreOpenError(f"store {self.path}: not a harness results store "
                                             f"(an SQLite file with tables {', '.join(sorted(tables))})")
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
                else:
                    while version < SCHEMA_VERSION:
                        if version not in MIGRATIONS:
                            raise StoreOpenError(f"store {self.path}: schema version {version} has no migration "
                                                 f"to {SCHEMA_VERSION}")
                        MIGRATIONS[version](conn)
                        version += 1
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            raise self._error("cannot open", exc, StoreOpenError) from None

    def _check_version(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise StoreOpenError(f"store {self.path}: schema version {version} was written by a newer harness "
                                 f"(this one, {__version__}, reads up to {SCHEMA_VERSION}); upgrade, or use --store "
                                 f"to pick another file")

    def _error(self, doing: str, exc: BaseException, error: type[StoreError] = StoreError) -> StoreError:
        text = str(exc)
        if "not a database" in text:
            text = "not an SQLite database"
        return error(f"store {self.path}: {doing}: {text}")

    # -- plumbing ---------------------------------------------------------
    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One transaction holding the write lock from its start (no upgrade deadlocks between processes)."""
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:  # SQLite may have rolled back already (e.g. disk full)
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _writing(self, doing: str, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        try:
            with self._write() as conn:
                return fn(conn)
        except sqlite3.Error as exc:
            raise self._error(doing, exc) from None

    def _query(self, sql: str, args: Iterable[Any] = ()) -> list[dict]:
        with self._lock:
            try:
                cur = self._conn.execute(sql, tuple(args))
                names = [d[0] for d in cur.description]
                return [dict(zip(names, row)) for row in cur.fetchall()]
            except sqlite3.DatabaseError as exc:
                raise self._error("read failed", exc) from None

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writing ----------------------------------------------------------
    def start_run(self, *, command: list[str], devices: list[str], provenance: dict | None = None,
                  env: dict | None = None, cases: list[dict] | None = None, kind: str = "run",
                  resumed_from: str | None = None, parent_id: str | None = None, ref: str | None = None,
                  ref_sha: str | None = None, extra: dict | None = None, run_id: str | None = None) -> str:
        """Record a run (and its planned cases); returns its id.

        With ``run_id`` given the call is idempotent: pytest-xdist workers all call it
        with the id the controller chose, the first one creates the row.
        """
        fields = (kind, parent_id, resumed_from, ref, ref_sha, time.time(), socket.gethostname(), os.getpid(),
                  __version__, _dumps(list(command)), _dumps([str(d) for d in devices]), _dumps(provenance or {}),
                  _dumps(env or {}), _dumps(extra or {}))
        verb = "INSERT" if run_id is None else "INSERT OR IGNORE"
        for candidate in [run_id] if run_id is not None else (new_run_id() for _ in range(20)):
            if self._writing("cannot record the run",
                             lambda conn, rid=candidate: self._insert_run(conn, verb, (rid, *fields), cases)):
                return candidate
        raise StoreError(f"store {self.path}: could not find a free run id")

    def _insert_run(self, conn: sqlite3.Connection, verb: str, row: tuple, cases: list[dict] | None) -> bool:
        try:
            conn.execute(f"{verb} INTO runs (run_id, kind, parent_id, resumed_from, ref, ref_sha, started, host, pid, "
                         "harness_version, command, devices, provenance, env, extra) "
                         "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", row)
        except sqlite3.IntegrityError:  # a generated id already taken: try another
            return False
        if cases:
            self._plan(conn, row[0], cases)
        return True

    def plan(self, run_id: str, cases: list[dict]) -> None:
        """Add planned cases to a run (idempotent per ``(case_id, repeat)``)."""
        self._writing("cannot record planned cases", lambda conn: self._plan(conn, run_id, cases))

    @staticmethod
    def _plan(conn: sqlite3.Connection, run_id: str, cases: list[dict]) -> None:
        conn.executemany(
            "INSERT OR IGNORE INTO planned (run_id, case_id, repeat, seed, wire) VALUES (?,?,?,?,?)",
            [(run_id, c["case_id"], int(c.get("repeat", 0)), _int_or_none(c.get("seed")),
              None if c.get("case") is None else _dumps(c["case"])) for c in cases])

    def add_result(self, run_id: str, result: Result, *, params: dict | None = None, ref: str | None = None,
                   extra: dict | None = None) -> None:
        """Write one result, committed before this returns.  ``params`` (if given) replaces the
        result's own; ``ref`` defaults to the run's ``ref``."""
        data = result.to_json()
        if params is not None:
            data["params"] = dict(params)
        code = None if result.code is None else str(result.code)
        row = (run_id, result.case_id, int(result.repeat), result.outcome.value, code, result.label, result.device,
               _int_or_none(result.seed), float(result.duration_s), result.log, ref, result.matrix, result.op,
               result.kernel, time.time(), _dumps(data), _dumps(extra or {}))
        self._writing("cannot write a result", lambda conn: conn.execute(
            "INSERT INTO results (run_id, case_id, repeat, outcome, code, label, device, seed, duration_s, log, ref, "
            "matrix, op, kernel, created_at, data, extra) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,COALESCE(?, (SELECT ref FROM runs WHERE run_id = ?)),?,?,?,?,?,?)",
            row[:11] + (run_id,) + row[11:]))

    def finish_run(self, run_id: str, summary: dict, *, provenance: dict | None = None) -> None:
        """Mark the run finished with its summary; ``provenance`` (if given) replaces the stored one
        (device details are known only once the workers have started)."""
        self._writing("cannot finish the run", lambda conn: conn.execute(
            "UPDATE runs SET finished = ?, summary = ?, provenance = COALESCE(?, provenance) WHERE run_id = ?",
            (time.time(), _dumps(summary), None if provenance is None else _dumps(provenance), run_id)))

    def update_extra(self, run_id: str, updates: dict) -> None:
        """Merge ``updates`` into the run's ``extra`` in one transaction (a bisect saves its state
        here after every step, so ``--resume`` continues where it stopped)."""
        def merge(conn: sqlite3.Connection) -> None:
            row = conn.execute("SELECT extra FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                raise StoreError(f"store {self.path}: no run {run_id} to update")
            try:
                extra = json.loads(row[0] or "{}")
            except ValueError:
                extra = {}
            extra.update(updates)
            conn.execute("UPDATE runs SET extra = ? WHERE run_id = ?", (_dumps(extra), run_id))
        self._writing("cannot update the run", merge)

    def children(self, parent_id: str) -> list[dict]:
        """Runs grouped under ``parent_id`` (compare and bisect steps), oldest first."""
        rows = self._query(f"{self._RUN_SELECT} WHERE r.parent_id = ? ORDER BY r.started, r.run_id", (parent_id,))
        return [run for run in map(self._decode_run, rows) if run is not None]

    # -- reading ----------------------------------------------------------
    _RUN_SELECT = ("SELECT r.*, (SELECT COUNT(*) FROM results x WHERE x.run_id = r.run_id) AS n_results, "
                   "(SELECT COUNT(*) FROM planned p WHERE p.run_id = r.run_id) AS n_planned FROM runs r")

    def _decode_run(self, row: dict) -> dict | None:
        try:
            out = dict(row)
            for key, default in _RUN_JSON.items():
                out[key] = default if row.get(key) is None else json.loads(row[key])
                if default is not None and type(out[key]) is not type(default):
                    raise TypeError(f"{key} is a {type(out[key]).__name__}, not a {type(default).__name__}")
        except (ValueError, TypeError) as exc:
            _skip(f"run {row.get('run_id')!r}", exc)
            return None
        out["status"] = "finished" if out["finished"] is not None else "unfinished"
        return out

    def run(self, run_id: str) -> dict | None:
        """The run row (JSON fields decoded, plus ``n_results``, ``n_planned``, ``status``); None if absent."""
        rows = self._query(self._RUN_SELECT + " WHERE r.run_id = ?", (run_id,))
        return self._decode_run(rows[0]) if rows else None

    def runs(self, limit: int = 20, *, kind: str | None = None) -> list[dict]:
        """The latest runs, newest first."""
        where, args = ("WHERE r.kind = ?", [kind]) if kind else ("", [])
        rows = self._query(f"{self._RUN_SELECT} {where} ORDER BY r.started DESC, r.run_id DESC LIMIT ?",
                           [*args, int(limit)])
        return [run for run in map(self._decode_run, rows) if run is not None]

    def runs_at(self, ref_sha: str) -> list[dict]:
        """The runs made at commit ``ref_sha`` (``ref_sha`` column: compare, flake hunts with a ref,
        bisect steps, bisect-run), oldest first: ``run_id``, ``kind``, ``started``, ``ref``."""
        return self._query("SELECT run_id, kind, started, ref FROM runs WHERE ref_sha = ? ORDER BY started, run_id",
                           (ref_sha,))

    def _chain(self, run_id: str) -> list[str]:
        """``run_id`` and every run resumed from it, transitively."""
        rows = self._query("WITH RECURSIVE chain(id) AS (SELECT ? UNION SELECT r.run_id FROM runs r "
                           "JOIN chain ON r.resumed_from = chain.id) SELECT id FROM chain", (run_id,))
        return [r["id"] for r in rows]

    def results(self, run_id: str, *, include_resumes: bool = False) -> list[Result]:
        """The run's results in the order written (NaN metrics come back as None, infinities as
        "Infinity"/"-Infinity"); with ``include_resumes`` also those of runs resumed from it."""
        ids = self._chain(run_id) if include_resumes else [run_id]
        marks = ",".join("?" * len(ids))
        out = []
        for row in self._query(f"SELECT id, data FROM results WHERE run_id IN ({marks}) ORDER BY id", ids):
            try:
                out.append(Result.from_json(json.loads(row["data"])))
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                _skip(f"result row {row['id']}", exc)
        return out

    def planned_cases(self, run_id: str) -> list[dict]:
        """``[{"case_id", "repeat", "seed", "case": wire form or None}]`` in planned order."""
        out = []
        for row in self._query("SELECT rowid, case_id, repeat, seed, wire FROM planned WHERE run_id = ? "
                               "ORDER BY rowid", (run_id,)):
            try:
                wire = None if row["wire"] is None else json.loads(row["wire"])
            except ValueError as exc:
                _skip(f"planned case {row['case_id']!r} of run {run_id}", exc)
                continue
            out.append({"case_id": row["case_id"], "repeat": row["repeat"], "seed": row["seed"], "case": wire})
        return out

    def missing(self, run_id: str) -> list[dict]:
        """The planned entries (as ``planned_cases``) with no result in this run or any run resumed
        from it: exactly what ``--resume`` must run.  An entry planned without its wire form
        (a repeat; see ``planned_entries``) gets that of the same case and seed."""
        ids = self._chain(run_id)
        marks = ",".join("?" * len(ids))
        done = {(r["case_id"], r["repeat"]) for r in self._query(
            f"SELECT DISTINCT case_id, repeat FROM results WHERE run_id IN ({marks})", ids)}
        planned = self.planned_cases(run_id)
        wires = {(p["case_id"], p["seed"]): p["case"] for p in planned if p["case"] is not None}
        return [{**p, "case": p["case"] if p["case"] is not None else wires.get((p["case_id"], p["seed"]))}
                for p in planned if (p["case_id"], p["repeat"]) not in done]

    def durations(self, device: str | None = None) -> dict[str, float]:
        """Median ``duration_s`` per case id over every stored result that ran (not SKIPPED).
        ``device``: ``"npu"`` matches every ``npu:N``, ``"npu:3"`` only that one."""
        by_case: dict[str, list[float]] = {}
        for row in self._query("SELECT case_id, device, duration_s FROM results "
                               "WHERE outcome != 'SKIPPED' AND duration_s IS NOT NULL"):
            if device and not (row["device"] == device or str(row["device"]).startswith(device + ":")):
                continue
            by_case.setdefault(row["case_id"], []).append(float(row["duration_s"]))
        return {case_id: statistics.median(values) for case_id, values in sorted(by_case.items())}

    def history(self, case_pattern: str | Callable[[str], bool]) -> list[dict]:
        """Per run and case id matching ``case_pattern`` (glob with ``*``/``?``, else substring, or a
        predicate): when, kind, parent run, host, ref, devices, outcome and label counts.  Oldest run first."""
        matches = _matcher(case_pattern)
        rows = self._query(
            "SELECT x.run_id, x.case_id, x.ref, x.device, x.outcome, x.label, x.created_at, r.started, r.kind, "
            "r.parent_id, r.host, r.ref_sha, r.harness_version, "
            "CASE WHEN json_valid(x.data) THEN json_extract(x.data, '$.metrics.latency.median_s') END AS latency_s "
            "FROM results x LEFT JOIN runs r ON r.run_id = x.run_id "
            "ORDER BY COALESCE(r.started, x.created_at), x.run_id, x.id")
        groups: dict[tuple, dict] = {}
        for row in rows:
            if not matches(row["case_id"]):
                continue
            key = (row["run_id"], row["case_id"], row["ref"])
            g = groups.get(key)
            if g is None:
                g = groups[key] = {
                    "run_id": row["run_id"], "case_id": row["case_id"], "ref": row["ref"], "ref_sha": row["ref_sha"],
                    "started": row["started"] if row["started"] is not None else row["created_at"],
                    "kind": row["kind"], "parent_id": row["parent_id"], "host": row["host"],
                    "harness_version": row["harness_version"],
                    "devices": [], "total": 0, "passed": 0, "failed": 0, "counts": Counter(), "outcomes": Counter(),
                    "latency_s": []}
            if row["device"] and row["device"] not in g["devices"]:
                g["devices"].append(row["device"])
            g["total"] += 1
            g["counts"][row["label"]] += 1
            g["outcomes"][row["outcome"]] += 1
            if row["latency_s"] is not None:        # a timed result's median (docs/latency.md)
                g["latency_s"].append(float(row["latency_s"]))
            try:
                outcome = Outcome(row["outcome"])
            except ValueError:  # written by a newer harness: counted, neither passed nor failed
                continue
            g["passed"] += outcome.passed
            g["failed"] += outcome.failed
        out = list(groups.values())
        for g in out:
            g["counts"] = dict(sorted(g["counts"].items()))
            g["outcomes"] = dict(sorted(g["outcomes"].items()))
        return out


class MemoryStore(Store):
    """The same store in memory: for tests and ``--no-store`` (nothing touches the disk)."""

    def __init__(self) -> None:
        self.path = Path(":memory:")
        self._lock = threading.RLock()
        self._timeout = BUSY_TIMEOUT_S
        self._conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self._ensure_schema()
