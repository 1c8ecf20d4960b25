"""Deterministic sharding: ``--shard`` parsing, the split by count and by durations,
provenance fingerprints, and the structure of the example CI workflow."""
from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.shard.split import (
    Shard,
    ShardError,
    assign,
    balanced_by,
    case_set_fingerprint,
    durations_fingerprint,
    parse_shard,
    select_shard,
    shard_info,
    shard_plan,
    weights,
)

ROOT = Path(__file__).resolve().parents[2]


def ids(n: int) -> list[str]:
    return [f"m[batch={i % 7},seed={i}]" for i in range(n)]


# -- parse_shard ---------------------------------------------------------------

@pytest.mark.parametrize("text, index, total", [("1/4", 1, 4), ("4/4", 4, 4), ("1/1", 1, 1), ("12/40", 12, 40)])
def test_parse_shard_accepts_one_based_i_of_n(text, index, total):
    shard = parse_shard(text)
    assert (shard.index, shard.total) == (index, total)
    assert str(shard) == f"{index}/{total}"


@pytest.mark.parametrize("text, reason", [
    ("0/4", "between 1 and 4"),
    ("5/4", "between 1 and 4"),
    ("3/2", "between 1 and 2"),
    ("1/0", "at least 1"),
    ("0/0", "at least 1"),
    ("a/b", "expected I/N"),
    ("-1/4", "expected I/N"),
    ("+1/4", "expected I/N"),
    ("1/4/2", "expected I/N"),
    ("1/", "expected I/N"),
    ("/4", "expected I/N"),
    ("14", "expected I/N"),
    ("", "expected I/N"),
    (" 1/4", "expected I/N"),
    ("1/4 ", "expected I/N"),
    ("1 /4", "expected I/N"),
    ("1/4\n", "expected I/N"),
    ("1.0/4", "expected I/N"),
    ("\u0661/4", "expected I/N"),         # an Arabic-Indic digit: int() would take it
])
def test_parse_shard_rejects_with_one_line_naming_the_value(text, reason):
    with pytest.raises(ShardError) as err:
        parse_shard(text)
    message = str(err.value)
    assert message.startswith(f"--shard {text!r}: ")
    assert reason in message
    assert "\n" not in message


def test_parse_shard_names_where_the_value_came_from():
    with pytest.raises(ShardError, match=r"^\$HARNESS_SHARD '2/1': "):
        parse_shard("2/1", where="$HARNESS_SHARD")


def test_shard_object_validates_itself():
    with pytest.raises(ShardError):
        Shard(0, 3)
    with pytest.raises(ShardError):
        Shard(1, 0)


# -- the split by count ------------------------------------------------------------

def test_assign_rejects_a_bad_shard_count():
    for bad in (0, -1, True, 1.0):
        with pytest.raises(ShardError):
            assign(["a"], bad)


@pytest.mark.parametrize("n_cases", [0, 1, 2, 3, 5, 7, 8, 16, 31, 100])
@pytest.mark.parametrize("n_shards", [1, 2, 3, 4, 7, 8, 13, 50, 120])
def test_count_split_loses_and_doubles_nothing_and_is_balanced_within_one(n_cases, n_shards):
    case_ids = ids(n_cases)
    shards = assign(case_ids, n_shards)
    assert len(shards) == n_shards
    flat = [c for s in shards for c in s]
    assert sorted(flat) == sorted(case_ids)                 # union == input, nothing doubled
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1
    if n_shards > n_cases:
        assert sizes.count(0) == n_shards - n_cases         # empty shards are allowed
    by_select = [select_shard(case_ids, Shard(i, n_shards)) for i in range(1, n_shards + 1)]
    assert [sorted(s) for s in by_select] == shards


def test_count_split_is_round_robin_over_the_sorted_ids():
    assert assign(["e", "a", "d", "b", "c"], 2) == [["a", "c", "e"], ["b", "d"]]
    assert balanced_by(["a", "b"], None) == "count"
    assert balanced_by(["a", "b"], {"other": 3.0}) == "count"   # nothing known about *these* cases


def test_split_ignores_input_order_and_duplicates():
    rng = random.Random(7)
    case_ids = ids(57)
    durations = {c: rng.uniform(0.1, 5.0) for c in case_ids[::3]}
    for d in (None, durations):
        expected = assign(case_ids, 5, d)
        for _ in range(20):
            shuffled = case_ids + rng.sample(case_ids, 10)
            rng.shuffle(shuffled)
            assert assign(shuffled, 5, d) == expected
            assert assign(shuffled, 5, dict(reversed(list((d or {}).items())))) == expected


def test_split_is_the_same_in_another_interpreter():
    """No ``hash()`` of str: a fresh process with another hash seed splits the same way."""
    code = ("import json, sys; from harness.shard.split import assign; "
            "ids = [f'm[batch={i % 7},seed={i}]' for i in range(40)]; "
            "d = {c: (i * 37 % 11) / 3 for i, c in enumerate(ids) if i % 4}; "
            "print(json.dumps([assign(ids, 3), assign(ids, 3, d)]))")
    outs = set()
    for seed in ("1", "2"):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False,
                              env={"PYTHONHASHSEED": seed, "PATH": ""}, timeout=60)
        assert proc.returncode == 0, proc.stderr
        outs.add(proc.stdout)
    assert len(outs) == 1
    case_ids = [f"m[batch={i % 7},seed={i}]" for i in range(40)]
    d = {c: (i * 37 % 11) / 3 for i, c in enumerate(case_ids) if i % 4}
    assert json.loads(outs.pop()) == [assign(case_ids, 3), assign(case_ids, 3, d)]


def test_select_shard_keeps_repeats_of_a_case_together_and_in_input_order():
    items = [("b", 0), ("a", 0), ("b", 1), ("c", 0), ("a", 1), ("b", 2)]
    parts = [select_shard(items, Shard(i, 2), key=lambda it: it[0]) for i in (1, 2)]
    assert parts == [[("a", 0), ("c", 0), ("a", 1)], [("b", 0), ("b", 1), ("b", 2)]]


# -- the split by durations ------------------------------------------------------------

def loads(shards, w):
    return [sum(w[c] for c in s) for s in shards]


def test_duration_split_concrete_lpt_examples():
    # The textbook LPT worst case on 2 machines: optimum 6 (3+3 | 2+2+2), LPT gives 7.
    d = {"a": 3.0, "b": 3.0, "c": 2.0, "d": 2.0, "e": 2.0}
    shards = assign(list(d), 2, d)
    assert shards == [["a", "c", "e"], ["b", "d"]]
    assert loads(shards, d) == [7.0, 5.0]
    # Ties go to the lowest shard index, ties in duration to the smaller id.
    d = {"v": 8.0, "w": 7.0, "x": 6.0, "y": 5.0, "z": 4.0}
    assert assign(list(d), 2, d) == [["v", "y", "z"], ["w", "x"]]
    # Where greedy is optimal: one long case alone, the short ones together.
    d = {"long": 9.0, "s1": 3.0, "s2": 3.0, "s3": 3.0}
    assert assign(list(d), 2, d) == [["long"], ["s1", "s2", "s3"]]
    assert balanced_by(d, d) == "durations"


def _optimum(values: list[float], m: int) -> float:
    best = float("inf")
    for choice in itertools.product(range(m), repeat=len(values)):
        load = [0.0] * m
        for v, k in zip(values, choice):
            load[k] += v
        best = min(best, max(load))
    return best


def test_duration_split_is_within_the_lpt_bounds():
    rng = random.Random(2024)
    for trial in range(60):
        n, m = rng.randint(1, 8), rng.randint(1, 3)
        case_ids = ids(n)
        d = {c: round(rng.uniform(0.1, 10.0), 3) for c in case_ids}
        shards = assign(case_ids, m, d)
        assert sorted(c for s in shards for c in s) == sorted(case_ids)
        worst = max(loads(shards, d))
        assert worst <= sum(d.values()) / m + max(d.values()) + 1e-9
        assert worst <= (4 / 3 - 1 / (3 * m)) * _optimum(list(d.values()), m) + 1e-9, (trial, d, shards)


@pytest.mark.parametrize("n_cases", [1, 5, 40, 203])
@pytest.mark.parametrize("n_shards", [1, 3, 8, 300])
def test_duration_split_loses_and_doubles_nothing(n_cases, n_shards):
    rng = random.Random(n_cases * 1000 + n_shards)
    case_ids = ids(n_cases)
    d = {c: rng.choice([0.0, 0.5, 1.0, 2.5, 60.0]) for c in case_ids if rng.random() < 0.7}
    shards = assign(case_ids, n_shards, d)
    assert len(shards) == n_shards
    assert sorted(c for s in shards for c in s) == sorted(case_ids)


def test_unknown_durations_count_as_the_median_of_the_known_ones():
    d = {"a": 1.0, "b": 2.0, "c": 10.0, "unrelated": 1000.0}
    w = weights(["a", "b", "c", "x", "y"], d)
    assert w == {"a": 1.0, "b": 2.0, "c": 10.0, "x": 2.0, "y": 2.0}
    assert weights(["x", "y"], None) == {"x": 1.0, "y": 1.0}
    # Unusable values are unknown: NaN, infinities, negatives, non-numbers.
    bad = {"a": float("nan"), "b": float("inf"), "c": -1.0, "d": "3", "e": True, "f": 4.0}
    assert weights(list("abcdef"), bad) == {k: 4.0 for k in "abcdef"}
    assert balanced_by(list("abcde"), bad) == "count"
    # Cases of equal weight (known or not) are spread evenly.
    case_ids = ids(12)
    d = {c: 1.0 for c in case_ids[:4]}
    sizes = [len(s) for s in assign(case_ids, 3, d)]
    assert sizes == [4, 4, 4]


# -- provenance ---------------------------------------------------------------------

def test_fingerprints_depend_on_the_set_only():
    a = case_set_fingerprint(["x", "y", "z"])
    assert a == case_set_fingerprint(["z", "x", "y", "x"])
    assert a != case_set_fingerprint(["x", "y"])
    assert a != case_set_fingerprint(["xy", "z"])            # no ambiguity from concatenation
    # Pinned: two hosts (and harness versions) must agree on it to split one list.
    assert a == "9e80b69248283ed05ec657f497f56d0fcc90cbe61d0691f40e689f93233936cd"
    assert durations_fingerprint(["x"], None) is None
    assert durations_fingerprint(["x"], {"x": 1.0}) == durations_fingerprint(["x", "x"], {"x": 1.0, "q": 2.0})
    assert durations_fingerprint(["x"], {"x": 1.0}) != durations_fingerprint(["x"], {"x": 1.5})


def test_shard_info_describes_the_shard_for_provenance():
    case_ids = ids(10)
    info = shard_info(Shard(2, 4), case_ids, matrices=["m", "m"])
    assert info == {"index": 2, "total": 4, "balanced_by": "count", "cases": 3, "total_cases": 10,
                    "fingerprint": case_set_fingerprint(case_ids), "durations_fingerprint": None,
                    "matrices": ["m"]}
    d = {case_ids[0]: 5.0}
    info = shard_info(Shard(1, 4), case_ids, d)
    assert info["balanced_by"] == "durations"
    assert info["cases"] == len(assign(case_ids, 4, d)[0])
    assert info["durations_fingerprint"] == durations_fingerprint(case_ids, d)
    assert info["matrices"] is None
    assert sum(shard_info(Shard(i, 4), case_ids, d)["cases"] for i in range(1, 5)) == 10


# -- the example CI workflow -----------------------------------------------------------

def test_example_workflow_has_a_shard_matrix_and_a_merge_job():
    doc = yaml.safe_load((ROOT / "ci/github/harness-npu.yml").read_text())
    assert doc.get("on", doc.get(True)) is not None           # YAML 1.1 reads a bare `on` as True
    jobs = doc["jobs"]
    assert set(jobs) == {"shard", "merge"}
    shard, merge = jobs["shard"], jobs["merge"]
    assert shard["runs-on"] == ["self-hosted", "npu", "ascend-8x"]
    assert shard["strategy"]["matrix"]["shard"] == [1, 2, 3, 4]
    assert shard["strategy"]["fail-fast"] is False
    assert merge["needs"] in ("shard", ["shard"])
    assert "always()" in merge["if"]

    def runs(job):
        return "\n".join(step.get("run", "") for step in job["steps"])

    def uses(job, action):
        return [s for s in job["steps"] if str(s.get("uses", "")).startswith(action)]

    assert 'ci/run-shard.sh "${{ matrix.shard }}/4"' in runs(shard)
    upload = uses(shard, "actions/upload-artifact@")
    assert len(upload) == 1 and "always()" in upload[0]["if"]
    assert "shard-${{ matrix.shard }}" in upload[0]["with"]["name"]
    assert uses(merge, "actions/download-artifact@")
    assert "harness report --merge" in runs(merge)
    for flag in ("--junit", "--markdown", "--html"):
        assert flag in runs(merge)
    assert uses(merge, "actions/upload-artifact@")
    comment = [s for s in merge["steps"] if "gh pr comment" in s.get("run", "")]
    assert len(comment) == 1 and "github.event_name == 'pull_request'" in comment[0]["if"]
    assert "--body-file" in comment[0]["run"]


def test_run_shard_script_is_strict_bash():
    script = ROOT / "ci/run-shard.sh"
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    for flag in ("--devices", "--shard", "--json", "--junit", "--markdown"):
        assert flag in text
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    # A bad shard is refused before any set-up (exit 2, one line naming it).
    proc = subprocess.run(["bash", str(script), "two/4"], capture_output=True, text=True, timeout=30,
                          cwd=ROOT, check=False)
    assert proc.returncode == 2
    assert "'two/4'" in proc.stderr and proc.stderr.count("\n") == 1


# -- the split never reads local state -----------------------------------------------------

SMALL_MATRIX = """\
name: m
op: rope_kv_write
seq_lens: "const(1)"
batch: 1
matrix:
  slot_mode: [arange, random]
  seed: [0, 1, 2, 3, 4, 5]
"""


def _cli_split(cases_file: Path, store: Path, total: int, *more: str) -> list[tuple[list[str], dict]]:
    from harness.cli.common import load_cases
    from harness.cli.parser import build_parser
    from harness.cli.runs import _shard
    out = []
    for i in range(1, total + 1):
        args = build_parser().parse_args(["run", str(cases_file), "--shard", f"{i}/{total}",
                                          "--store", str(store), *more])
        mine, info = _shard(args, load_cases(args, import_kernel=False))
        out.append(([c.case_id for c in mine], info))
    return out


def test_shard_plan_is_the_shards_ids_and_the_whole_list():
    case_ids = ids(10)
    d = {case_ids[0]: 5.0}
    for i in range(1, 5):
        plan = shard_plan(Shard(i, 4), reversed(case_ids), d)
        assert plan == {"planned": assign(case_ids, 4, d)[i - 1], "split_cases": sorted(case_ids)}


def test_the_cli_split_is_the_same_whatever_the_store_holds(tmp_path, monkeypatch, capsys):
    """The bug: ``run --shard`` balanced by the store's durations, which grow as shards run beside
    it, so consecutive shards split differently.  Same ids and N → same split, store or not."""
    from harness.outcomes import Outcome, Result
    from harness.store import Store
    monkeypatch.chdir(tmp_path)
    cases_file = tmp_path / "m.yaml"
    cases_file.write_text(SMALL_MATRIX)
    store = tmp_path / "reports" / "results.sqlite"          # the default store, named explicitly
    store.parent.mkdir()
    before = _cli_split(cases_file, store, 3)
    assert all(info["balanced_by"] == "count" for _, info in before)
    all_ids = sorted(c for mine, _ in before for c in mine)
    with Store(store) as s:
        run_id = s.start_run(command=["harness", "run"], devices=["cpu"])
        for n, case_id in enumerate(all_ids):
            s.add_result(run_id, Result(case_id=case_id, outcome=Outcome.PASS, op="rope_kv_write",
                                        kernel="reference", seed=0, duration_s=float(n * n)))
        assert s.durations()                              # the store has durations to tempt a split
    after = _cli_split(cases_file, store, 3)
    assert after == before
    assert [mine for mine, _ in after] == assign(all_ids, 3)
    assert all(info["planned"] == mine and info["split_cases"] == all_ids for mine, info in after)


def test_shard_durations_is_the_only_source_and_not_the_runs_own_store(tmp_path, monkeypatch):
    from harness.errors import UsageError
    monkeypatch.chdir(tmp_path)
    cases_file = tmp_path / "m.yaml"
    cases_file.write_text(SMALL_MATRIX)
    names = [mine for mine, _ in _cli_split(cases_file, tmp_path / "a.sqlite", 1)][0]
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({"results": [
        {"case_id": c, "outcome": "PASS", "duration_s": float(i % 5)} for i, c in enumerate(names)]}))
    split = _cli_split(cases_file, tmp_path / "a.sqlite", 3, "--shard-durations", str(durations))
    again = _cli_split(cases_file, tmp_path / "b.sqlite", 3, "--shard-durations", str(durations))
    assert split == again and all(info["balanced_by"] == "durations" for _, info in split)
    assert sorted(c for mine, _ in split for c in mine) == sorted(names)
    with pytest.raises(UsageError, match=r"^--shard-durations .*a\.sqlite: is the store this run records into"):
        _cli_split(cases_file, tmp_path / "a.sqlite", 3, "--shard-durations", str(tmp_path / "a.sqlite"))
