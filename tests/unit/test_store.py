"""The results store: round trips, runs, resume bookkeeping, durations, history, schema
versions, unusable paths, unreadable rows, concurrent writers.

Most tests run against both the SQLite file and its in-memory twin.
"""
from __future__ import annotations

import json
import math
import multiprocessing
import sqlite3
import subprocess
import threading
import warnings
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from harness import store as store_mod
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.errors import UsageError
from harness.outcomes import Outcome, Result
from harness.store import (
    DEFAULT_STORE,
    SCHEMA_VERSION,
    MemoryStore,
    Store,
    StoreError,
    StoreOpenError,
    StoreWarning,
    check_path,
    new_run_id,
    planned_entry,
)


@pytest.fixture(params=["file", "memory"])
def store(request, tmp_path):
    s = Store(tmp_path / "results.sqlite") if request.param == "file" else MemoryStore()
    yield s
    s.close()


def start(s, **kw) -> str:
    kw.setdefault("command", ["harness", "run", "cases"])
    kw.setdefault("devices", ["cpu"])
    kw.setdefault("provenance", {"run": {"harness_git": None}})
    return s.start_run(env={"PTO2_X": "1"}, **kw)


def result(case_id: str, outcome=Outcome.PASS, **kw) -> Result:
    return Result(case_id=case_id, outcome=outcome, matrix="m", op="rope_kv_write", kernel="reference",
                  device=kw.pop("device", "cpu"), **kw)


def make_case(case_id: str, seed: int = 1) -> Case:
    return Case(case_id=case_id, matrix="m", source="cases/m.yaml:3", op="rope_kv_write", kernel="reference",
                geometry=PRESETS["tiny"], seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("arange"),
                seed=seed, params={"batch": 4, "seed": seed})


# -- round trips -------------------------------------------------------------

def test_results_round_trip_with_non_finite_metrics(store):
    rid = start(store)
    written = [
        result("a[seed=1]", metrics={"max_abs": float("nan"), "max_rel": float("inf"), "lo": float("-inf"),
                                     "per_head": [0.0, float("nan")], "ok": 0.25},
               seed=1, duration_s=0.5, log="/tmp/a.log", params={"seed": 1, "slot_mode": "arange"}),
        result("b", Outcome.DEVICE_FAULT, code=507018, summary="aicore exception", sticky=True, repeat=3),
        result("c", Outcome.ORCH_ERROR, code="orch_error_code=2", report="Mismatched elements: 2 / 3 (66.7%)"),
    ]
    for r in written:
        store.add_result(rid, r)
    back = store.results(rid)
    assert [r.case_id for r in back] == ["a[seed=1]", "b", "c"]
    a = back[0]
    assert a.metrics == {"max_abs": None, "max_rel": "Infinity", "lo": "-Infinity", "per_head": [0.0, None],
                         "ok": 0.25}
    assert (a.seed, a.duration_s, a.log, a.params) == (1, 0.5, "/tmp/a.log", {"seed": 1, "slot_mode": "arange"})
    assert back[1] == written[1] and back[1].label == "FAIL_507018" and back[1].code == 507018
    assert back[2] == written[2]


def test_params_argument_replaces_the_results_own(store):
    rid = start(store)
    store.add_result(rid, result("a", params={"x": 1}), params={"batch": 16, "seq_lens": "multi_block"})
    assert store.results(rid)[0].params == {"batch": 16, "seq_lens": "multi_block"}


def test_indexed_columns_mirror_the_result(tmp_path):
    with Store(tmp_path / "r.sqlite") as s:
        rid = start(s, ref="upstream")
        s.add_result(rid, result("a", Outcome.DEVICE_FAULT, code=507018, seed=7, repeat=2, duration_s=1.5,
                                 log="/l", device="npu:3"), extra={"worker": "gw1"})
        s.add_result(rid, result("a", repeat=3, device="npu:3"), ref="fix")
    with closing(sqlite3.connect(tmp_path / "r.sqlite")) as conn, conn:
        rows = conn.execute("SELECT run_id, case_id, repeat, outcome, code, label, device, seed, duration_s, log, "
                            "ref, extra FROM results ORDER BY id").fetchall()
    assert rows[0] == (rid, "a", 2, "DEVICE_FAULT", "507018", "FAIL_507018", "npu:3", 7, 1.5, "/l", "upstream",
                       '{"worker":"gw1"}')
    assert rows[1][10] == "fix"


# -- runs ---------------------------------------------------------------------

def test_runs_are_listed_newest_first_with_counts_and_status(store):
    first = start(store, command=["harness", "run", "a"], cases=[{"case_id": "x"}, {"case_id": "y"}])
    second = start(store, kind="pytest", devices=["npu:0", "npu:1"])
    store.add_result(first, result("x"))
    store.finish_run(first, {"total": 1, "failed": 0})
    listed = store.runs()
    assert [r["run_id"] for r in listed] == [second, first]
    old = listed[1]
    assert old["command"] == ["harness", "run", "a"] and old["devices"] == ["cpu"]
    assert old["env"] == {"PTO2_X": "1"} and old["provenance"] == {"run": {"harness_git": None}}
    assert (old["n_results"], old["n_planned"], old["status"], old["summary"]) == (1, 2, "finished",
                                                                                    {"total": 1, "failed": 0})
    assert old["host"] and old["harness_version"] and old["pid"] and old["finished"] >= old["started"]
    assert listed[0]["status"] == "unfinished" and listed[0]["devices"] == ["npu:0", "npu:1"]
    assert [r["run_id"] for r in store.runs(limit=1)] == [second]
    assert [r["run_id"] for r in store.runs(kind="pytest")] == [second]
    assert store.run(first)["run_id"] == first and store.run("nope") is None


def test_run_ids_are_short_readable_and_sortable():
    a, b = new_run_id(1_000_000_000), new_run_id(1_000_000_060)
    assert len(a) == len("20010909-034640-a1b2") and a < b
    assert a[:8].isdigit() and a[8] == "-" and a[15] == "-"


def test_start_run_with_a_given_id_is_idempotent(store):
    rid = new_run_id()
    assert start(store, run_id=rid, kind="pytest", cases=[{"case_id": "a"}]) == rid
    assert start(store, run_id=rid, kind="pytest", cases=[{"case_id": "a"}, {"case_id": "b"}]) == rid
    assert len(store.runs()) == 1
    assert [p["case_id"] for p in store.planned_cases(rid)] == ["a", "b"]


# -- planned, missing, resume -------------------------------------------------

def test_planned_cases_keep_wire_forms_and_order(store):
    cases = [make_case("m[seed=2]", 2), make_case("m[seed=1]", 1)]
    rid = start(store, cases=[planned_entry(c, repeat=r) for c in cases for r in (0, 1)])
    planned = store.planned_cases(rid)
    assert [(p["case_id"], p["repeat"], p["seed"]) for p in planned] == [
        ("m[seed=2]", 0, 2), ("m[seed=2]", 1, 2), ("m[seed=1]", 0, 1), ("m[seed=1]", 1, 1)]
    assert Case.from_wire(planned[0]["case"]) == cases[0]


def test_missing_after_partial_results_and_through_a_resume_chain(store):
    entries = [{"case_id": c, "repeat": r} for c in ("a", "b", "c") for r in (0, 1)]
    rid = start(store, cases=entries)
    store.add_result(rid, result("a", repeat=0))
    store.add_result(rid, result("b", repeat=1))
    store.add_result(rid, result("zzz"))  # not planned: ignored by missing()
    todo = store.missing(rid)
    assert [(m["case_id"], m["repeat"]) for m in todo] == [("a", 1), ("b", 0), ("c", 0), ("c", 1)]

    resumed = start(store, cases=todo, resumed_from=rid)
    store.add_result(resumed, result("a", repeat=1))
    assert [(m["case_id"], m["repeat"]) for m in store.missing(resumed)] == [("b", 0), ("c", 0), ("c", 1)]
    assert [(m["case_id"], m["repeat"]) for m in store.missing(rid)] == [("b", 0), ("c", 0), ("c", 1)]

    again = start(store, cases=store.missing(resumed), resumed_from=resumed)
    for case_id, repeat in (("b", 0), ("c", 0), ("c", 1)):
        store.add_result(again, result(case_id, repeat=repeat))
    assert store.missing(rid) == [] and store.missing(resumed) == []
    assert len(store.results(rid)) == 3
    assert sorted((r.case_id, r.repeat) for r in store.results(rid, include_resumes=True)) == sorted(
        [("zzz", 0)] + [(e["case_id"], e["repeat"]) for e in entries])


# -- durations and history ----------------------------------------------------

def test_durations_are_medians_per_case_skips_excluded(store):
    rid = start(store)
    for d in (1.0, 5.0, 2.0):
        store.add_result(rid, result("a", duration_s=d))
    for d in (1.0, 4.0):
        store.add_result(rid, result("b", duration_s=d, device="npu:1"))
    store.add_result(rid, result("b", Outcome.HANG, duration_s=60.0, device="npu:2"))
    store.add_result(rid, result("c", Outcome.SKIPPED, duration_s=0.0))
    assert store.durations() == {"a": 2.0, "b": 4.0}
    assert store.durations(device="npu") == {"b": 4.0}
    assert store.durations(device="npu:1") == {"b": 2.5}
    assert store.durations(device="cuda") == {}


def test_history_counts_outcomes_per_run_and_ref(store):
    case = "decode[batch=16,slot_mode=const(-1),seed=1]"
    up = start(store, kind="compare", ref="upstream", ref_sha="68889bc")
    for _ in range(5):
        store.add_result(up, result(case, Outcome.DEVICE_FAULT, code=507018, device="npu:6"))
    store.add_result(up, result("decode[batch=1,slot_mode=arange,seed=1]"))
    fix = start(store, kind="compare", ref="fix", ref_sha="65ae4d5")
    for i in range(5):
        store.add_result(fix, result(case, device=f"npu:{i % 2}"))
    hist = store.history("decode[batch=16,*]")
    assert [(h["run_id"], h["ref"], h["ref_sha"], h["total"], h["counts"]) for h in hist] == [
        (up, "upstream", "68889bc", 5, {"FAIL_507018": 5}),
        (fix, "fix", "65ae4d5", 5, {"PASS": 5}),
    ]
    assert hist[0]["failed"] == 5 and hist[1]["passed"] == 5 and hist[1]["devices"] == ["npu:0", "npu:1"]
    assert hist[0]["outcomes"] == {"DEVICE_FAULT": 5} and hist[0]["kind"] == "compare" and hist[0]["started"]
    assert len(store.history("slot_mode=arange")) == 1          # substring
    assert len(store.history("decode[*")) == 3                  # brackets are literal in globs
    assert store.history("decode[batch=16") != [] and store.history("nothing*") == []
    assert len(store.history(lambda cid: "batch=1," in cid)) == 1


# -- schema versions and foreign files ----------------------------------------

def _user_version(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn, conn:
        return conn.execute("PRAGMA user_version").fetchone()[0]


def test_new_file_is_wal_with_the_current_schema_version(tmp_path):
    path = tmp_path / "r.sqlite"
    Store(path).close()
    assert _user_version(path) == SCHEMA_VERSION
    with closing(sqlite3.connect(path)) as conn, conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_newer_schema_is_a_clear_error(tmp_path):
    path = tmp_path / "r.sqlite"
    Store(path).close()
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match=rf"{path}.*schema version {SCHEMA_VERSION + 1}.*newer harness"):
        Store(path)
    assert _user_version(path) == SCHEMA_VERSION + 1


def test_an_older_schema_is_migrated_on_open(tmp_path, monkeypatch):
    path = tmp_path / "r.sqlite"
    with Store(path) as s:
        rid = start(s)
        s.add_result(rid, result("a"))
    ran = []

    def to_next(conn):
        ran.append(True)
        conn.execute("ALTER TABLE results ADD COLUMN shard TEXT")

    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setattr(store_mod, "MIGRATIONS", {SCHEMA_VERSION: to_next})
    with Store(path) as s:
        assert [r.case_id for r in s.results(rid)] == ["a"]
    with Store(path):
        pass
    assert ran == [True] and _user_version(path) == SCHEMA_VERSION + 1
    with closing(sqlite3.connect(path)) as conn, conn:
        assert "shard" in [c[1] for c in conn.execute("PRAGMA table_info(results)")]


def test_another_sqlite_file_or_a_non_database_is_refused_untouched(tmp_path):
    other = tmp_path / "other.sqlite"
    with closing(sqlite3.connect(other)) as conn, conn:
        conn.execute("CREATE TABLE notes (x)")
    with pytest.raises(StoreError, match=r"other.sqlite: not a harness results store"):
        Store(other)
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all, but long enough to have a header " * 4)
    before = text.read_bytes()
    with pytest.raises(StoreError, match=r"notes.txt.*not an SQLite database"):
        Store(text)
    assert text.read_bytes() == before


# -- unusable paths: refused before anything is written ------------------------

def _writable(path: Path) -> bool:
    try:
        if path.is_dir():
            (path / "probe").touch()
            (path / "probe").unlink()
        else:
            with open(path, "r+b"):
                pass
    except OSError:
        return False
    return True


@contextmanager
def read_only(path: Path):
    """Make ``path`` (a file or a directory) read-only, even for root (immutable), or skip."""
    mode = path.stat().st_mode & 0o777
    path.chmod(0o555 if path.is_dir() else 0o444)
    immutable = False
    try:
        if _writable(path):  # root ignores modes
            immutable = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False).returncode == 0
            if not immutable:
                pytest.skip("cannot make a read-only path here (root without chattr)")
        yield path
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], capture_output=True, check=False)
        path.chmod(mode)


@pytest.fixture
def read_only_dir(tmp_path):
    (tmp_path / "ro").mkdir()
    with read_only(tmp_path / "ro") as d:
        yield d


def test_read_only_directory_is_refused_up_front(read_only_dir):
    with pytest.raises(StoreError, match=rf"store {read_only_dir}/r.sqlite: directory {read_only_dir} is not writable"):
        Store(read_only_dir / "r.sqlite")
    assert list(read_only_dir.iterdir()) == []


def test_existing_store_in_a_directory_made_read_only_is_refused(tmp_path):
    (tmp_path / "ro").mkdir()
    Store(tmp_path / "ro" / "r.sqlite").close()
    with read_only(tmp_path / "ro") as d, pytest.raises(StoreError, match=f"directory {d} is not writable"):
        Store(d / "r.sqlite")


def test_read_only_store_file_is_refused(tmp_path):
    path = tmp_path / "r.sqlite"
    Store(path).close()
    with read_only(path), pytest.raises(StoreError, match=rf"store {path}: file is not writable"):
        Store(path)


def test_a_read_only_file_that_access_misses_fails_the_write_probe(tmp_path, monkeypatch):
    path = tmp_path / "r.sqlite"
    Store(path).close()
    monkeypatch.setattr(store_mod.os, "access", lambda *a, **k: True)  # as on some network file systems
    with read_only(path), pytest.raises(StoreError, match=rf"store {path}: cannot open: .*readonly"):
        Store(path)


def test_missing_parent_directory_is_refused(tmp_path):
    path = tmp_path / "no" / "such" / "r.sqlite"
    with pytest.raises(StoreError, match=rf"store {path}: directory {path.parent} does not exist"):
        Store(path)
    assert not (tmp_path / "no").exists()


def test_the_stores_own_directory_is_created_when_its_parent_exists(tmp_path):
    path = tmp_path / "reports" / "results.sqlite"
    assert check_path(path) == path and path.parent.is_dir() and not path.exists()
    Store(path).close()
    assert path.exists()


def test_validating_without_creating(tmp_path, read_only_dir):
    path = tmp_path / "reports" / "results.sqlite"
    assert check_path(path, create=False) == path and not path.parent.exists()
    with pytest.raises(StoreError, match="cannot create directory"):
        check_path(read_only_dir / "reports" / "results.sqlite", create=False)
    with pytest.raises(StoreError, match="does not exist"):
        check_path(tmp_path / "a" / "b" / "r.sqlite", create=False)


def test_finish_run_can_complete_the_provenance(store):
    rid = start(store)
    store.finish_run(rid, {"total": 0})
    assert store.run(rid)["provenance"] == {"run": {"harness_git": None}}
    store.finish_run(rid, {"total": 0}, provenance={"devices": {"npu:0": {"cann": "8.0"}}})
    assert store.run(rid)["provenance"] == {"devices": {"npu:0": {"cann": "8.0"}}}


def test_a_directory_is_not_a_store(tmp_path):
    with pytest.raises(StoreError, match="is a directory"):
        Store(tmp_path)


def test_an_unusable_path_is_the_users_to_fix_a_failed_write_is_not(tmp_path, store):
    with pytest.raises(StoreOpenError) as opened:
        Store(tmp_path)
    assert isinstance(opened.value, UsageError)
    with pytest.raises(StoreError) as written:
        store.update_extra("no-such-run", {"x": 1})
    assert not isinstance(written.value, UsageError)


def test_default_path_is_under_reports():
    assert DEFAULT_STORE == Path("reports/results.sqlite")


# -- unreadable rows are skipped, never a crash --------------------------------

def test_garbled_rows_are_skipped_with_a_warning(tmp_path):
    path = tmp_path / "r.sqlite"
    with Store(path) as s:
        rid = start(s, cases=[{"case_id": "a"}, {"case_id": "b"}])
        other = start(s)
        for case_id in ("a", "b", "c", "d"):
            s.add_result(rid, result(case_id))
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE results SET data = '{garbage' WHERE case_id = 'b'")
        conn.execute("UPDATE results SET data = json_set(data, '$.outcome', 'FROM_THE_FUTURE') WHERE case_id = 'c'")
        conn.execute("UPDATE results SET data = '[1, 2]' WHERE case_id = 'd'")
        conn.execute("UPDATE planned SET wire = 'nope{' WHERE case_id = 'b'")
        conn.execute("UPDATE runs SET provenance = 'nope{' WHERE run_id = ?", (other,))
    with Store(path) as s, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [r.case_id for r in s.results(rid)] == ["a"]
        assert [p["case_id"] for p in s.planned_cases(rid)] == ["a"]
        assert [r["run_id"] for r in s.runs()] == [rid]
        assert s.run(other) is None
        assert sum(h["total"] for h in s.history("*")) == 4  # history reads only indexed columns
    assert len(caught) == 6 and all(issubclass(w.category, StoreWarning) for w in caught)
    assert "result row" in str(caught[0].message)


# -- concurrency ----------------------------------------------------------------

def test_threads_share_one_store(store):
    rid = start(store)

    def write(t):
        for i in range(25):
            store.add_result(rid, result(f"t{t}-{i}"))

    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len({r.case_id for r in store.results(rid)}) == 100


def _write_from_another_process(path: str, run_id: str, name: str, n: int, go) -> None:
    go.wait(30)
    with Store(path) as s:
        s.start_run(command=[name], devices=["cpu"], run_id=run_id, kind="pytest")
        for i in range(n):
            s.add_result(run_id, Result(case_id=f"{name}-{i}", outcome=Outcome.PASS,
                                        metrics={"x": float("nan")}))


def test_two_processes_write_one_fresh_file_at_once(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    path, rid = str(tmp_path / "shared.sqlite"), new_run_id()
    go = ctx.Event()
    procs = [ctx.Process(target=_write_from_another_process, args=(path, rid, f"gw{i}", 50, go)) for i in range(2)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0]
    with Store(path) as s:
        got = {r.case_id for r in s.results(rid)}
        assert len(s.runs()) == 1
    assert got == {f"gw{w}-{i}" for w in range(2) for i in range(50)}
    with closing(sqlite3.connect(path)) as conn, conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_strict_json_on_disk(tmp_path):
    path = tmp_path / "r.sqlite"
    with Store(path) as s:
        rid = start(s, provenance={"x": float("nan")})
        s.add_result(rid, result("a", metrics={"m": float("inf")}))
    with closing(sqlite3.connect(path)) as conn, conn:
        data = conn.execute("SELECT data FROM results").fetchone()[0]
        prov = conn.execute("SELECT provenance FROM runs").fetchone()[0]
    assert json.loads(data)["metrics"] == {"m": "Infinity"} and json.loads(prov) == {"x": None}
    assert "NaN" not in data and not math.isnan(json.loads(data)["duration_s"])


def test_repeats_plan_one_wire_form_and_resume_still_gets_it():
    class FakeCase:
        def __init__(self, case_id, seed):
            self.case_id, self.seed = case_id, seed

        def to_wire(self):
            return {"id": self.case_id, "seed": self.seed}

    from harness.store import MemoryStore, planned_entries
    a, b = FakeCase("a", 1), FakeCase("b", 2)
    entries = planned_entries([(a, 0), (b, 0), (a, 1), (b, 1), (a, 2)])
    assert [e["case"] is not None for e in entries] == [True, True, False, False, False]
    store = MemoryStore()
    run = store.start_run(command=["x"], devices=["cpu"], cases=entries)
    missing = store.missing(run)
    assert [(e["case_id"], e["repeat"]) for e in missing] == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2)]
    assert all(e["case"] == {"id": e["case_id"], "seed": e["seed"]} for e in missing)
