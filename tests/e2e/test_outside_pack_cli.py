"""A pack written outside the harness (tests/outside_packs/rowquant: per-row int8 quantisation)
reaches every part of it the way a user's pack does, with no edit to the harness: named by
``HARNESS_PACKS`` or found through its distribution's ``harness.packs`` entry point.  Its reference
passes, its two bugs fail as they should (with the first bad intermediate), its contract prints,
and a broken or clashing pack is one line and exit 2."""
from __future__ import annotations

import json
import os

import pytest

from helpers import ROOT, results_by_id, run_harness, write_case_file

PACKS = ROOT / "tests" / "outside_packs"
CASES = """\
name: quant
op: quantize_rows
geometry: tiny
matrix:
  kernel: [rowquant-ref, rowquant-per-tensor, rowquant-half]
  seed: [0, 1]
"""


def _env(path, packs="rowquant") -> dict:
    return {"PYTHONPATH": os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")]), "HARNESS_PACKS": packs}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("outside_pack")
    cases = write_case_file(tmp / "cases", "quant.yaml", CASES)
    out = tmp / "out.json"
    proc = run_harness("run", str(cases), "--device", "cpu", "--json", str(out), "--no-store",
                       "--intermediates", "on-failure", "--log-dir", str(tmp / "logs"), cwd=tmp, env=_env(PACKS))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return {cid.split("[")[1].rstrip("]"): r for cid, r in results_by_id(out).items()}


def test_the_reference_of_a_pack_from_outside_passes(results):
    for seed in (0, 1):
        r = results[f"kernel=rowquant-ref,seed={seed}"]
        assert r["outcome"] == "PASS", r["summary"]


def test_its_bugs_fail_with_what_they_broke(results):
    for seed in (0, 1):
        per_tensor = results[f"kernel=rowquant-per-tensor,seed={seed}"]
        assert per_tensor["outcome"] == "MISMATCH"
        assert "codes beyond one code of the golden after dequantisation by scales" in per_tensor["summary"]
        assert per_tensor["first_bad_intermediate"] == "absmax"
        half = results[f"kernel=rowquant-half,seed={seed}"]
        assert half["outcome"] == "UNWRITTEN" and "256 / 512 elements never written" in half["summary"]


def test_an_entry_point_finds_the_pack_and_its_contract_prints(tmp_path):
    """A distribution that declares ``[harness.packs] rowquant = rowquant`` (its dist-info on the path,
    as pip leaves it) is found with no HARNESS_PACKS."""
    info = tmp_path / "rowquant-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rowquant\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[harness.packs]\nrowquant = rowquant\n")
    env = _env(os.pathsep.join([str(tmp_path), str(PACKS)]), packs="")
    proc = run_harness("ops", "quantize_rows", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "codes" in proc.stdout and "round(x / scale)" in proc.stdout and "[B, 1]" in proc.stdout


@pytest.mark.parametrize("packs, expected", [
    ("no_such_pack", "harness: error: op pack no_such_pack: cannot import it: ModuleNotFoundError"),
    ("rowquant,rowquant_twin", "harness: error: op 'quantize_rows' is declared by two packs: rowquant and "
                               "rowquant-twin"),
])
def test_a_broken_or_clashing_pack_is_one_line_and_exit_2(tmp_path, packs, expected):
    twin = tmp_path / "rowquant_twin"
    twin.mkdir()
    (twin / "__init__.py").write_text("from rowquant import PACK as _P\nfrom harness.packs.api import Pack\n"
                                      "PACK = Pack(name='rowquant-twin', ops=dict(_P.ops), inputs=_P.inputs)\n")
    cases = write_case_file(tmp_path / "cases", "quant.yaml", CASES)
    proc = run_harness("run", str(cases), "--device", "cpu", "--no-store", cwd=tmp_path,
                       env=_env(os.pathsep.join([str(tmp_path), str(PACKS)]), packs))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), proc.stderr
