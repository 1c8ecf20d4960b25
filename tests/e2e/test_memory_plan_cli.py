"""The memory plan through the CLI: a case the CPU cannot hold is SKIPPED with its figure before
anything is allocated; one no machine could hold is exit 2 when the matrix is expanded.  A
subprocess timeout, not a wall-time assertion, is what says "quickly"."""
from __future__ import annotations

import json
import re

from helpers import run_harness, write_case_file

# issue 14's measurement: 343 GB of caches, which took 16 s to fail as HARNESS_ERROR
TOO_BIG = """\
    op: decode_layers
    geometry: qwen3-14b
    batch: 64
    seq_lens: const(32768)
"""


def test_a_case_the_cpu_cannot_hold_is_skipped_with_its_figure(tmp_path):
    cases = write_case_file(tmp_path, "big.yaml", TOO_BIG)
    proc = run_harness("run", str(cases), "--device", "cpu", "--no-store", "--no-progress",
                       "--json", str(tmp_path / "out.json"), cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    [result] = json.loads((tmp_path / "out.json").read_text())["results"]
    assert result["outcome"] == "SKIPPED"
    assert re.fullmatch(r"needs 7\d\d GB; cpu has [\d.]+ [kMG]?B available", result["summary"]), result["summary"]


def test_a_case_no_machine_holds_is_refused_at_expansion(tmp_path):
    cases = write_case_file(tmp_path, "huge.yaml", """\
        op: decode_layers
        geometry: qwen3-14b
        batch: 4096
        seq_lens: const(131072)
    """)
    for command in (["list"], ["run", "--no-store"]):
        proc = run_harness(*command, str(cases), cwd=tmp_path, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1, proc.stderr
        assert "huge.yaml:4:" in proc.stderr and "seq_lens: the case needs 199 TB, more than any machine holds" \
            in proc.stderr
