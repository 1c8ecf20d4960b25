"""`harness run --shard`, `harness report --merge` and `harness report RUN_ID`, end to end."""
from __future__ import annotations

import json

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


def _shards(tmp_path, golden_cache_dir, name: str, total: int) -> list:
    cases = write_case_file(tmp_path / "cases", f"{name}.yaml", CASES.format(name=name))
    outs = []
    for i in range(1, total + 1):
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
    a = _shards(tmp_path, golden_cache_dir, "a", 2)
    b = _shards(tmp_path, golden_cache_dir, "b", 2)
    refused = run_harness("report", "--merge", str(a[0]), str(b[1]), "--json", str(tmp_path / "x.json"), cwd=tmp_path)
    assert refused.returncode == 2 and "matri" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.json").exists()
    forced = run_harness("report", "--merge", str(a[0]), str(b[1]), "--force", "--json", str(tmp_path / "x.json"),
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
