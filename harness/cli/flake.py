"""``harness flake``: a flake hunt (on the kernels on the PYTHONPATH, or on a kernel-library ref with
``--repo``/``--ref``; ``--resume`` continues an interrupted one), or ``--compare`` of two stored hunts."""
from __future__ import annotations

import contextlib
import secrets
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from harness import refs
from harness.cli.common import (EXIT_FAILED, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, no_test_matched, devices, engine_options, env_line, load_cases,
                                no_kernel_on_resume, note_outputs, open_store, plain, publisher, ref_setup,
                                resume_command, session_golden_cache, store_path)
from harness.devices import Device, parse_device
from harness.errors import UsageError
from harness.formats import printable
from harness.flake import hunt as flake
from harness.flake.changes import HuntChange, hunt_changes
from harness.flake.hunt import HuntOptions
from harness.flake.summary import HuntSummary, hunt_failed, summarize_hunt
from harness.outcomes import Outcome, Result
from harness.refs.runner import RefRunner, RefSetup
from harness.document import load_document, results_of
from harness.reports.flake_text import change_line, iteration_line, summary_lines
from harness.reports.latency_text import latency_lines
from harness.reports.terminal import Reporter
from harness.run.engine import Planned
from harness.run.options import ResumeOptions, kernel_paths
from harness.run.session import Addendum, Recorded, document, execute, terminated_as_interrupt
from harness.store import Store
from harness.reports.history import MUTANT_KINDS


def cmd_flake(args) -> int:
    if args.compare:
        if args.tests:      # stored hunts are compared as they were run: a hunt aimed with --test is
            raise UsageError("--test does not apply to --compare (compare two hunts that were run with it)")
        return _flake_compare(args)
    devices(args)
    no_kernel_on_resume(args)
    _check_ref_flags(args)
    options = None if args.resume else _hunt_options(args)
    if args.seed is not None and args.seeds == "fresh":
        raise UsageError("--seed fixes the inputs; it cannot be combined with --seeds fresh")
    with open_store(args) as store:
        return _flake(args, options, store)


def _hunt_options(args) -> HuntOptions:
    try:
        return HuntOptions(
            repeat=args.repeat if args.repeat is not None else (1000 if args.until_fail else 20),
            seeds=args.seeds or "fixed", stop_after=1 if args.until_fail else args.stop_after,
            max_minutes=args.max_minutes, conf=args.confidence, target_rate=args.target_rate,
            hunt_seed=args.hunt_seed if args.hunt_seed is not None else secrets.randbelow(2 ** 31))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _check_ref_flags(args) -> None:
    """``--repo`` and ``--ref`` go together; the ref flags need them; a resumed hunt keeps its own."""
    ref_flags = [flag for flag, value in (("--repo", args.repo), ("--ref", args.ref), ("--env", args.env_templates),
                                          ("--build", args.build), ("--worktree-cache", args.worktree_cache))
                 if value]
    if args.resume:
        planned = [flag for flag, value in (("--repeat", args.repeat), ("--seeds", args.seeds),
                                            ("--hunt-seed", args.hunt_seed),
                                            ("--until-fail", args.until_fail), ("--stop-after", args.stop_after),
                                            ("--max-minutes", args.max_minutes), ("--target-rate", args.target_rate),
                                            ("--seed", args.seed), ("--test", args.tests)) if value]
        if ref_flags or planned:
            raise UsageError(f"{(ref_flags + planned)[0]} does not apply to --resume (a resumed hunt keeps its "
                             f"plan: cases, seeds, repeats, stop rules and ref)")
        return
    missing = [flag for flag, value in (("--repo PATH", args.repo), ("--ref NAME=REV", args.ref)) if not value]
    if ref_flags and missing:
        raise UsageError(f"{ref_flags[0]} needs {' and '.join(missing)} (a hunt on a kernel-library ref)")
    if args.ref:
        refs.parse_ref_arg(args.ref)        # a rev starting with '-' is refused before git sees it


@dataclass(frozen=True)
class _Hunt:
    """What this invocation runs: the plan, the results stored before it, and where."""

    options: HuntOptions
    planned: list[Planned]
    prior: list[Result]
    devices: list[Device]
    run_options: ResumeOptions
    setup: RefSetup | None
    ref: tuple[str, str] | None          # (name, rev or sha) of a hunt on a kernel-library ref
    origin: str | None = None            # the resumed hunt's first run


def _hunt(args, options: HuntOptions | None, store: Store) -> _Hunt:
    flags = ResumeOptions(kernel_paths(args.kernel_path), args.golden_dtype, args.tier, args.golden_device)
    if args.resume:
        stored = flake.resumed_hunt(store, args.resume, flags)
        ref = (stored.ref["name"], stored.ref["sha"]) if stored.ref else None
        return _Hunt(stored.options, stored.planned, stored.prior,
                     devices(args, default=[parse_device(d) for d in stored.devices]), stored.run_options,
                     RefSetup.from_dict(stored.ref_setup) if stored.ref_setup else None, ref, stored.run_id)
    setup = ref_setup(args) if args.repo else None
    cases = load_cases(args, import_kernel=setup is None)      # a ref's kernels are in its own checkout
    return _Hunt(options, flake.plan(cases, options), [], devices(args), flags, setup,
                 refs.parse_ref_arg(args.ref) if args.ref else None)


def _flake(args, options: HuntOptions | None, store: Store) -> int:
    hunt = _hunt(args, options, store)
    options = hunt.options
    commit = refs.resolve(hunt.setup.repo, hunt.ref[1], name=hunt.ref[0]) if hunt.setup else None    # or exit 2
    n_cases = len({p.case.case_id for p in hunt.planned} | {r.case_id for r in hunt.prior})
    if hunt.origin:
        print(f"flake {hunt.origin}: {len(hunt.prior)} iterations stored, {len(hunt.planned)} to run", flush=True)
        if not hunt.planned:
            summaries = summarize_hunt(hunt.prior, options.conf, options.target_rate)
            for case_id, s in summaries.items():
                print("\n".join(summary_lines(case_id, s)))
            return _exit_code(args, summaries, hunt.prior)
    summaries: dict[str, HuntSummary] = {}
    captured: list[Recorded] = []        # this invocation's run, as the addendum sees it (also when interrupted)
    hunted: list[dict] = []              # the ref's provenance, once prepared
    with session_golden_cache(args) as golden_cache:
        run = engine_options(args, hunt.devices, kernel_paths=hunt.run_options.kernel_paths,
                             golden_dtype=hunt.run_options.golden_dtype, tier=hunt.run_options.tier,
                             golden_device=hunt.run_options.golden_device, golden_cache=golden_cache)
        rules = flake.StopRules(options)
        for r in hunt.prior:        # --stop-after counts the failures stored before a resume
            rules.record(r)
        reporter = Reporter(total=len(hunt.planned), plain=plain(args),
                            line=lambda r: iteration_line(r, n_cases > 1))
        reporter.note(f"flake hunt: {n_cases} case{'s' * (n_cases != 1)} x {options.repeat} on "
                      f"{', '.join(map(str, hunt.devices))}, seeds {options.seeds}"
                      + (f" (hunt seed {options.hunt_seed})" if options.seeds == "fresh" else ""))

        def on_result(p: Planned, r: Result) -> None:
            rules.record(r)
            reporter.finished(r)

        def addendum(recorded: Recorded) -> Addendum:
            captured.append(recorded)
            summaries.update(summarize_hunt(hunt.prior + recorded.results, options.conf, options.target_rate))
            as_json = {case_id: s.to_json() for case_id, s in summaries.items()}
            ref_keys = {"refs": [{k: ref.get(k) for k in ("name", "sha", "subject", "build")} for ref in hunted]}
            return Addendum(document={"kind": "flake", "flake": as_json, **ref_keys}, summary={"flake": as_json})

        extra = {"flake": options.to_dict(), "options": hunt.run_options.to_dict(),
                 "log_dir": str(run.worker.log_dir), **({"ref_setup": hunt.setup.to_dict()} if hunt.setup else {})}
        common = dict(kind="flake", command=sys.argv, extra=extra, resumed_from=hunt.origin,
                      on_start=lambda p, w: reporter.started(f"{p.case.case_id} iter {p.repeat}", str(w.device)),
                      on_result=on_result, should_run=rules.should_run, addendum=addendum)
        try:
            with terminated_as_interrupt(), reporter, \
                    (RefRunner(hunt.setup, run, store) if hunt.setup else contextlib.nullcontext()) as runner:
                try:
                    if runner is None:
                        execute(hunt.planned, run, store, **common)
                    else:
                        prepared = runner.prepare(hunt.ref[0], commit)
                        hunted.append(prepared.provenance)
                        state = "BUILD FAILED" if not prepared.ok else "built" if prepared.build else "ready"
                        reporter.note(f"== {hunt.ref[0]} {commit.short} {commit.subject}  [{state}]")
                        reporter.note(f"   {env_line(prepared.env)}")
                        runner.run(prepared, hunt.planned, parent_id=None, **common)
                finally:        # the files cover the whole hunt: the iterations stored before and these
                    publish = publisher(args)
                    if publish and captured:
                        whole = replace(captured[0], run_id=hunt.origin or captured[0].run_id,
                                        results=hunt.prior + captured[0].results)
                        publish(document(whole))
        except KeyboardInterrupt:
            origin = hunt.origin or (captured[0].run_id if captured else None)
            if origin and not args.no_store:
                print(f"flake {origin} interrupted; what finished is stored in {store.path}. To run the rest:",
                      flush=True)
                print(resume_command(args, origin, store), flush=True)
            raise
    for case_id, s in summaries.items():
        for line in summary_lines(case_id, s):
            reporter.note(line)
    if rules.deadline_hit:
        reporter.note(f"--max-minutes {options.max_minutes:g} reached: {sum(rules.dropped.values())} iterations "
                      f"not started")
    stopped = {c: n for c, n in rules.dropped.items() if rules.failures[c] >= (options.stop_after or 10 ** 9)}
    for case_id, n in stopped.items():
        reporter.note(f"{case_id}: stopped after {rules.failures[case_id]} failure(s); {n} iterations not run")
    recorded = captured[0]
    for line in latency_lines(recorded.results):      # --latency: each timed iteration
        reporter.note(line)
    for warning in recorded.warnings:
        reporter.note(f"warning: {warning}")
    note_outputs(reporter, args, recorded.run_id, store)
    if hunt.origin and not args.no_store:
        reporter.note(f"(it resumes {hunt.origin}: `harness report {hunt.origin}` shows the whole hunt)")
    return _exit_code(args, summaries, hunt.prior + recorded.results)


def _exit_code(args, summaries: dict[str, HuntSummary], results: list[Result]) -> int:
    if any(r.outcome is Outcome.HARNESS_ERROR for r in results):
        return EXIT_INTERNAL
    if no_test_matched(results):
        return EXIT_USAGE
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
        run = store.run(ref)
        if run is None:
            raise UsageError(f"--compare {ref}: no such run in {store.path} (nor a file)")
        if run["kind"] in MUTANT_KINDS:
            raise UsageError(f"--compare {ref}: a run of audit mutant {run['extra'].get('mutant')!r}, not of your "
                             f"kernel; its audit's own run is {run['parent_id']}")
        return ref, summarize_hunt(store.results(ref, include_resumes=True), conf)


def _flake_compare(args) -> int:
    for flag, value in (("--junit", args.junit), ("--html", args.html)):
        if value:       # refused before anything is read: this table has no testcases nor figures
            raise UsageError(f"{flag}: flake --compare writes --json and --markdown only")
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
    if args.markdown:
        from harness.files import write_text
        from harness.reports.flake_text import changes_markdown
        write_text(args.markdown, changes_markdown(name_a, name_b, rows))
        print(f"wrote {args.markdown}")
    return EXIT_FAILED if any(r.change is HuntChange.REGRESSED for r in rows) else EXIT_OK
