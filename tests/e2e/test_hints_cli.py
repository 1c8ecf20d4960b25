"""Mismatch hints end to end: `harness run` on kernels written outside the harness puts the hint
at the end of the one-line summary, in the JSON result's `hint` and in the Markdown report; a
correct kernel's results have none."""
from __future__ import annotations

import json
from pathlib import Path

from helpers import run_harness, write_case_file

OUTSIDE = Path(__file__).resolve().parent.parent / "outside_kernels"
MATRIX = """\
name: hints
op: fused_rope_decode_attention
geometry: tiny
matrix:
  batch: [4]
  seq_lens: [multi_block]
  slot_mode: [arange]
  seed: [0]
  kernel: ["outside.rope_pairs:fused_rope_decode_attention", "outside.query_into_out:fused_rope_decode_attention",
           "outside.exact_round_once:fused_rope_decode_attention"]
"""


def test_the_hint_is_in_the_summary_the_json_and_the_markdown(tmp_path, golden_cache_dir):
    matrix = write_case_file(tmp_path / "cases", "m.yaml", MATRIX)
    out, md = tmp_path / "r.json", tmp_path / "r.md"
    proc = run_harness("run", str(matrix), "--no-store", "--golden-cache", str(golden_cache_dir),
                       "--kernel-path", str(OUTSIDE), "--log-dir", str(tmp_path / "logs"),
                       "--json", str(out), "--markdown", str(md), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    by_kernel = {r["kernel"].split(":")[0]: r for r in json.loads(out.read_text())["results"]}
    pairs, into_out, exact = (by_kernel[k] for k in ("outside.rope_pairs", "outside.query_into_out",
                                                     "outside.exact_round_once"))
    assert pairs["outcome"] == "MISMATCH"
    assert pairs["hint"] == "looks like interleaved RoPE (GPT-J pairs) instead of NeoX halves (in out, query, k_cache)"
    assert pairs["summary"].endswith("; hint: looks like interleaved RoPE (GPT-J pairs) instead of NeoX halves (in out, query, k_cache)")
    assert pairs["report"].endswith("\nhint: looks like interleaved RoPE (GPT-J pairs) instead of NeoX halves (in out, query, k_cache)")
    assert into_out["outcome"] == "MISMATCH" and into_out["hint"] == "out holds what query should"
    assert into_out["summary"].startswith("out: ") and into_out["summary"].endswith("; hint: out holds what query should")
    assert exact["outcome"] == "PASS" and exact["hint"] == "" and "hint" not in exact["summary"]
    text = md.read_text()
    assert "hint\\: out holds what query should" in text and "hint\\: looks like interleaved RoPE" in text
    assert "hint: out holds what query should" in proc.stdout
