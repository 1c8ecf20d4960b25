"""``harness flake``: a flake hunt, or ``--compare`` of two stored hunts."""
from __future__ import annotations

import secrets
import sys
from pathlib import Path

from harness.cli.common import (EXIT_FAILED, EXIT_INTERNAL, EXIT_OK, devices, engine_options, load_cases, note_outputs,
                                open_store, plain, publisher, session_golden_cache, store_path)
from harness.errors import UsageError
from harness.formats import printable
from harness.flake import hunt as flake
from harness.flake.changes import HuntChange, hunt_changes
from harness.flake.hunt import HuntOptions
from harness.flake.summary import HuntSummary, hunt_failed, summarize_hunt
from harness.outcomes import Outcome, Result
from harness.reports.document import load_document, results_of
from harness.reports.flake_text import change_line, iteration_line, summary_lines
from harness.reports.terminal import Reporter
from harness.run.engine import Planned
from harness.run.session import Addendum, Recorded, execute
from harness.store import Store


def cmd_flake(args) -> int:
    if args.compare:
        return _flake_compare(args)
    devices(args)
    try:
        options = HuntOptions(
            repeat=args.repeat if args.repeat is not None else (1000 if args.until_fail else 20),
            seeds=args.seeds, stop_after=1 if args.until_fail else args.stop_after,
            max_minutes=args.max_minutes, conf=args.confidence, target_rate=args.target_rate,
            hunt_seed=args.hunt_seed if args.hunt_seed is not None else secrets.randbelow(2 ** 31))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.seed is not None and args.seeds == "fresh":
        raise UsageError("--seed fixes the inputs; it cannot be combined with --seeds fresh")
    with open_store(args) as store:
        return _flake(args, options, store)


def _flake(args, options: HuntOptions, store: Store) -> int:
    cases = load_cases(args)
    hunt_devices = devices(args)
    summaries: dict[str, HuntSummary] = {}
    with session_golden_cache(args) as golden_cache:
        run = engine_options(args, hunt_devices, golden_cache=golden_cache)
        planned = flake.plan(cases, options)
        rules = flake.StopRules(options)
        show_case = len(cases) > 1
        reporter = Reporter(total=len(planned), plain=plain(args),
                            line=lambda r: iteration_line(r, show_case))
        reporter.note(f"flake hunt: {len(cases)} case{'s' * (len(cases) != 1)} x {options.repeat} on "
                      f"{', '.join(map(str, hunt_devices))}, seeds {options.seeds}"
                      + (f" (hunt seed {options.hunt_seed})" if options.seeds == "fresh" else ""))

        def on_result(p: Planned, r: Result) -> None:
            rules.record(r)
            reporter.finished(r)

        def addendum(recorded: Recorded) -> Addendum:
            summaries.update(summarize_hunt(recorded.results, options.conf, options.target_rate))
            as_json = {case_id: s.to_json() for case_id, s in summaries.items()}
            return Addendum(document={"kind": "flake", "flake": as_json}, summary={"flake": as_json})

        with reporter:
            recorded = execute(
                planned, run, store, kind="flake", command=sys.argv,
                extra={"flake": {"repeat": options.repeat, "seeds": options.seeds, "hunt_seed": options.hunt_seed,
                                 "stop_after": options.stop_after, "max_minutes": options.max_minutes,
                                 "conf": options.conf},
                       "log_dir": str(run.worker.log_dir)},
                on_start=lambda p, w: reporter.started(f"{p.case.case_id} iter {p.repeat}", str(w.device)),
                on_result=on_result, should_run=rules.should_run, publish=publisher(args), addendum=addendum)
    for case_id, s in summaries.items():
        for line in summary_lines(case_id, s):
            reporter.note(line)
    if rules.deadline_hit:
        reporter.note(f"--max-minutes {options.max_minutes:g} reached: {sum(rules.dropped.values())} iterations "
                      f"not started")
    stopped = {c: n for c, n in rules.dropped.items() if rules.failures[c] >= (options.stop_after or 10 ** 9)}
    for case_id, n in stopped.items():
        reporter.note(f"{case_id}: stopped after {rules.failures[case_id]} failure(s); {n} iterations not run")
    for warning in recorded.warnings:
        reporter.note(f"warning: {warning}")
    note_outputs(reporter, args, recorded.run_id, store)
    if recorded.summary["counts"].get(Outcome.HARNESS_ERROR.value):
        return EXIT_INTERNAL
    return EXIT_FAILED if hunt_failed(summaries, args.allow_nondeterministic) else EXIT_OK


def _hunt_summaries(ref: str, path_of_store: str, conf: float) -> tuple[str, dict[str, HuntSummary]]:
    """A stored hunt's per-case summaries, from a run id in the store or a --json file."""
    path = Path(ref)
    if path.is_file():
        try:
            results = results_of(load_document(path))
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"--compare {ref}: {exc}") from None
        return str(path), summarize_hunt(results, conf)
    with Store(path_of_store) as store:
        if store.run(ref) is None:
            raise UsageError(f"--compare {ref}: no such run in {store.path} (nor a file)")
        return ref, summarize_hunt(store.results(ref, include_resumes=True), conf)


def _flake_compare(args) -> int:
    name_a, before = _hunt_summaries(args.compare[0], store_path(args), args.confidence)
    name_b, after = _hunt_summaries(args.compare[1], store_path(args), args.confidence)
    rows = hunt_changes(before, after)
    if not rows:
        raise UsageError(f"--compare {name_a} {name_b}: the two runs share no case "
                         f"({len(before)} and {len(after)} cases)")
    print(f"before: {name_a}   after: {name_b}")
    for row in rows:
        print(printable(change_line(row)))
    only = sorted(set(before) ^ set(after))
    if only:
        print(f"({len(only)} case{'s' * (len(only) != 1)} in only one of the runs left out)")
    if args.json_path:
        from harness.reports.json_report import write_document
        write_document(args.json_path, {"schema": 1, "kind": "flake-compare", "before": name_a, "after": name_b,
                                        "rows": [r.to_json() for r in rows]})
    return EXIT_FAILED if any(r.change is HuntChange.REGRESSED for r in rows) else EXIT_OK
