"""Golden prefetch: the engine asks for the next case's goldens before this case runs, each
golden is made once, what ``request`` returns is the prefetched reply, and a case that
shares an id with another (a mutant) still gets its own."""
from __future__ import annotations

from dataclasses import replace

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device
from harness.outcomes import Outcome
from harness.run.engine import Engine, Planned, RunOptions
from harness.run.golden_process import GoldenProcess
from harness.run.spawn import WorkerOptions


def _cases(n: int) -> list[Case]:
    return [Case(case_id=f"prefetch[seed={i}]", matrix="prefetch", source="test", op="fused_rope_decode_attention",
                 kernel="reference", geometry=PRESETS["tiny"], seq_lens=SeqLens("multi_block"),
                 slot_mode=SlotMode("arange"), seed=i) for i in range(n)]


def _watched(monkeypatch) -> list[tuple[str, str]]:
    """Events in order: ("asked", id) when the engine prefetches, ("made", id) when the
    golden process is sent a request, ("result", id) when a case's result comes back."""
    events: list[tuple[str, str]] = []
    made, prefetch = GoldenProcess._request_now, GoldenProcess.prefetch

    def counted(self, case):
        events.append(("made", case.case_id))
        return made(self, case)

    def asked(self, case):
        events.append(("asked", case.case_id))
        return prefetch(self, case)

    monkeypatch.setattr(GoldenProcess, "_request_now", counted)
    monkeypatch.setattr(GoldenProcess, "prefetch", asked)
    return events


def _run(tmp_path, cases, prefetch=True, events=None):
    options = RunOptions(devices=[Device("cpu")], prefetch_goldens=prefetch,
                         worker=WorkerOptions(log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "g")))
    with Engine(options) as engine:
        return engine.run([Planned(i, c) for i, c in enumerate(cases)],
                          on_result=lambda p, r: events.append(("result", r.case_id)) if events is not None else None)


def _passing_run(tmp_path, monkeypatch, n: int) -> tuple[list[tuple[str, str]], list[str]]:
    """``n`` cases run with prefetch, every one passing: the events, and the case ids in order."""
    events = _watched(monkeypatch)
    cases = _cases(n)
    results = _run(tmp_path, cases, events=events)
    assert [r.outcome for r in results] == [Outcome.PASS] * n
    return events, [c.case_id for c in cases]


def test_the_next_cases_golden_is_asked_for_before_this_case_runs(tmp_path, monkeypatch):
    events, ids = _passing_run(tmp_path, monkeypatch, 3)
    for this, following in zip(ids, ids[1:]):
        assert events.index(("asked", following)) < events.index(("result", this))
    made = [i for kind, i in events if kind == "made"]
    assert sorted(made) == sorted(ids)                  # each golden made once, none twice
    assert made == ids                                  # in the order the cases run


def test_without_prefetch_nothing_is_asked_ahead(tmp_path, monkeypatch):
    events = _watched(monkeypatch)
    results = _run(tmp_path, _cases(2), prefetch=False, events=events)
    assert [r.outcome for r in results] == [Outcome.PASS] * 2
    assert not [e for e in events if e[0] == "asked"]
    assert sorted(i for kind, i in events if kind == "made") == sorted(r.case_id for r in results)


def test_a_case_sharing_an_id_is_not_given_anothers_golden(tmp_path):
    process = GoldenProcess(WorkerOptions(log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "g")), fork=True)
    try:
        case = _cases(1)[0]
        other = replace(case, seed=case.seed + 1)     # same id, other inputs
        process.prefetch(case)
        mine, theirs = process.request(other), process.request(case)
        assert mine.failure is None and theirs.failure is None
        assert mine.golden.path != theirs.golden.path
    finally:
        process.close()


def test_a_request_after_close_fails_as_a_golden_failure(tmp_path):
    process = GoldenProcess(WorkerOptions(log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "g")), fork=True)
    process.close()
    reply = process.request(_cases(1)[0])
    assert reply.failure is not None and "run ended" in reply.failure.message


def test_prefetched_cases_sharing_an_id_each_keep_their_own_computed_golden(tmp_path):
    """A flake hunt with fresh seeds asks for iteration 2 (same id, other seed) before
    iteration 1 runs: each must get the reply computed for it, not a second ask's hit."""
    process = GoldenProcess(WorkerOptions(log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "g")), fork=True)
    try:
        first = _cases(1)[0]
        second = replace(first, seed=first.seed + 1)
        process.prefetch(first)
        process.prefetch(second)
        replies = [process.request(first), process.request(second)]
        assert [r.golden.hit for r in replies] == [False, False]
        assert process.request(first).golden.hit is True          # taken: asked again, a cache hit
    finally:
        process.close()


def test_goldens_are_asked_for_up_to_three_cases_ahead_and_each_is_made_once(tmp_path, monkeypatch):
    events, ids = _passing_run(tmp_path, monkeypatch, 6)
    first_result = events.index(("result", ids[0]))
    assert all(events.index(("asked", i)) < first_result for i in ids[1:4])
    assert events.index(("asked", ids[4])) > first_result          # not more than PREFETCH_AHEAD ahead
    assert sorted(kind_id for kind, kind_id in events if kind == "asked") == sorted(ids)   # each asked once
    assert [i for kind, i in events if kind == "made"] == ids      # made once each, in the order they run


def test_goldens_over_the_byte_budget_are_asked_for_only_one_case_ahead(tmp_path, monkeypatch):
    from harness.run import engine
    monkeypatch.setattr(engine, "PREFETCH_BYTES", 0)
    events, ids = _passing_run(tmp_path, monkeypatch, 4)
    first_result = events.index(("result", ids[0]))
    assert events.index(("asked", ids[1])) < first_result
    assert events.index(("asked", ids[2])) > first_result
    assert [i for kind, i in events if kind == "made"] == ids
