"""The stored plan of a compare: paired fresh seeds, and the round trip ``--resume`` reads back."""
from __future__ import annotations

from pathlib import Path

from harness.casefiles import load_paths
from harness.flake.hunt import fresh_seed
from harness.refs.compare import ComparePlan
from harness.refs.runner import RefSetup
from harness.run.options import ResumeOptions
from helpers import write_case_file


def _plan(tmp_path, **kw) -> ComparePlan:
    cases = load_paths([str(write_case_file(tmp_path, "c.yaml", """\
        name: c
        op: rope_kv_write
        kernel: reference
        matrix:
          batch: [2, 4]
        """))])
    return ComparePlan(setup=RefSetup(repo=Path(tmp_path)), refs=(("up", "a" * 40), ("fix", "b" * 40)),
                       cases=tuple(cases), repeat=3, devices=("cpu",),
                       options=ResumeOptions(("/k",), "fp64", "all"), **kw)


def test_fresh_seeds_differ_per_repeat_and_derive_from_the_hunt_seed(tmp_path):
    planned = _plan(tmp_path, seeds="fresh", hunt_seed=11).planned()
    assert [(p.case.case_id, p.repeat) for p in planned][:3] == [("c[batch=2]", 0), ("c[batch=4]", 0),
                                                                 ("c[batch=2]", 1)]
    for p in planned:
        assert p.case.seed == fresh_seed(11, p.case.case_id, p.repeat) and not p.bitwise
    per_case = {}
    for p in planned:
        per_case.setdefault(p.case.case_id, set()).add(p.case.seed)
    assert all(len(seeds) == 3 for seeds in per_case.values())


def test_fixed_seeds_keep_each_cases_own(tmp_path):
    plan = _plan(tmp_path)
    assert {p.case.seed for p in plan.planned()} == {c.seed for c in plan.cases}


def test_the_plan_reads_back_as_it_was_stored(tmp_path):
    plan = _plan(tmp_path, seeds="fresh", hunt_seed=5)
    again = ComparePlan.from_dict(plan.to_dict())
    assert again == plan
    assert [(p.case.case_id, p.case.seed, p.repeat) for p in again.planned()] == \
        [(p.case.case_id, p.case.seed, p.repeat) for p in plan.planned()]
