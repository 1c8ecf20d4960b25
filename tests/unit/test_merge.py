"""``harness report --merge``: shard outputs (JSON reports and results stores, real files)
merged into one report document; refusals, ``force`` and the warnings."""
from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from harness import __version__
from harness.shard.merge import MergeError, load_durations, merge, source_kind, split_source
from harness.outcomes import Outcome, Result
from harness.document import build_document
from harness.reports.json_report import write_document
from harness.document.summary import summarize
from harness.shard.split import Shard, select_shard, shard_info, shard_plan
from harness.store import Store

CASES = [f"m[batch={i % 3},seed={i}]" for i in range(10)]
T0 = 1_796_000_000.0


def result(case_id: str, outcome: Outcome = Outcome.PASS, **kw) -> Result:
    kw.setdefault("matrix", case_id.split("[")[0])
    kw.setdefault("device", "npu:0")
    kw.setdefault("duration_s", 1.5)
    return Result(case_id=case_id, outcome=outcome, op="rope_kv_write", kernel="reference", seed=1, **kw)


def outcome_of(case_id: str) -> Result:
    """A fixed mix: one mismatch, one coded device fault, one skip, the rest pass."""
    if case_id == CASES[3]:
        return result(case_id, Outcome.MISMATCH, summary="out: 3 / 64 bad", report="Mismatched elements: 3 / 64",
                      metrics={"compare.out": {"bad_count": 3, "max_rel_error": float("inf")}})
    if case_id == CASES[5]:
        return result(case_id, Outcome.DEVICE_FAULT, code=507018, sticky=True, log="/tmp/logs/x.log")
    if case_id == CASES[8]:
        return result(case_id, Outcome.SKIPPED, duration_s=0.0)
    return result(case_id, params={"batch": 4, "seed": 1}, metrics={"golden_cache_hit": True})


def shard_results(index: int, total: int, case_ids=CASES) -> tuple[list[Result], dict]:
    shard = Shard(index, total)
    mine = select_shard(case_ids, shard)
    info = shard_info(shard, case_ids, matrices=sorted({c.split("[")[0] for c in case_ids}))
    return [outcome_of(c) for c in mine], info


def write_shard(path: Path, index: int, total: int = 4, *, case_ids=CASES, info: dict | None = None,
                results: list[Result] | None = None, **edits) -> Path:
    """A shard's ``--json`` file as ``harness run --shard`` writes it; ``edits`` replace top-level keys."""
    own, own_info = shard_results(index, total, case_ids)
    devices = [f"npu:{i}" for i in range(8)]
    doc = build_document(own if results is None else results, started=T0 + index, devices=devices,
                         command=["harness", "run", "cases", "--shard", f"{index}/{total}"],
                         provenance={"run": {"host": f"npu-host-{index}"},
                                     "devices": {d: {"device_name": "Ascend910B"} for d in devices}},
                         run_id=f"run-{index}", shard=own_info if info is None else info)
    write_document(path, doc)
    if edits:
        edit(path, **edits)
    return path


def edit(path: Path, **changes) -> None:
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))


def store_shard(store: Store, index: int, total: int = 4, *, results: list[Result] | None = None,
                extra: dict | None = None, **kw) -> str:
    own, info = shard_results(index, total)
    run_id = store.start_run(command=["harness", "run", "--shard", f"{index}/{total}"], devices=["npu:0"],
                             provenance={"run": {"host": "h"}}, extra={"shard": info} if extra is None else extra,
                             cases=[{"case_id": r.case_id} for r in own], **kw)
    for r in own if results is None else results:
        store.add_result(run_id, r)
    store.finish_run(run_id, summarize(own))
    return run_id


def all_shards(tmp_path: Path, total: int = 4) -> list[Path]:
    return [write_shard(tmp_path / f"shard-{i}.json", i, total) for i in range(1, total + 1)]


# -- merging ------------------------------------------------------------------------

def test_merge_of_every_shard_is_the_whole_run(tmp_path):
    paths = all_shards(tmp_path)
    doc = merge(list(reversed(paths)), command=["harness", "report", "--merge"])
    expected = [outcome_of(c) for c in CASES]
    assert sorted(r["case_id"] for r in doc["results"]) == sorted(CASES)
    assert doc["summary"] == summarize(expected)
    assert doc["summary"]["total"] == 10 and doc["summary"]["failed"] == 2 and doc["summary"]["skipped"] == 1
    assert doc["summary"]["counts"]["FAIL_507018"] == 1
    assert doc["kind"] == "merge"
    assert doc["warnings"] == [] and doc["missing_shards"] == []
    assert doc["schema"] == 1 and doc["harness_version"] == __version__
    assert doc["command"] == ["harness", "report", "--merge"]
    assert doc["devices"] == [f"npu:{i}" for i in range(8)]
    assert doc["provenance"]["run"] == {"host": "npu-host-1"}
    assert doc["provenance"]["devices"]["npu:7"] == {"device_name": "Ascend910B"}
    docs = [json.loads(p.read_text()) for p in paths]
    assert doc["started"] == min(d["started"] for d in docs) == T0 + 1
    assert doc["finished"] == max(d["finished"] for d in docs)
    # One entry per shard, in shard order whatever the argument order; results follow it.
    shards = doc["shards"]
    assert [s["shard"]["index"] for s in shards] == [1, 2, 3, 4]
    assert [s["source"] for s in shards] == [str(p) for p in paths]
    assert [s["run_id"] for s in shards] == ["run-1", "run-2", "run-3", "run-4"]
    assert [s["cases"] for s in shards] == [3, 3, 2, 2] == [s["shard"]["cases"] for s in shards]
    assert all(s["harness_version"] == __version__ and s["host"] for s in shards)
    assert shards[0]["provenance"]["run"] == {"host": "npu-host-1"}
    assert sum(s["summary"]["total"] for s in shards) == 10
    assert [r["case_id"] for r in doc["results"]] == [c for s in shards for c in select_shard(
        CASES, Shard(s["shard"]["index"], 4))]
    # Results keep every field, as written (strict JSON forms included).
    by_id = {r["case_id"]: r for r in doc["results"]}
    written = {r["case_id"]: r for d in docs for r in d["results"]}
    assert by_id == written
    assert by_id[CASES[3]] == json.loads(json.dumps(by_id[CASES[3]]))
    assert by_id[CASES[3]]["metrics"]["compare.out"]["max_rel_error"] == "Infinity"
    assert by_id[CASES[5]]["label"] == "FAIL_507018" and by_id[CASES[5]]["sticky"] is True


def test_merged_document_is_strict_json_and_merges_again(tmp_path):
    doc = merge(all_shards(tmp_path))
    out = tmp_path / "merged.json"
    write_document(out, doc)
    text = out.read_text()
    assert "NaN" not in text and json.loads(text)["summary"] == doc["summary"]
    again = merge([out])
    assert again["results"] == doc["results"] and again["summary"] == doc["summary"]


def test_result_fields_unknown_to_this_harness_are_kept(tmp_path):
    path = write_shard(tmp_path / "a.json", 1, 1)
    doc = json.loads(path.read_text())
    doc["results"][0]["from_a_newer_harness"] = {"x": 1}
    path.write_text(json.dumps(doc))
    merged = merge([path])
    assert merged["results"][0]["from_a_newer_harness"] == {"x": 1}


def test_merge_of_stores_takes_their_sharded_runs(tmp_path):
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    with Store(a) as s:
        run1 = store_shard(s, 1)
        run2 = store_shard(s, 2)
        store_shard(s, 1, extra={}, results=[result("other[x=1]")])     # not sharded: left out
    with Store(b) as s:
        run3 = store_shard(s, 3)
    doc = merge([a, b, write_shard(tmp_path / "shard-4.json", 4)])
    assert [s["source"] for s in doc["shards"]] == [f"{a}::{run1}", f"{a}::{run2}", f"{b}::{run3}",
                                                    str(tmp_path / "shard-4.json")]
    assert [s["run_id"] for s in doc["shards"]][:3] == [run1, run2, run3]
    assert all(s["path"] == str(a) for s in doc["shards"][:2])
    assert sorted(r["case_id"] for r in doc["results"]) == sorted(CASES)
    assert doc["summary"] == summarize([outcome_of(c) for c in CASES])
    assert doc["warnings"] == []
    # Results from a store keep their fields too.
    by_id = {r["case_id"]: r for r in doc["results"]}
    assert by_id[CASES[5]]["code"] == 507018 and by_id[CASES[5]]["log"] == "/tmp/logs/x.log"
    assert by_id[CASES[3]]["metrics"]["compare.out"]["max_rel_error"] == "Infinity"


def test_store_run_picked_by_id_sharded_or_not(tmp_path):
    path = tmp_path / "r.sqlite"
    with Store(path) as s:
        store_shard(s, 1)
        plain = store_shard(s, 2, extra={"options": {}})
    doc = merge([f"{path}::{plain}"])
    assert [s["run_id"] for s in doc["shards"]] == [plain]
    assert doc["shards"][0]["shard"] is None
    assert sorted(r["case_id"] for r in doc["results"]) == sorted(select_shard(CASES, Shard(2, 4)))
    with pytest.raises(MergeError, match=rf"^{path}::nope: no run nope in the store$"):
        merge([f"{path}::nope"])


def test_a_resumed_shard_run_is_read_with_the_run_it_resumed(tmp_path):
    path = tmp_path / "r.sqlite"
    own, info = shard_results(1, 1)
    with Store(path) as s:
        first = store_shard(s, 1, 1, results=own[:4])
        resumed = s.start_run(command=["harness", "run", "--resume", first], devices=["npu:0"],
                              resumed_from=first, extra={"shard": info})
        for r in own[4:]:
            s.add_result(resumed, r)
        s.finish_run(resumed, summarize(own[4:]))
    doc = merge([path])
    assert [s["run_id"] for s in doc["shards"]] == [first]
    assert sorted(r["case_id"] for r in doc["results"]) == sorted(CASES)
    assert doc["warnings"] == []


# -- warnings: missing and partial shards ------------------------------------------------

def test_missing_shards_are_a_warning_not_an_error(tmp_path):
    paths = all_shards(tmp_path)
    doc = merge([paths[0], paths[2]])
    assert doc["missing_shards"] == ["2/4", "4/4"]
    assert doc["warnings"] == ["shards 2/4 and 4/4 missing: the merged report covers 2 of 4 shards"]
    assert doc["summary"]["total"] == 3 + 2
    doc = merge(paths[:3])
    assert doc["warnings"] == ["shard 4/4 missing: the merged report covers 3 of 4 shards"]


def test_an_interrupted_shard_is_a_warning(tmp_path):
    own, _ = shard_results(2, 2)
    path = write_shard(tmp_path / "shard-2.json", 2, 2, results=own[:2])
    doc = merge([write_shard(tmp_path / "shard-1.json", 1, 2), path])
    assert doc["warnings"] == [f"{path} (shard 2/2): 2 of 5 cases have a result (an interrupted run?)"]
    assert doc["missing_shards"] == []


# -- refusals and force -------------------------------------------------------------------

def refused(sources, *needles):
    with pytest.raises(MergeError) as err:
        merge(sources)
    message = str(err.value)
    assert "\n" not in message
    for needle in needles:
        assert str(needle) in message, message
    return message


def test_different_matrices_are_refused_unless_forced(tmp_path):
    a = write_shard(tmp_path / "a.json", 1, 2)
    other = [c.replace("m[", "n[") for c in CASES]
    b = write_shard(tmp_path / "b.json", 2, 2, case_ids=other)
    message = refused([a, b], a, b, "different matrices (m and n)", "--force")
    assert message.startswith(f"cannot merge {a} and {b}: ")
    doc = merge([a, b], force=True)
    assert any("different matrices (m and n)" in w and "--force" in w for w in doc["warnings"])
    assert any("different case lists" in w for w in doc["warnings"])
    assert "cannot tell which shards are missing: the sources were split differently" in doc["warnings"]
    assert doc["summary"]["total"] == 10


def test_unsharded_reports_of_different_matrices_are_refused(tmp_path):
    a = tmp_path / "a.json"
    b = tmp_path / "b.json"
    write_document(a, build_document([result("m[x=1]")], started=T0, devices=["cpu"], command=["harness"]))
    write_document(b, build_document([result("n[x=1]")], started=T0, devices=["cpu"], command=["harness"]))
    refused([a, b], a, b, "different matrices (m and n)")
    assert merge([a, b], force=True)["summary"]["total"] == 2


def test_different_harness_versions_are_refused_unless_forced(tmp_path):
    a = write_shard(tmp_path / "a.json", 1, 2)
    b = write_shard(tmp_path / "b.json", 2, 2, harness_version="0.0.1")
    refused([a, b], a, b, f"different harness versions ({__version__} and 0.0.1)")
    doc = merge([a, b], force=True)
    expected = f"{a} and {b}: different harness versions ({__version__} and 0.0.1) (merged with --force)"
    assert doc["warnings"] == [expected]
    assert doc["harness_version"] == __version__
    assert [s["harness_version"] for s in doc["shards"]] == [__version__, "0.0.1"]


def test_a_store_from_another_harness_version_is_refused(tmp_path, monkeypatch):
    a = write_shard(tmp_path / "shard-1.json", 1, 2)
    path = tmp_path / "r.sqlite"
    monkeypatch.setattr("harness.store.__version__", "9.9.9")
    with Store(path) as s:
        run_id = store_shard(s, 2, 2)
    refused([a, path], a, f"{path}::{run_id}", "different harness versions")


def test_shards_of_different_splits_are_refused(tmp_path):
    a = write_shard(tmp_path / "a.json", 1, 2)
    b = write_shard(tmp_path / "b.json", 2, 3)
    refused([a, b], "different shard counts (shards 1/2 and 2/3)")
    c = write_shard(tmp_path / "c.json", 2, 2, case_ids=CASES[:-1])
    refused([a, c], "different case lists (fingerprints")
    timed = dict(shard_results(2, 2)[1], balanced_by="durations", durations_fingerprint="ab" * 32)
    d = write_shard(tmp_path / "d.json", 2, 2, info=timed)
    refused([a, d], "split with different durations (count, None and durations, abababababab)")
    e = write_shard(tmp_path / "e.json", 1, 2, results=[])
    refused([a, e], "both are shard 1/2")


def test_a_case_in_two_sources_is_refused_or_the_later_one_kept(tmp_path):
    a = write_shard(tmp_path / "a.json", 1, 1, finished=T0 + 100)
    fixed = [result(CASES[3]), result("m[batch=9,seed=99]")]
    b = tmp_path / "b.json"
    write_document(b, build_document(fixed, started=T0 + 5, devices=["npu:0"], command=["harness"]))
    edit(b, finished=T0 + 200)
    refused([b, a], a, b, f"1 result(s) in both (first: {CASES[3]} repeat 0)", "--force")
    doc = merge([b, a], force=True)
    kept = [r for r in doc["results"] if r["case_id"] == CASES[3]]
    assert len(kept) == 1 and kept[0]["outcome"] == "PASS"            # b finished later
    assert doc["summary"]["total"] == 11
    expected = f"{a} and {b}: 1 result(s) in both (first: {CASES[3]} repeat 0): kept those of {b}, which finished later"
    assert doc["warnings"] == [expected]
    edit(b, finished=T0 + 50)
    doc = merge([b, a], force=True)
    assert [r["outcome"] for r in doc["results"] if r["case_id"] == CASES[3]] == ["MISMATCH"]


def test_repeats_of_a_case_are_not_duplicates(tmp_path):
    a = tmp_path / "a.json"
    write_document(a, build_document([result("m[x=1]", repeat=0), result("m[x=1]", repeat=1)], started=T0,
                                     devices=["cpu"], command=["harness"]))
    b = tmp_path / "b.json"
    write_document(b, build_document([result("m[x=1]", repeat=2)], started=T0, devices=["cpu"], command=["harness"]))
    assert merge([a, b])["summary"]["total"] == 3


def test_stale_shard_runs_in_a_store_are_refused_with_a_hint(tmp_path):
    path = tmp_path / "r.sqlite"
    with Store(path) as s:
        old = store_shard(s, 1, 1)
        new = store_shard(s, 1, 1)
    message = refused([path], f"{path}::{old}", f"{path}::{new}", "both are shard 1/1")
    assert "--force" in message
    assert merge([f"{path}::{new}"])["summary"]["total"] == 10


# -- sources that are not sources ------------------------------------------------------------

def test_not_a_report_nor_a_store(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    empty = tmp_path / "empty.json"
    empty.write_text("")
    binary = tmp_path / "blob.json"
    binary.write_bytes(b"\x00\x01garbage")
    for path in (text, empty, binary):
        for force in (False, True):
            with pytest.raises(MergeError, match=rf"^{path}: neither a harness JSON report nor a results store$"):
                merge([path], force=force)
    broken = tmp_path / "broken.json"
    broken.write_text('{"results": [')
    refused([broken], f"{broken}: not a harness JSON report: invalid JSON at line 1")
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}')
    refused([other], f"{other}: not a harness JSON report (no \"results\" list)")
    junk = tmp_path / "junk.json"
    junk.write_text('{"results": [{"case_id": "x"}]}')
    refused([junk], f"{junk}: results[0] is not a result")
    newer = write_shard(tmp_path / "newer.json", 1, 1, schema=99)
    refused([newer], "report schema 99 was written by a newer harness")


def test_an_sqlite_file_that_is_not_a_store_is_refused_untouched(tmp_path):
    path = tmp_path / "other.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE foo (x)")
        conn.commit()
    assert source_kind(path) == "store"                           # by content, not by extension
    refused([path], f"{path}: an SQLite database but not a harness results store")
    with closing(sqlite3.connect(path)) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["foo"]


def test_detection_is_by_content_not_extension(tmp_path):
    json_named_db = write_shard(tmp_path / "shard.db", 1, 1)
    assert source_kind(json_named_db) == "json"
    store_named_json = tmp_path / "store.json"
    with Store(store_named_json) as s:
        store_shard(s, 1, 1)
    assert source_kind(store_named_json) == "store"
    assert merge([json_named_db])["summary"] == merge([store_named_json])["summary"]


def test_a_store_without_sharded_runs_is_refused_with_a_hint(tmp_path):
    path = tmp_path / "r.sqlite"
    with Store(path) as s:
        store_shard(s, 1, extra={})
    refused([path], f"{path}: no sharded run in the store", f"{path}::RUN_ID")


def test_run_id_syntax_is_for_stores_only(tmp_path):
    path = write_shard(tmp_path / "a.json", 1, 1)
    refused([f"{path}::abc"], "::RUN_ID picks a run of a results store")
    assert split_source(f"{path}::abc") == (path, "abc")
    odd = tmp_path / "odd::name.json"
    odd.write_text(path.read_text())
    assert split_source(odd) == (odd, None)                          # an existing path is taken whole


def test_unreadable_sources(tmp_path):
    missing = tmp_path / "nope.json"
    for force in (False, True):
        with pytest.raises(MergeError, match=rf"^{missing}: cannot read: No such file or directory$"):
            merge([missing], force=force)
    with pytest.raises(MergeError, match=rf"^{tmp_path}: cannot read: Is a directory$"):
        merge([tmp_path])
    with pytest.raises(MergeError, match="^nothing to merge"):
        merge([])


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads a mode-000 file")
def test_a_file_without_read_permission(tmp_path):
    path = write_shard(tmp_path / "a.json", 1, 1)
    path.chmod(0)
    try:
        refused([path], f"{path}: cannot read: Permission denied")
    finally:
        path.chmod(0o644)


# -- durations for the next split ---------------------------------------------------------------

def test_load_durations_from_a_report_and_from_a_store(tmp_path):
    results = [result("m[x=1]", duration_s=2.0), result("m[x=1]", duration_s=4.0, repeat=1),
               result("m[x=2]", duration_s=1.0, device="npu:3"), result("m[x=3]", Outcome.SKIPPED, duration_s=0.0),
               result("m[x=4]")]
    path = tmp_path / "a.json"
    write_document(path, build_document(results, started=T0, devices=["npu:0"], command=["harness"]))
    doc = json.loads(path.read_text())
    doc["results"][4]["duration_s"] = None                            # a NaN, as strict JSON writes it
    path.write_text(json.dumps(doc))
    assert load_durations(path) == {"m[x=1]": 3.0, "m[x=2]": 1.0}
    assert load_durations(path, device="npu:3") == {"m[x=2]": 1.0}
    store = tmp_path / "r.sqlite"
    with Store(store) as s:
        store_shard(s, 1, 1, results=results[:4])
    assert load_durations(store) == {"m[x=1]": 3.0, "m[x=2]": 1.0}
    assert load_durations(store, device="npu") == {"m[x=1]": 3.0, "m[x=2]": 1.0}


def test_outcomes_this_harness_does_not_know_are_counted_not_judged(tmp_path):
    path = write_shard(tmp_path / "a.json", 1, 1)
    doc = json.loads(path.read_text())
    doc["results"][0].update(outcome="FROM_THE_FUTURE", label="FROM_THE_FUTURE")
    path.write_text(json.dumps(doc))
    merged = merge([path])
    assert merged["summary"]["total"] == 10
    assert merged["summary"]["passed"] + merged["summary"]["failed"] + merged["summary"]["skipped"] == 9
    assert merged["summary"]["outcomes"]["FROM_THE_FUTURE"] == 1
    expected = ("1 result(s) with an outcome this harness does not know (FROM_THE_FUTURE): "
                "counted, neither passed nor failed")
    assert merged["warnings"] == [expected]


# -- plans: overlaps and gaps ---------------------------------------------------------

def planned_shards(tmp_path: Path, total: int = 3, plans: dict[int, list[str]] | None = None) -> list[Path]:
    """Every shard of a split with its plan recorded (``shard_plan``), as ``harness run --shard`` writes
    it; ``plans`` replaces the ``planned`` list of some shards."""
    paths = []
    for i in range(1, total + 1):
        own, info = shard_results(i, total)
        info = {**info, **shard_plan(Shard(i, total), CASES)}
        if plans and i in plans:
            info["planned"] = plans[i]
        paths.append(write_shard(tmp_path / f"planned-{i}.json", i, total, info=info, results=own))
    return paths


def test_recorded_plans_that_cover_the_split_once_merge(tmp_path):
    doc = merge(planned_shards(tmp_path))
    assert sorted(r["case_id"] for r in doc["results"]) == sorted(CASES) and doc["warnings"] == []


def test_a_case_two_shards_planned_is_refused_in_one_line(tmp_path):
    first = select_shard(CASES, Shard(1, 3))[0]
    paths = planned_shards(tmp_path, plans={2: sorted(select_shard(CASES, Shard(2, 3)) + [first])})
    with pytest.raises(MergeError) as err:
        merge(paths)
    message = str(err.value)
    assert "\n" not in message and str(paths[0]) in message and str(paths[1]) in message
    assert f"case {first} is planned by both shards 1/3 and 2/3" in message and "--force" in message
    doc = merge(paths, force=True)
    assert any(f"case {first} is planned by both" in w and "--force" in w for w in doc["warnings"])


def test_a_case_no_shard_planned_is_refused_in_one_line(tmp_path):
    third = select_shard(CASES, Shard(3, 3))
    paths = planned_shards(tmp_path, plans={3: third[1:]})
    with pytest.raises(MergeError) as err:
        merge(paths)
    message = str(err.value)
    assert "\n" not in message and str(paths[0]) in message and str(paths[2]) in message
    assert f"case {third[0]} of the split is planned by none of shards 1/3, 2/3 and 3/3" in message
    assert "--force" in message
    assert any("planned by none" in w for w in merge(paths, force=True)["warnings"])


def test_a_gap_needs_every_shard_and_plans(tmp_path):
    # Shard 3 not given: its plan is unknown, so that is a missing shard (a warning), not a gap.
    paths = planned_shards(tmp_path)
    doc = merge(paths[:2])
    assert doc["missing_shards"] == ["3/3"]
    # Shards recorded without plans (an older harness): nothing to check beyond the results.
    assert merge(all_shards(tmp_path, 3))["warnings"] == []
