"""`harness history` with bisects in the store: `--kind` and a bisect's steps grouped under it
(harness/reports/history.py `case_history`, harness/cli/stored.py), in-process on a store file."""
from __future__ import annotations

import pytest

from harness.cli import main
from harness.outcomes import Outcome, Result
from harness.store import Store
from harness.reports.history import KIND_FAMILIES, case_history

CASE = "kpkg-rope[batch=4]"


def _run(store: Store, kind: str, outcomes: list[Outcome], **kw) -> str:
    run_id = store.start_run(command=["harness"], devices=["cpu"], kind=kind, **kw)
    for i, outcome in enumerate(outcomes):
        store.add_result(run_id, Result(case_id=CASE, outcome=outcome, repeat=i, device="cpu"))
    store.finish_run(run_id, {})
    return run_id


@pytest.fixture
def store_path(tmp_path):
    path = tmp_path / "r.sqlite"
    with Store(path) as store:
        _run(store, "run", [Outcome.PASS])
        _run(store, "flake", [Outcome.PASS, Outcome.MISMATCH, Outcome.PASS])
        bisect = store.start_run(command=["harness"], devices=["cpu"], kind="bisect", ref="aaaaaaaaaaaa..bbbbbbbbbbbb")
        for sha, outcome in (("b" * 40, Outcome.HANG), ("c" * 40, Outcome.MISMATCH), ("c" * 40, Outcome.PASS)):
            _run(store, "bisect-step", [outcome], parent_id=bisect, ref=sha[:12], ref_sha=sha)
        store.finish_run(bisect, {})
        compare = store.start_run(command=["harness"], devices=["cpu"], kind="compare")
        for name in ("base", "fix"):
            _run(store, "compare-ref", [Outcome.PASS, Outcome.PASS], parent_id=compare, ref=name)
        _run(store, "bisect-run", [Outcome.PASS])
    return path


def test_a_bisect_is_one_entry_with_its_steps_under_it(store_path):
    with Store(store_path) as store:
        entries = case_history(store, "kpkg")
        (bisect,) = [e for e in entries if e.row["kind"] == "bisect"]
        assert len(entries) == 5                         # run, flake, bisect, compare, bisect-run
        assert [s["kind"] for s in bisect.steps] == ["bisect-step"] * 3
        assert bisect.row["total"] == 3 and bisect.row["failed"] == 2
        assert bisect.row["counts"] == {"HANG": 1, "MISMATCH": 1, "PASS": 1}
        (compare,) = [e for e in entries if e.row["kind"] == "compare"]
        assert [s["ref"] for s in compare.steps] == ["base", "fix"] and compare.row["total"] == 4
        assert [e.row["kind"] for e in case_history(store, "kpkg", "bisect")] == ["bisect", "bisect-run"]
        assert [e.row["kind"] for e in case_history(store, "kpkg", "run")] == ["run"]
        assert [e.row["kind"] for e in case_history(store, "kpkg", "flake")] == ["flake"]
        assert [e.row["kind"] for e in case_history(store, "kpkg", "compare")] == ["compare"]
    assert set(KIND_FAMILIES) == {"run", "flake", "compare", "bisect", "audit"}


def test_an_audits_mutant_runs_are_not_the_cases_and_are_named_on_request(tmp_path):
    """The audit's own run of the case is its entry, its counts its own; the mutants' runs are
    left out, or listed apart under it with the operator's name, never summed into it."""
    with Store(tmp_path / "r.sqlite") as store:
        audit = _run(store, "audit", [Outcome.PASS])
        for name, outcome in (("out_is_query", Outcome.MISMATCH), ("nan_element", Outcome.NONFINITE)):
            _run(store, "audit-mutant", [outcome], parent_id=audit, extra={"mutant": name})
        _run(store, "audit-mutant", [Outcome.PASS], parent_id=audit,
             extra={"mutant": "head_perturbed", "sensitivity": True})
        (entry,) = case_history(store, "kpkg")
        assert entry.row["run_id"] == audit and (entry.row["total"], entry.row["failed"]) == (1, 0)
        assert entry.steps == () and entry.mutants == ()
        (entry,) = case_history(store, "kpkg", mutants=True)
        assert (entry.row["total"], entry.row["failed"]) == (1, 0)
        assert [(m["mutant"], m["failed"], m["case_id"]) for m in entry.mutants] == [
            ("out_is_query", 1, CASE), ("nan_element", 1, CASE), ("head_perturbed (sensitivity step)", 0, CASE)]
        assert [e.row["kind"] for e in case_history(store, "kpkg", "audit")] == ["audit"]
        assert case_history(store, "kpkg", "run") == []


def test_history_prints_the_group_and_filters_by_kind(store_path, capsys):
    assert main(["history", "kpkg", "--store", str(store_path), "--kind", "bisect"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header, group, *steps, bisect_run = lines
    assert " bisect " in group and "aaaaaaaa..bbbbbbbb" in group and group.endswith(CASE)
    assert "1 HANG, 1 MISMATCH, 1 PASS" in group and "66.7%" in group
    assert header.startswith("when") and len(steps) == 3 and all(" bisect-step " in s for s in steps)
    assert all(not s.endswith(CASE) for s in steps)       # the case id is the group's
    assert " bisect-run " in bisect_run
    assert main(["history", "kpkg", "--store", str(store_path), "--kind", "run"]) == 0
    out = capsys.readouterr().out
    assert "bisect" not in out and "flake" not in out and len(out.splitlines()) == 2
    assert main(["history", "kpkg", "--store", str(store_path), "--limit", "1", "--kind", "compare"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4    # header, the compare, its two refs


def test_history_of_a_kind_with_no_runs_names_the_kind(store_path, capsys):
    assert main(["history", "nothing-like-this", "--store", str(store_path), "--kind", "flake"]) == 2
    assert "(--kind flake)" in capsys.readouterr().err
