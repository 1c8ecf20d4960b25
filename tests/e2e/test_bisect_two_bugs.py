"""`harness bisect` on a generated kernel library with two flaky bugs of different classes:
a race (MISMATCH) entering at one commit and a second bug entering later.  Each signature
names its own culprit and reports the other failure as a finding; an interrupted bisect
(SIGTERM, Ctrl-C) prints the one line that resumes it; `history --kind bisect` groups it.
Positions come from a seeded generator: nothing here assumes where the culprits are.
"""
from __future__ import annotations

import json
import os
import random
import shlex
import signal
import sqlite3
import subprocess
import sys
import time

from gitrepo import SEED_ENV, make_kernel_repo
from helpers import finished_bisect_steps, run_harness

ENV_TEMPLATE = "PYTHONPATH={worktree}/python:{PYTHONPATH}"


def _story(tmp_path, second_kind: str, n_commits: int, seed: int, p: float):
    rng = random.Random(seed)
    race = rng.randrange(2, n_commits - 4)
    second = rng.randrange(race + 2, n_commits - 1)
    info = make_kernel_repo(tmp_path / "kpkg", n_commits=n_commits, culprit=race, fail_p=p, second=second,
                            second_kind=second_kind, second_p=p)
    return info


def _env(tmp_path, golden_cache_dir) -> dict[str, str]:
    # draws numbered across worker processes (reproducible); goldens outside the user's cache
    return {"KPKG_FLAKE_COUNTER": str(tmp_path / "calls"), SEED_ENV: "0",
            "HARNESS_GOLDEN_CACHE": str(golden_cache_dir)}


def _bisect_args(tmp_path, info, case, *extra: str) -> list[str]:
    return ["bisect", str(case), "--repo", str(info.path), "--good", info.shas[0], "--bad", "main",
            "--env", ENV_TEMPLATE, "--build", info.build_cmd, "--worktree-cache", str(tmp_path / "wt"),
            "--store", str(tmp_path / "r.sqlite"), "--log-dir", str(tmp_path / "logs"), *extra]


def test_each_signature_names_its_culprit_and_the_other_failure_is_a_finding(tmp_path, golden_cache_dir):
    info = _story(tmp_path, "nonfinite", 14, seed=3, p=0.4)
    case = tmp_path / "case.yaml"
    case.write_text(info.case_yaml)
    env = _env(tmp_path, golden_cache_dir)
    out = tmp_path / "later.json"
    later = run_harness(*_bisect_args(tmp_path, info, case, "--signature", "NONFINITE", "--json", str(out),
                                      "--markdown", str(tmp_path / "later.md")),
                        cwd=tmp_path, env=env, timeout=600)
    assert later.returncode == 0, later.stdout + later.stderr
    assert f"first bad commit: {info.second_sha}" in later.stdout
    assert "also seen: MISMATCH at " in later.stdout
    doc = json.loads(out.read_text())
    report = doc["bisect"]
    assert report["verdict"] == "FOUND" and report["culprit"]["index"] == info.second
    assert not any(t["skipped"] for t in report["tally"])      # the MISMATCH runs were clean runs, not skips
    (mismatch,) = report["also_seen"]
    assert mismatch["label"] == "MISMATCH" and mismatch["first_index"] >= info.culprit   # sightings never lie
    assert (mismatch["before"] is not None) == (mismatch["first_index"] < info.second)
    # the bisect's own times and the devices' provenance, as the store has them
    with sqlite3.connect(tmp_path / "r.sqlite") as conn:
        started, finished = conn.execute("SELECT started, finished FROM runs WHERE kind = 'bisect'").fetchone()
    assert (doc["started"], doc["finished"]) == (started, finished) and finished > started
    assert "torch" in json.dumps(doc["provenance"]["devices"]["cpu"])
    markdown = (tmp_path / "later.md").read_text()
    assert "**device cpu**" in markdown and "torch" in markdown and "**started**" in markdown
    assert "Also seen" in markdown and "MISMATCH" in markdown

    # the reverse: the earlier bug, with the later one's failures as the finding, interrupted twice
    args = _bisect_args(tmp_path, info, case, "--signature", "MISMATCH", "--json", str(tmp_path / "earlier.json"))
    line = None
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        command = [sys.executable, "-m", "harness", *args] if line is None else \
            [sys.executable, "-m", "harness", *shlex.split(line)[1:]]
        proc = _interrupted(command, tmp_path, env, sig)
        assert proc.returncode == code, proc.stdout + proc.stderr
        *_, said, line = proc.stderr.strip().splitlines()
        assert "resume it with:" in said
        bisect_id = _bisect_id(tmp_path, "MISMATCH")
        assert line == shlex.join(["harness", "bisect", "--resume", bisect_id, "--store",
                                   str((tmp_path / "r.sqlite").resolve()),
                                   "--json", str((tmp_path / "earlier.json").resolve())])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()                                           # the line works from any directory
    done = subprocess.run([sys.executable, "-m", "harness", *shlex.split(line)[1:], "--json",
                           str(tmp_path / "earlier.json")], cwd=elsewhere, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"first bad commit: {info.culprit_sha}" in done.stdout
    earlier = json.loads((tmp_path / "earlier.json").read_text())["bisect"]
    assert earlier["culprit"]["index"] == info.culprit
    assert all(a["label"] == "NONFINITE" and a["first_index"] >= info.second for a in earlier["also_seen"])

    history = run_harness("history", "kpkg", "--kind", "bisect", "--store", str(tmp_path / "r.sqlite"),
                          cwd=tmp_path)
    assert history.returncode == 0, history.stderr
    rows = history.stdout.splitlines()[1:]
    groups = [row for row in rows if row[21] != " "]          # steps are indented under their bisect
    assert len(groups) == 2 and all(" bisect " in row for row in groups)
    assert len(rows) - 2 == sum(1 for row in rows if " bisect-step " in row) >= 6


def _bisect_id(tmp_path, signature: str) -> str:
    with sqlite3.connect(tmp_path / "r.sqlite") as conn:
        rows = conn.execute("SELECT run_id, extra FROM runs WHERE kind = 'bisect'").fetchall()
    (run_id,) = [r for r, extra in rows if json.loads(extra)["bisect"]["state"]["signature"] == signature]
    return run_id



def _interrupted(command: list[str], tmp_path, env: dict, sig: signal.Signals) -> subprocess.CompletedProcess:
    """Run ``command`` until three more bisect steps are stored, then send ``sig`` to the front end."""
    store = tmp_path / "r.sqlite"
    before = finished_bisect_steps(store)
    proc = subprocess.Popen(command, cwd=tmp_path, env={**os.environ, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        while finished_bisect_steps(store) < before + 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the bisect ended before it could be interrupted"
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def test_a_real_hang_entering_after_a_race_is_found_by_its_signature(tmp_path, golden_cache_dir):
    info = _story(tmp_path, "hang", 9, seed=5, p=0.5)
    case = tmp_path / "case.yaml"
    case.write_text(info.case_yaml.replace("timeout_s: 120", "timeout_s: 5"))
    proc = run_harness(*_bisect_args(tmp_path, info, case, "--signature", "HANG", "--json", str(tmp_path / "b.json")),
                       cwd=tmp_path, env=_env(tmp_path, golden_cache_dir), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"first bad commit: {info.second_sha}" in proc.stdout
    report = json.loads((tmp_path / "b.json").read_text())["bisect"]
    assert report["signature"] == "HANG" and report["culprit"]["index"] == info.second
    assert "also seen: MISMATCH at " in proc.stdout
