"""`harness flake`, `harness flake --compare` and `harness history` end to end, in subprocesses."""
from __future__ import annotations

import json
import shutil

import pytest

from harness import stats
from helpers import run_harness, write_case_file
from harness.kernels.mutants import racy_head

CASE = """\
name: {name}
op: rope_kv_write
kernel: {kernel}
matrix:
  batch: [4]
  seq_lens: ["const(1)"]
  slot_mode: [arange]
"""


def _cases(tmp_path, name: str, kernel: str):
    return write_case_file(tmp_path / "cases", f"{name}.yaml", CASE.format(name=name, kernel=kernel))


def _flake(tmp_path, golden_cache_dir, *args, env=None):
    return run_harness("flake", *args, "--golden-cache", str(golden_cache_dir), "--store",
                       str(tmp_path / "results.sqlite"), "--log-dir", str(tmp_path / "logs"), cwd=tmp_path, env=env)


@pytest.fixture(scope="module")
def reference_hunt(tmp_path_factory):
    """Six runs of the reference kernel (case "ref") with --target-rate 0.05 and --json ref.json:
    (its directory, the process). Its output is read, and its ref.json (a hunt sharing no case with
    "racy"); nothing opens its store."""
    base = tmp_path_factory.mktemp("reference-hunt")
    cases = _cases(base, "ref", "reference")
    proc = _flake(base, tmp_path_factory.mktemp("golden-cache"), str(cases), "--repeat", "6", "--target-rate", "0.05",
                  "--json", str(base / "ref.json"))
    return base, proc


@pytest.fixture(scope="module")
def fix_hunts(tmp_path_factory):
    """Two stored hunts of one case, "racy": before a fix (racy_head, p = 0.8; --json a.json) and
    after it (the reference kernel; --json b.json): (their directory, before, after). A test that
    opens the store copies the directory first (opening a store writes to it)."""
    base = tmp_path_factory.mktemp("fix-hunts")
    racy, ref = _cases(base, "racy", "racy_head"), base / "cases" / "fixed.yaml"
    # "after the fix": the same case id, the reference kernel
    ref.write_text(racy.read_text().replace("racy_head", "reference"))
    goldens = tmp_path_factory.mktemp("golden-cache")
    before = _flake(base, goldens, str(racy), "--repeat", "12", "--json", str(base / "a.json"),
                    env={"RACY_HEAD_P": "0.8", "RACY_HEAD_SEED": "cmp"})
    after = _flake(base, goldens, str(ref), "--repeat", "12", "--json", str(base / "b.json"))
    return base, before, after


def test_known_failure_rate_is_counted_exactly_and_the_interval_covers_it(tmp_path, golden_cache_dir):
    """racy_head with a seeded stream: we know which launches tear a head, so the counts are exact."""
    cases = _cases(tmp_path, "racy", "racy_head")
    out = tmp_path / "hunt.json"
    n, p = 40, 0.3
    proc = _flake(tmp_path, golden_cache_dir, str(cases), "--repeat", str(n), "--json", str(out),
                  env={"RACY_HEAD_P": str(p), "RACY_HEAD_SEED": "e2e"})
    expected = racy_head.failures("e2e", n, p)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["kind"] == "flake" and len(doc["results"]) == n
    assert sorted(r["repeat"] for r in doc["results"]) == list(range(n))
    failed = [r["repeat"] for r in doc["results"] if r["outcome"] == "MISMATCH"]
    assert failed == expected
    s = doc["flake"]["racy"]
    assert s["failures"] == len(expected) and s["total"] == n
    assert s["clopper_pearson"] == pytest.approx(list(stats.clopper_pearson(len(expected), n)))
    assert s["clopper_pearson"][0] <= p <= s["clopper_pearson"][1]
    assert s["wilson"][0] <= p <= s["wilson"][1]
    assert s["first_failure"]["repeat"] == expected[0] and s["first_failure"]["seed"] == 0
    # fixed seeds: the torn iterations are also bitwise different from iteration 0 (which was clean)
    assert expected[0] > 0
    assert s["determinism"]["identical"] is False and s["determinism"]["differing"] == expected
    assert doc["summary"]["golden_cache"]["computed"] == 1            # one golden for the whole hunt
    assert f"iter {expected[0]}: MISMATCH" in proc.stdout
    assert "iter 0: PASS" in proc.stdout
    assert f"failure rate {100 * len(expected) / n:.1f}% ({len(expected)}/{n})" in proc.stdout


def test_a_torn_first_iteration_is_not_the_baseline(tmp_path, golden_cache_dir):
    seed = next(f"t{i}" for i in range(1000) if racy_head.failures(f"t{i}", 1, 0.3) == [0])
    expected = racy_head.failures(seed, 12, 0.3)
    cases = _cases(tmp_path, "racy", "racy_head")
    out = tmp_path / "hunt.json"
    proc = _flake(tmp_path, golden_cache_dir, str(cases), "--repeat", "12", "--json", str(out),
                  env={"RACY_HEAD_P": "0.3", "RACY_HEAD_SEED": seed})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    det = json.loads(out.read_text())["flake"]["racy"]["determinism"]
    first_clean = next(i for i in range(12) if i not in expected)
    assert det["baseline_repeat"] == first_clean
    assert det["differing"] == [i for i in expected if i > first_clean]     # only the torn ones differ
    assert det["identical"] is False


def test_fixed_seed_hunt_flags_bits_that_vary_within_tolerance(tmp_path, golden_cache_dir):
    cases = _cases(tmp_path, "jitter", "reduction_order")
    out = tmp_path / "hunt.json"
    proc = _flake(tmp_path, golden_cache_dir, str(cases), "--repeat", "4", "--json", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    s = json.loads(out.read_text())["flake"]["jitter"]
    assert s["failures"] == 0 and s["clean"] == 4
    assert s["determinism"]["identical"] is False and s["determinism"]["differing"] == [1, 2, 3]
    assert ("NONDETERMINISTIC: 4 iterations gave 4 distinct bit patterns (the most common: 1 of 4); "
            "3 of 3 differ bitwise from iteration 0, the first that passed (query)") in proc.stdout
    assert "differ bitwise from iteration 0; first at index" in proc.stdout   # localised report
    allowed = _flake(tmp_path, golden_cache_dir, str(cases), "--repeat", "3", "--allow-nondeterministic")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr


def test_deterministic_kernel_passes_with_a_zero_failure_bound(reference_hunt):
    _, proc = reference_hunt
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "6 clean, 0 near-tie, 0 hard failures" in proc.stdout
    assert "0 failures in 6 runs: failure rate <= 39.3% at 95%; 53 more clean runs would bound it at 5.0%" in proc.stdout
    assert "bitwise identical: all 6 iterations gave the same bits in every output and cache" in proc.stdout


def test_fresh_seeds_are_recorded_and_replay_alone(tmp_path, golden_cache_dir):
    cases = _cases(tmp_path, "ref", "reference")
    out = tmp_path / "hunt.json"
    proc = _flake(tmp_path, golden_cache_dir, str(cases), "--repeat", "3", "--seeds", "fresh", "--hunt-seed", "9",
                  "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    seeds = [r["seed"] for r in doc["results"]]
    assert len(set(seeds)) == 3 and doc["summary"]["golden_cache"]["computed"] == 3
    assert all("determinism" not in r["metrics"] for r in doc["results"])
    replay = tmp_path / "replay.json"
    again = run_harness("run", str(cases), "--seed", str(seeds[2]), "--json", str(replay), "--no-store",
                        "--golden-cache", str(golden_cache_dir), cwd=tmp_path)
    assert again.returncode == 0
    (r,) = json.loads(replay.read_text())["results"]
    assert r["seed"] == seeds[2] and r["metrics"]["golden_cache_hit"] is True    # the same inputs as iteration 2


def test_until_fail_stops_the_case_at_its_first_failure(tmp_path, golden_cache_dir):
    cases = _cases(tmp_path, "racy", "racy_head")
    out = tmp_path / "hunt.json"
    proc = _flake(tmp_path, golden_cache_dir, str(cases), "--until-fail", "--repeat", "50", "--json", str(out),
                  env={"RACY_HEAD_P": "0.3", "RACY_HEAD_SEED": "stop"})
    first = racy_head.failures("stop", 50, 0.3)[0]
    assert proc.returncode == 1
    results = json.loads(out.read_text())["results"]
    assert len(results) == first + 1 and results[-1]["outcome"] == "MISMATCH"
    assert f"stopped after 1 failure(s); {50 - first - 1} iterations not run" in proc.stdout


def test_max_minutes_stops_starting_iterations(tmp_path, golden_cache_dir):
    cases = _cases(tmp_path, "ref", "reference")
    out = tmp_path / "hunt.json"
    proc = _flake(tmp_path, golden_cache_dir, str(cases), "--repeat", "3000", "--max-minutes", "0.01",
                  "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    n = len(json.loads(out.read_text())["results"])
    assert 1 <= n < 3000
    assert f"--max-minutes 0.01 reached: {3000 - n} iterations not started" in proc.stdout


def test_compare_two_stored_hunts_with_fisher(tmp_path, fix_hunts):
    base, before, after = fix_hunts
    shutil.copytree(base, tmp_path, dirs_exist_ok=True)       # its own store and a.json, b.json
    assert before.returncode == 1 and after.returncode == 0
    run_a = json.loads((tmp_path / "a.json").read_text())["run_id"]
    run_b = json.loads((tmp_path / "b.json").read_text())["run_id"]
    cmp = run_harness("flake", "--compare", run_a, run_b, "--store", str(tmp_path / "results.sqlite"),
                      "--markdown", str(tmp_path / "cmp.md"), cwd=tmp_path)
    assert cmp.returncode == 0, cmp.stdout + cmp.stderr
    k = len(racy_head.failures("cmp", 12, 0.8))
    p = stats.fisher_exact(k, 12, 0, 12)
    assert f"racy: {k}/12 failed" in cmp.stdout and f"Fisher exact p = {p:.3g}: fixed" in cmp.stdout
    md = (tmp_path / "cmp.md").read_text()
    assert f"| racy | {k}/12 failed" in md and f"| {p:.3g} | fixed |" in md      # --markdown is written
    html = run_harness("flake", "--compare", run_a, run_b, "--store", str(tmp_path / "results.sqlite"),
                       "--html", str(tmp_path / "cmp.html"), cwd=tmp_path)
    assert html.returncode == 2 and html.stderr.strip().endswith("--html: flake --compare writes --json and --markdown only")
    reverse = run_harness("flake", "--compare", str(tmp_path / "b.json"), str(tmp_path / "a.json"), cwd=tmp_path)
    assert reverse.returncode == 1 and "regressed" in reverse.stdout

    history = run_harness("history", "racy", "--store", str(tmp_path / "results.sqlite"), cwd=tmp_path)
    assert history.returncode == 0
    rows = [line for line in history.stdout.splitlines() if line.endswith(" racy")]
    assert len(rows) == 2
    assert f"{100 * k / 12:.1f}%" in rows[0] and "0.0%" in rows[1] and "flake" in rows[0]


@pytest.mark.parametrize("args, needle", [
    (["--repeat", "0"], "--repeat must be at least 1"),
    (["--repeat", "-2"], "--repeat must be at least 1"),
    (["--repeat", "many"], "--repeat takes a whole number"),
    (["--repeat", "3", "-k", "nothing_like_this"], "no cases matching -k 'nothing_like_this'"),
    (["--repeat", "3", "--confidence", "1.5"], "--confidence must be in (0, 1)"),
    (["--repeat", "3", "--seeds", "fresh", "--seed", "4"], "--seed fixes the inputs"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, golden_cache_dir, args, needle):
    cases = _cases(tmp_path, "ref", "reference")
    proc = _flake(tmp_path, golden_cache_dir, str(cases), *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stderr
    assert not (tmp_path / "logs").exists()        # refused before anything ran


def test_compare_of_runs_that_share_no_case_exits_2(tmp_path, fix_hunts, reference_hunt):
    # two passing hunts that share no case: "ref" (ref.json) and the fixed "racy" (b.json)
    base, _, after = fix_hunts
    ref_base, ref = reference_hunt
    shutil.copytree(base, tmp_path, dirs_exist_ok=True)       # its own store and b.json
    assert ref.returncode == 0 and after.returncode == 0
    proc = run_harness("flake", "--compare", str(ref_base / "ref.json"), str(tmp_path / "b.json"), cwd=tmp_path)
    assert proc.returncode == 2 and "share no case" in proc.stderr
    missing = run_harness("flake", "--compare", "no-such-run", str(tmp_path / "b.json"),
                          "--store", str(tmp_path / "results.sqlite"), cwd=tmp_path)
    assert missing.returncode == 2 and "no-such-run: no such run" in missing.stderr
    nothing = run_harness("history", "zzz", "--store", str(tmp_path / "results.sqlite"), cwd=tmp_path)
    assert nothing.returncode == 2 and "no stored results" in nothing.stderr
