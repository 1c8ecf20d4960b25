"""Moving an op's knowledge into its pack changed nothing it generates (issue 36): every small
builtin case of the shipped matrix, the bug-class matrix and the parity variations
(tests/unit/data/parity_*.yaml) draws the same input bytes and gets the same golden cache key as
recorded before the move (tests/unit/data/pack_parity.json, written by bench/pack_parity.py at
700c223, where the five ops were still the core's).  The goldens' values and the large cases are
compared by ``bench/pack_parity.py --check`` (minutes of CPU)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORD = Path(__file__).parent / "data" / "pack_parity.json"


def _parity():
    spec = importlib.util.spec_from_file_location("pack_parity", ROOT / "bench" / "pack_parity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def parity():
    return _parity()


def test_every_small_builtin_case_draws_the_recorded_inputs_and_key(parity):
    recorded = json.loads(RECORD.read_text())
    cases = list(parity.builtin_cases(small=True))
    assert len(cases) >= 150           # the shipped, bug-class and variation cases, not a handful
    now = {c.case_id: parity.record(c, goldens=False) for c in cases}
    missing = sorted(set(now) - set(recorded))
    assert not missing, f"cases with no record (rewrite it with bench/pack_parity.py --write): {missing[:5]}"
    assert parity.differences({cid: recorded[cid] for cid in now}, now) == []


def test_a_generator_that_moves_one_byte_is_caught(parity, monkeypatch):
    """The check can fail: the generator changed to draw one element differently (its version
    kept) gives the case's inputs digest another value than the record's."""
    from harness.packs.qwen3 import inputs as qwen3_inputs

    recorded = json.loads(RECORD.read_text())
    case = next(parity.builtin_cases(small=True))
    real = qwen3_inputs.generate

    def drifted(c, device):
        ci = real(c, device)
        name = next(n for n, v in ci.args.items() if getattr(v, "is_floating_point", lambda: False)())
        ci.args[name].view(-1)[0] += 1
        return ci

    monkeypatch.setattr(qwen3_inputs, "generate", drifted)
    now = {case.case_id: parity.record(case, goldens=False)}
    lines = parity.differences({case.case_id: recorded[case.case_id]}, now)
    assert len(lines) == 1 and lines[0].startswith(f"{case.case_id}: inputs "), lines
