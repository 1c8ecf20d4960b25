"""Command cases through the CLI: a generated serving repository's repro script and pytest suite
run with `run`, `flake`, `compare` and `bisect`, and mixed with a kernel case in one run."""
from __future__ import annotations

import json
import os
import random
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from helpers import ROOT, results_by_id, run_harness, write_case_file
from serving_repo import COUNTER_ENV, case_files, make_kernel_library, make_serving_checkout, make_serving_repo

FAIL_P = 0.6


def _fails(n: int) -> bool:
    """The serving repository's draw for call number ``n`` (tests/serving_repo.py, seed 0)."""
    return random.Random(f"0:{n}").random() < FAIL_P


@pytest.fixture
def serving(tmp_path):
    repo = make_serving_repo(tmp_path / "serving", commits=6, culprit=3, fail_p=FAIL_P)
    cases = case_files(tmp_path / "cases")
    env = {COUNTER_ENV: str(tmp_path / "calls")}
    common = ["--repo", str(repo.path), "--worktree-cache", str(tmp_path / "wt"), "--no-progress"]
    return repo, cases, env, common


def test_compare_upstream_and_fix_gives_the_table_per_test_per_ref(tmp_path, serving):
    repo, cases, env, common = serving
    md = tmp_path / "cmp.md"
    proc = run_harness("compare", str(cases), *common, "--ref", "upstream=main", "--ref", "fix=fix", "--repeat", "5",
                       "--store", str(tmp_path / "s.sqlite"), "--markdown", str(md), "--json", str(tmp_path / "c.json"),
                       cwd=tmp_path, env=env, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr      # the candidate (fix) passed everything
    # upstream runs first, iteration by iteration: repro draws call 2i, the suite's test_decode call 2i+1;
    # the fix never draws
    repro_fails = sum(_fails(2 * i) for i in range(5))
    decode_fails = sum(_fails(2 * i + 1) for i in range(5))
    table = md.read_text().replace("\\", "")           # Markdown escapes dropped
    row = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")}
    assert f"| {5 - repro_fails}/5 PASS, {repro_fails}/5 FAIL_507018" in row["repro"]
    decode = row["serving-suite::tests/test_serving.py::test_decode"]
    assert f"| {5 - decode_fails}/5 PASS, {decode_fails}/5 FAIL_507018" in decode and "| 5/5 PASS |" in decode
    assert row["serving-suite::tests/test_serving.py::test_prefill"].count("5/5 PASS") == 2
    results = json.loads((tmp_path / "c.json").read_text())["results"]
    suite = [r for r in results if r["case_id"] == "serving-suite" and r["ref"] == "upstream"
             and r["outcome"] != "PASS"]
    assert suite and all(r["label"] == "FAIL_507018" for r in suite)
    cmd = suite[0]["metrics"]["command"]
    assert cmd["cwd"].startswith(str(tmp_path / "wt")) and cmd["tests"] == 2 and "--junitxml=" in cmd["command"]
    assert "error code is 507018" in suite[0]["report"]


def test_flake_gives_rates_per_test(tmp_path, serving):
    repo, cases, env, common = serving
    out = tmp_path / "f.json"
    proc = run_harness("flake", str(cases), "-k", "serving", *common, "--ref", "up=main", "--repeat", "4",
                       "--no-store", "--json", str(out), cwd=tmp_path, env=env, timeout=240)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    fails = sum(_fails(i) for i in range(4))
    flake = json.loads(out.read_text())["flake"]
    assert flake["serving-suite::tests/test_serving.py::test_decode"]["failures"] == fails
    assert flake["serving-suite::tests/test_serving.py::test_prefill"]["failures"] == 0
    assert flake["serving-suite::tests/test_serving.py::test_decode"]["total"] == 4
    assert "serving-suite::tests/test_serving.py::test_decode: 4 runs" in proc.stdout


def test_bisect_names_the_commit_where_the_repro_starts_failing(tmp_path, serving):
    repo, cases, env, common = serving
    store = tmp_path / "b.sqlite"
    proc = run_harness("bisect", str(cases), "-k", "repro", *common, "--good", repo.shas[0], "--bad", "main",
                       "--store", str(store), cwd=tmp_path, env=env, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"first bad commit: {repo.culprit}" in proc.stdout
    assert "signature DEVICE_FAULT:507018" in proc.stdout
    printed = proc.stdout.split("it printed:", 1)[1].split("  commit ", 1)[0]    # what the repro said, in the conclusion
    assert "error code is 507018" in printed, proc.stdout
    # the stored bisect, rendered again: its culprit and what the command printed
    bisect_id = proc.stdout.split("\nbisect ")[-1].split(" stored in ", 1)[0]
    report = run_harness("report", bisect_id, "--store", str(store), cwd=tmp_path, timeout=60)
    shown = report.stdout.replace("\\", "")
    assert f"**First bad commit**: `{repo.culprit[:12]}`" in shown and "error code is 507018" in shown, report.stdout


def test_a_mixed_run_of_a_kernel_case_and_command_cases(tmp_path, golden_cache_dir):
    folder = tmp_path / "cases"
    write_case_file(folder, "kernel.yaml", "name: k\nop: rope_kv_write\n")
    write_case_file(folder, "cmds.yaml", """\
        name: cmd
        command: ["{python}", "-c", "import os, sys; print(os.environ['WHICH'], sys.argv[1:]); sys.exit({code})", "{device}"]
        env: {WHICH: "case {code}"}
        matrix: {code: [0, 3]}
        """)
    write_case_file(folder, "missing.yaml", "name: missing\ncommand: no-such-program-xyz --flag\n")
    write_case_file(folder, "hang.yaml", "name: hang\ncommand: sleep 60\ntimeout_s: 1\n")
    out = tmp_path / "r.json"
    proc = run_harness("run", str(folder), "--device", "cpu", "--no-store", "--json", str(out), "--html",
                       str(tmp_path / "r.html"), "--golden-cache", str(golden_cache_dir), "--no-progress",
                       cwd=tmp_path, timeout=240)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    got = results_by_id(out)
    assert {k: v["label"] for k, v in got.items()} == {
        "k": "PASS", "cmd[code=0]": "PASS", "cmd[code=3]": "FAILED", "missing": "BUILD_ERROR", "hang": "HANG"}
    assert "no-such-program-xyz" in got["missing"]["summary"]
    assert "case 3 ['cpu']" in got["cmd[code=3]"]["report"]
    assert "WHICH" not in got["cmd[code=3]"]["metrics"]["command"]["env"]     # not an allow-listed variable
    html = (tmp_path / "r.html").read_text()
    assert "case 3 [&#x27;cpu&#x27;]" in html or "case 3 ['cpu']" in html


def test_commands_run_in_parallel_one_per_device(tmp_path):
    folder = tmp_path / "cases"
    write_case_file(folder, "par.yaml", """\
        name: par
        command: "date +%s.%N > {out}/../../{seed}.start; sleep 1; date +%s.%N > {out}/../../{seed}.end"
        matrix: {seed: [1, 2]}
        """)
    proc = run_harness("run", str(folder), "--devices", "cpu,cpu", "--no-store", "--log-dir", str(tmp_path / "logs"),
                       "--no-progress", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    commands = tmp_path / "logs" / "commands"
    start = {s: float((commands / f"{s}.start").read_text()) for s in (1, 2)}
    end = {s: float((commands / f"{s}.end").read_text()) for s in (1, 2)}
    assert start[2] < end[1] and start[1] < end[2]       # the two ran at the same time


def test_list_and_bad_files_exit_2_with_one_line(tmp_path):
    folder = tmp_path / "cases"
    write_case_file(folder, "ok.yaml", "name: ok\ncommand: echo {seed}\nmatrix: {seed: [0, 1]}\n")
    proc = run_harness("list", str(folder), cwd=tmp_path, timeout=60)
    assert proc.returncode == 0 and proc.stdout.splitlines()[0].startswith("ok[seed=0]\tcommand\techo {seed}")
    bad = write_case_file(tmp_path / "bad", "bad.yaml", "name: b\ncommand: echo {seeed}\n")
    proc = run_harness("run", str(bad), "--no-store", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(f"harness: error: {bad}:2:10: command: unknown placeholder")


JUNIT = """<testsuites><testsuite name="pytest">
<testcase classname="t" name="test_ok"/>
<testcase classname="t" name="test_fault"><failure message="error code is 507018">x</failure></testcase>
</testsuite></testsuites>
"""


def test_the_pytest_plugin_runs_a_command_case_and_stores_its_tests(tmp_path):
    (tmp_path / "junit-src.xml").write_text(JUNIT)
    write_case_file(tmp_path / "cases", "suite.yaml", 'name: suite\ncommand: "cp ../junit-src.xml {junit}"\n')
    store = tmp_path / "s.sqlite"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "cases",
                           "--device", "cpu", "--store", str(store), "-q"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"} | {"PYTEST_ADDOPTS": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr       # the command passed; its JUnit was read
    assert "1 passed" in proc.stdout
    with sqlite3.connect(store) as conn:
        rows = conn.execute("SELECT case_id, label FROM results ORDER BY rowid").fetchall()
    assert rows == [("suite", "PASS"), ("suite::t::test_ok", "PASS"), ("suite::t::test_fault", "FAIL_507018")]


def _with_marker(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if marker.encode() in fh.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def test_an_interrupted_run_leaves_no_command_running(tmp_path):
    marker = f"marker-{os.getpid()}-{tmp_path.name}"
    write_case_file(tmp_path / "cases", "long.yaml", f'name: long\ncommand: ["sh", "-c", "sleep 60", "{marker}"]\n')
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "cases", "--no-store", "--no-progress"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not _with_marker(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _with_marker(marker), "the command never started"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "interrupted" in out
    assert _with_marker(marker) == []


def test_shards_of_command_cases_merge_into_one_report(tmp_path):
    write_case_file(tmp_path / "cases", "s.yaml", 'name: s\ncommand: "exit {code}"\nmatrix: {code: [0, 1, 3, 2]}\n')
    for k in (1, 2):
        proc = run_harness("run", "cases", "--shard", f"{k}/2", "--json", f"shard-{k}.json", "--no-store",
                           "--no-progress", cwd=tmp_path, timeout=120)
        assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    proc = run_harness("report", "--merge", "shard-1.json", "shard-2.json", "--json", "all.json", cwd=tmp_path,
                       timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    labels = sorted(r["label"] for r in json.loads((tmp_path / "all.json").read_text())["results"])
    assert labels == ["FAILED", "FAILED", "FAILED", "PASS"]


def _recipe() -> tuple[dict[str, str], str]:
    """docs/commands.md, "The seed's table with one command": its case files (named by their first
    line) and its command, as a user copies them."""
    text = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    section = text.split("## The seed's table with one command", 1)[1].split("\n## ", 1)[0]
    files = {m.group(1): m.group(0).split("\n", 1)[1] for m in
             re.finditer(r"(?<=```yaml\n)# cases/serving/(\S+\.yaml)\n.*?(?=```)", section, re.S)}
    command = re.search(r"```bash\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")
    return files, command


def _replaced(text: str, *pairs: tuple[str, str]) -> str:
    for old, new in pairs:
        assert old in text, f"docs/commands.md no longer says {old!r}: update this test with it"
        text = text.replace(old, new)
    return text


def test_the_pr_table_recipe_of_the_docs_switches_the_kernel_library_under_a_fixed_serving_checkout(tmp_path):
    """The docs' recipe as written (paths, refs, device and repeats replaced, nothing else): the
    serving checkout stays, the kernel library switches from upstream to the fix."""
    library = make_kernel_library(tmp_path / "pypto", commits=4, culprit=1, fail_p=FAIL_P)
    serving = make_serving_checkout(tmp_path / "serving")
    files, command = _recipe()
    assert set(files) == {"repro.yaml", "suites.yaml"}
    for name, text in files.items():
        write_case_file(tmp_path / "cases" / "serving", name, _replaced(text, ("/src/serving", str(serving))))
    command = _replaced(command, ("~/src/pypto", str(library.path)), ("origin/main", "main"),
                        ("fork/fix-507018", "fix"), ("--devices npu:0-7", "--device cpu"), ("--repeat 5", "--repeat 3"))
    argv = shlex.split(command)
    assert argv[0] == "harness"
    env = {COUNTER_ENV: str(tmp_path / "calls"), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = run_harness(*argv[1:], "--worktree-cache", str(tmp_path / "wt"), "--store", str(tmp_path / "s.sqlite"),
                       "--no-progress", cwd=tmp_path, env=env, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr        # the fix passes everything
    # upstream first, iteration-major: repro draws call 2i, the suite's test_decode call 2i+1
    repro_fails = sum(_fails(2 * i) for i in range(3))
    decode_fails = sum(_fails(2 * i + 1) for i in range(3))
    table = (tmp_path / "pr-comment.md").read_text().replace("\\", "")
    row = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")}
    assert f"| {3 - repro_fails}/3 PASS, {repro_fails}/3 FAIL_507018" in row["repro"] and "| 3/3 PASS |" in row["repro"]
    decode = row["serving::tests/test_serving.py::test_decode"]
    assert f"| {3 - decode_fails}/3 PASS, {decode_fails}/3 FAIL_507018" in decode and "| 3/3 PASS |" in decode
    assert row["serving::tests/test_serving.py::test_prefill"].count("3/3 PASS") == 2
    # the library came from each ref's worktree, the serving code from the fixed checkout
    report = run_harness("report", "--store", str(tmp_path / "s.sqlite"), "--json", "r.json", cwd=tmp_path)
    assert report.returncode in (0, 1), report.stdout + report.stderr
    results = json.loads((tmp_path / "r.json").read_text())["results"]
    suite = [r["metrics"]["command"] for r in results if r["case_id"] == "serving"]
    assert all(c["cwd"] == str(serving) and c["env"]["PYTHONPATH"].startswith(str(tmp_path / "wt")) for c in suite)
