"""Helpers shared by the project's tests (importable as `helpers`: tests/ is on pythonpath)."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS_UNDER_TEST = Path(__file__).resolve().parent / "kernels_under_test"


def write_case_file(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


def run_harness(*args: str, cwd: Path, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def results_by_id(json_path: Path) -> dict[str, dict]:
    return {r["case_id"]: r for r in json.loads(json_path.read_text())["results"]}


def finished_bisect_steps(store: Path) -> int:
    """Bisect steps the store has finished (0 while it does not exist yet): how far a bisect got."""
    try:
        with sqlite3.connect(store) as conn:
            return conn.execute("SELECT COUNT(*) FROM runs WHERE kind = 'bisect-step' AND finished IS NOT NULL"
                                ).fetchone()[0]
    except sqlite3.Error:
        return 0


# Two audit matrices: one blind to writes for slot < 0 (no row has one), one that sees them (a warmup row).
AUDIT_BLIND = """\
name: blind
op: rope_kv_write
geometry: tiny
matrix:
  batch: [16]
  seq_lens: ["const(5)"]
  slot_mode: [arange]
  seed: [0]
"""
AUDIT_SEES = AUDIT_BLIND + """\
include:
  - {name: warmup, batch: 16, seq_lens: "const(1)", slot_mode: "const(-1)", scratch_pages: 1, block_value: 0, seed: 1}
"""
