"""`harness run --shard`, `harness report --merge` and `harness report RUN_ID`, end to end."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import run_harness, write_case_file

CASES = """\
name: {name}
op: rope_kv_write
seq_lens: multi_block
matrix:
  kernel: [reference, skip_rope]
  slot_mode: [arange, random, "padded(0.5)"]
"""


def _shards(tmp_path, golden_cache_dir, name: str, total: int, only: tuple[int, ...] = ()) -> list:
    """Run shards 1..total of the matrix (or just those in ``only``); their JSON paths, in order."""
    cases = write_case_file(tmp_path / "cases", f"{name}.yaml", CASES.format(name=name))
    outs = []
    for i in only or range(1, total + 1):
        out = tmp_path / f"{name}-shard-{i}.json"
        proc = run_harness("run", str(cases), "--shard", f"{i}/{total}", "--json", str(out), "--no-progress",
                           "--golden-cache", str(golden_cache_dir), "--store", str(tmp_path / f"{name}-{i}.sqlite"),
                           "--log-dir", str(tmp_path / "logs" / f"{name}{i}"), cwd=tmp_path)
        assert proc.returncode in (0, 1), proc.stdout + proc.stderr
        assert f"shard {i}/{total}:" in proc.stdout
        outs.append(out)
    return outs


def test_shards_cover_every_case_once_and_merge_into_one_report(tmp_path, golden_cache_dir):
    outs = _shards(tmp_path, golden_cache_dir, "m", 4)
    ids = [r["case_id"] for out in outs for r in json.loads(out.read_text())["results"]]
    assert len(ids) == 6 and len(set(ids)) == 6
    assert [json.loads(out.read_text())["shard"]["index"] for out in outs] == [1, 2, 3, 4]
    merged = tmp_path / "merged.json"
    proc = run_harness("report", "--merge", *map(str, outs), "--json", str(merged), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr          # skip_rope cases fail
    doc = json.loads(merged.read_text())
    assert doc["kind"] == "merge" and doc["summary"]["total"] == 6 and doc["summary"]["failed"] == 3
    assert sorted(r["case_id"] for r in doc["results"]) == sorted(ids)
    assert len(doc["shards"]) == 4 and not doc.get("missing_shards")

    partial = run_harness("report", "--merge", str(outs[0]), str(outs[2]), "--json", str(merged), cwd=tmp_path)
    assert "2/4 and 4/4 missing" in partial.stderr

    doubled = run_harness("report", "--merge", str(outs[0]), str(outs[0]), cwd=tmp_path)
    assert doubled.returncode == 2 and "--force" in doubled.stderr


def test_merging_shards_of_different_matrices_needs_force(tmp_path, golden_cache_dir):
    # shard 1/2 of one matrix and 2/2 of another: the other halves are never read
    [a1] = _shards(tmp_path, golden_cache_dir, "a", 2, only=(1,))
    [b2] = _shards(tmp_path, golden_cache_dir, "b", 2, only=(2,))
    refused = run_harness("report", "--merge", str(a1), str(b2), "--json", str(tmp_path / "x.json"), cwd=tmp_path)
    assert refused.returncode == 2 and "matri" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.json").exists()
    forced = run_harness("report", "--merge", str(a1), str(b2), "--force", "--json", str(tmp_path / "x.json"),
                         cwd=tmp_path)
    assert forced.returncode in (0, 1) and "warning" in forced.stderr
    assert json.loads((tmp_path / "x.json").read_text())["warnings"]


@pytest.mark.parametrize("shard", ["0/4", "3/2", "a/b", "1/0", "2"])
def test_bad_shards_exit_2(tmp_path, shard):
    cases = write_case_file(tmp_path / "cases", "m.yaml", CASES.format(name="m"))
    proc = run_harness("run", str(cases), "--shard", shard, "--no-store", "--log-dir", str(tmp_path / "logs"),
                       cwd=tmp_path)
    assert proc.returncode == 2 and "--shard" in proc.stderr
    assert not (tmp_path / "logs").exists()


def test_report_re_renders_a_stored_flake_hunt(tmp_path, golden_cache_dir):
    cases = write_case_file(tmp_path / "cases", "m.yaml", CASES.format(name="m"))
    store = str(tmp_path / "r.sqlite")
    hunt = tmp_path / "hunt.json"
    proc = run_harness("flake", str(cases), "-k", "reference and arange", "--repeat", "3", "--json", str(hunt),
                       "--golden-cache", str(golden_cache_dir), "--store", store, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = json.loads(hunt.read_text())["run_id"]
    again = tmp_path / "again.json"
    rendered = run_harness("report", run_id, "--store", store, "--json", str(again), cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    doc, original = json.loads(again.read_text()), json.loads(hunt.read_text())
    assert doc["kind"] == "flake" and doc["run_id"] == run_id
    assert [r["repeat"] for r in doc["results"]] == [0, 1, 2]
    case_id = "m[kernel=reference,slot_mode=arange]"
    for key in ("total", "failures", "clopper_pearson"):
        assert doc["flake"][case_id][key] == original["flake"][case_id][key]
    missing = run_harness("report", "no-such-run", "--store", store, cwd=tmp_path)
    assert missing.returncode == 2 and "no run no-such-run" in missing.stderr


# -- the story: shards run one after another on one host, beside one store ---------------

FORTY = """\
name: forty
op: rope_kv_write
seq_lens: "const(1)"
batch: 1
matrix:
  slot_mode: [arange, random]
  seed: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
"""


def _one_host(tmp_path, golden_cache_dir, *more: str) -> list:
    """Shards 1/3, 2/3, 3/3 of a 40-case matrix, one after another in one directory, all with the
    default store ``reports/results.sqlite``: before, each balanced by what the earlier ones stored."""
    cases = write_case_file(tmp_path / "cases", "forty.yaml", FORTY)
    outs = []
    for i in range(1, 4):
        out = tmp_path / f"shard-{i}.json"
        proc = run_harness("run", str(cases), "--shard", f"{i}/3", "--json", str(out), "--no-progress",
                           "--golden-cache", str(golden_cache_dir), "--log-dir", str(tmp_path / "logs" / str(i)),
                           *more, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        outs.append(out)
    return outs


def _every_case_once(outs: list) -> list[str]:
    ids = [r["case_id"] for out in outs for r in json.loads(out.read_text())["results"]]
    assert len(ids) == 40 and len(set(ids)) == 40
    return ids


@pytest.fixture(scope="module")
def one_host(tmp_path_factory) -> tuple:
    """The three shards run once for the tests that only read them (each CLI run costs seconds):
    their directory (the default store under it) and their JSON files, which no test changes."""
    where = tmp_path_factory.mktemp("one-host")
    return where, _one_host(where, tmp_path_factory.mktemp("one-host-goldens"))


def test_shards_one_after_another_beside_one_store_run_every_case_once(tmp_path, one_host):
    where, outs = one_host
    ids = _every_case_once(outs)
    assert {json.loads(out.read_text())["shard"]["balanced_by"] for out in outs} == {"count"}
    for sources in ([str(o) for o in outs], ["reports/results.sqlite"]):
        merged = tmp_path / "merged.json"
        proc = run_harness("report", "--merge", *sources, "--json", str(merged), cwd=where)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        doc = json.loads(merged.read_text())
        assert sorted(r["case_id"] for r in doc["results"]) == sorted(ids) and doc["warnings"] == []


def test_shards_with_one_durations_file_beside_one_store_run_every_case_once(tmp_path, golden_cache_dir):
    cases = write_case_file(tmp_path / "cases", "forty.yaml", FORTY)
    full = tmp_path / "durations.json"
    proc = run_harness("run", str(cases), "--json", str(full), "--no-progress", "--golden-cache",
                       str(golden_cache_dir), "--log-dir", str(tmp_path / "logs" / "full"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outs = _one_host(tmp_path, golden_cache_dir, "--shard-durations", str(full))
    _every_case_once(outs)
    assert {json.loads(out.read_text())["shard"]["balanced_by"] for out in outs} == {"durations"}
    proc = run_harness("report", "--merge", *map(str, outs), "--json", str(tmp_path / "m.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    own = run_harness("run", str(cases), "--shard", "1/3", "--shard-durations", "reports/results.sqlite",
                      "--no-progress", cwd=tmp_path)
    assert own.returncode == 2 and len(own.stderr.strip().splitlines()) == 1
    assert "--shard-durations reports/results.sqlite" in own.stderr


def _planned(path, planned: list[str]) -> None:
    doc = json.loads(path.read_text())
    doc["shard"]["planned"] = planned
    path.write_text(json.dumps(doc))


def test_merging_overlapping_or_gapped_plans_exits_2_in_one_line(tmp_path, one_host):
    outs = [Path(shutil.copy(out, tmp_path)) for out in one_host[1]]     # copies: their plans are edited below
    plans = [json.loads(out.read_text())["shard"]["planned"] for out in outs]

    _planned(outs[1], plans[1] + [plans[0][0]])                     # overlap: shard 2 also planned one of 1's
    proc = run_harness("report", "--merge", *map(str, outs), "--json", str(tmp_path / "x.json"), cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"case {plans[0][0]} is planned by both shards 1/3 and 2/3" in proc.stderr
    assert not (tmp_path / "x.json").exists()

    _planned(outs[1], plans[1])
    _planned(outs[2], plans[2][1:])                                  # gap: nobody planned shard 3's first
    proc = run_harness("report", "--merge", *map(str, outs), "--json", str(tmp_path / "x.json"), cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"case {plans[2][0]} of the split is planned by none of shards 1/3, 2/3 and 3/3" in proc.stderr
    forced = run_harness("report", "--merge", *map(str, outs), "--force", "--json", str(tmp_path / "x.json"),
                         cwd=tmp_path)
    assert forced.returncode == 0 and "planned by none" in forced.stderr
