"""Intermediates end to end (docs/intermediates.md): ``harness run`` reruns a failing case with
dump in its worker and reports the first bad intermediate in the JSON, JUnit and terminal; a
kernel nobody here wrote that writes ``$HARNESS_DUMP_DIR`` files does the same; ``harness dumps``
compares a folder written elsewhere."""
from __future__ import annotations

import json

import torch

from harness.casefiles import load_paths
from harness.intermediates import files
from harness.kernels.mutants.gptj_rope import GptjRope
from harness.worker.inputs import generate
from harness.worker.launch import launch
from helpers import ROOT, run_harness, write_case_file

OUTSIDE = ROOT / "tests" / "outside_kernels"
MATRIX = """\
name: im
op: fused_rope_decode_attention
geometry: tiny
matrix:
  kernel: [stale_kv, "outside.dumping:files_bug_k_rope", "outside.dumping:fused_rope_decode_attention"]
  batch: [4]
  seq_lens: ["const(9)"]
  slot_mode: [arange]
  seed: [0]
"""


def test_run_names_the_first_bad_intermediate_in_json_junit_and_terminal(tmp_path, golden_cache_dir):
    cases = write_case_file(tmp_path, "im.yaml", MATRIX)
    proc = run_harness("run", str(cases), "--no-progress", "--no-store", "--json", "out.json", "--junit", "out.xml",
                       "--golden-cache", str(golden_cache_dir), "--kernel-path", str(OUTSIDE), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = {r["kernel"]: r for r in json.loads((tmp_path / "out.json").read_text())["results"]}
    stale = results["stale_kv"]
    assert stale["outcome"] == "MISMATCH" and stale["first_bad_intermediate"] == "attn"
    assert {i["name"]: i["verdict"] for i in stale["intermediates"]}["v"] == "bit-exact"
    files_bug = results["outside.dumping:files_bug_k_rope"]
    assert files_bug["first_bad_intermediate"] == "k_rope" and "first bad intermediate k_rope (" in files_bug["summary"]
    good = results["outside.dumping:fused_rope_decode_attention"]
    assert good["outcome"] == "PASS" and good["first_bad_intermediate"] is None and good["intermediates"] == []
    assert 'name="first_bad_intermediate" value="attn"' in (tmp_path / "out.xml").read_text()
    assert "first bad intermediate" in proc.stdout


def table_digest(case) -> str:
    """The case's inputs digest, as a run's ``metrics.inputs_digest`` gives it."""
    from harness.worker.input_digest import digest_inputs
    ci = generate(case, torch.device("cpu"))
    return digest_inputs(ci.op, {**ci.args, **ci.initial}).digest


def test_dumps_compares_a_folder_written_elsewhere(tmp_path, golden_cache_dir):
    cases = write_case_file(tmp_path, "im.yaml", MATRIX)
    case = next(c for c in load_paths([cases]) if c.kernel == "stale_kv")
    ci = generate(case, torch.device("cpu"))
    folder = tmp_path / "from-the-npu"
    formats = iter([".pt", ".npy", ".bin"] * 2)
    launch(GptjRope().fused_rope_decode_attention, ci, torch.device("cpu"), lambda: None,
           dump=lambda name, t: files.write(folder, name, t, next(formats)))
    (folder / "stray.txt").write_text("not a dump")
    proc = run_harness("dumps", case.case_id, str(folder), "--cases", str(cases), "--golden-cache",
                       str(golden_cache_dir), "--json", "t.json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said, headline = proc.stdout.splitlines()[:2]
    assert said == f"compared with case {case.case_id} (seed 0, inputs digest {table_digest(case)}, fp32 golden)"
    assert headline.startswith("first bad intermediate q_rope (")
    assert "CONTRACT dump file stray.txt: not a dump" in proc.stdout
    table = json.loads((tmp_path / "t.json").read_text())
    assert table["first_bad_intermediate"] == "q_rope" and table["warnings"] == []
    assert table["compared_with"]["inputs_digest"] == table_digest(case)
    missing = run_harness("dumps", "no-such-case", str(folder), "--cases", str(cases), cwd=tmp_path)
    assert missing.returncode == 2 and "harness dumps: no case 'no-such-case'" in missing.stderr


def test_dumps_on_an_empty_folder_is_one_line_and_a_non_zero_exit(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = run_harness("dumps", "any-case", str(tmp_path / "empty"), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [f"harness: error: harness dumps: {tmp_path / 'empty'}: no dump files in it "
                                                f"(expected <name>.pt, <name>.npy or <name>.bin + <name>.json)"]
