"""``harness bisect`` (the flake-aware search over a commit range) and ``harness bisect-run``
(one verdict for ``git bisect run``)."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from harness.bisect import session as bisect
from harness.bisect import prior as p_prior_module
from harness.bisect.prior import parse_p_prior
from harness.bisect.driver import CLEAN, SIGHTED, Signature, observe
from harness.bisect.search import Conclusion
from harness.commands.selection import deciding, failing_ids, unmatched
from harness.cli.common import (EXIT_FAILED, EXIT_OK, EXIT_SIGINT, EXIT_SIGTERM, devices, engine_options, env_line,
                                load_cases, no_kernel_on_resume, open_store, outputs, publisher, ref_setup,
                                resume_command, session_golden_cache)
from harness.devices import parse_device
from harness.errors import UsageError
from harness.formats import printable
from harness.flake import hunt as flake
from harness.flake.hunt import HuntOptions
from harness.outcomes import Result
from harness.provenance import git_revision
from harness import refs
from harness.refs.git import open_repo
from harness.refs.runner import PreparedRef, RefRunner
from harness.reports.bisect_text import render_bisect, tests_text
from harness.run.options import MAX_REPEAT, kernel_paths, repo_state_dir
from harness.run.session import Terminated, execute, terminated_as_interrupt
from harness.reports.writers import write_outputs
from harness.store import Store

# `git bisect run` aborts on any other exit code.
GIT_GOOD, GIT_BAD, GIT_SKIP = 0, 1, 125
# The shell's codes for a process ended by SIGINT and SIGTERM.


def cmd_bisect(args) -> int:
    devices(args)
    if args.slower_than is not None:            # a slowdown, by latency (docs/latency.md)
        from harness.cli.latency_bisect import cmd_slower_bisect
        return cmd_slower_bisect(args)
    if not 0 < args.confidence < 1:
        raise UsageError(f"--confidence must be in (0, 1), got {args.confidence}")
    if args.good_runs < 0:
        raise UsageError(f"--good-runs must be >= 0, got {args.good_runs}")
    p_prior = parse_p_prior(getattr(args, "p_prior", None))
    if p_prior is not None and args.resume:
        raise UsageError("--p-prior does not apply to --resume (a resumed bisect keeps the prior it started with)")
    no_kernel_on_resume(args)
    if args.resume:
        if args.no_store:
            raise UsageError("--resume needs the store the bisect was recorded in (drop --no-store)")
        if args.tests:      # the tests that decide are stored with the cases
            raise UsageError("--test does not apply to --resume (a resumed bisect keeps the tests it was aimed at)")
    else:
        missing = [flag for flag, value in (("--repo", args.repo), ("--good", args.good), ("--bad", args.bad))
                   if not value]
        if missing:
            raise UsageError(f"bisect needs {', '.join(missing)} (or --resume BISECT_ID)")
        refs.parse_ref_arg(args.good)     # a rev starting with '-' is refused before git sees it
        refs.parse_ref_arg(args.bad)
    signature = Signature.parse(args.signature) if args.signature else None
    started: list[str] = []                     # the bisect's id, once it is in the store
    with open_store(args) as store, terminated_as_interrupt():
        try:
            return _bisect(args, signature, store, started, p_prior)
        except KeyboardInterrupt as stop:
            terminated = isinstance(stop, Terminated)
            print(f"harness: {'terminated (SIGTERM)' if terminated else 'interrupted'}", file=sys.stderr)
            if started and not args.no_store:
                print(f"bisect {started[0]} is saved up to its last finished step; resume it with:", file=sys.stderr)
                print(resume_command(args, started[0], store), file=sys.stderr, flush=True)
            elif started:
                print(f"bisect {started[0]} was not stored (--no-store): nothing to resume", file=sys.stderr)
            return EXIT_SIGTERM if terminated else EXIT_SIGINT


def _bisect(args, signature: Signature | None, store: Store, started: list[str],
            p_prior: str | float | None = None) -> int:
    resumed = None
    if args.resume:
        resumed = bisect.load(store, args.resume)
        started.append(resumed.run_id)
        print(f"bisect {args.resume}: resuming after {len(resumed.state.steps)} steps "
              f"({resumed.state.search.runs} recorded runs)")
        plan = resumed.plan
    else:
        plan = bisect.BisectPlan(setup=ref_setup(args), devices=tuple(str(d) for d in devices(args)),
                                 tier=args.tier, kernel_paths=kernel_paths(args.kernel_path),
                                 golden_dtype=args.golden_dtype, cases=tuple(load_cases(args, import_kernel=False)),
                                 good=args.good, bad=args.bad, first_parent=args.first_parent,
                                 golden_device=args.golden_device)
    with session_golden_cache(args) as golden_cache:
        options = engine_options(args, [parse_device(d) for d in plan.devices], golden_cache=golden_cache,
                                 kernel_paths=plan.kernel_paths, golden_dtype=plan.golden_dtype, tier=plan.tier,
                                 golden_device=plan.golden_device)
        shown: set[str] = set()

        def show_env(ref: PreparedRef) -> None:     # once per commit: bisect revisits them
            if ref.commit.sha not in shown:
                shown.add(ref.commit.sha)
                print(f"{ref.commit.short} {env_line(ref.env)}", flush=True)

        with RefRunner(plan.setup, options, store, on_prepare=show_env) as runner:
            session = resumed
            if session is None:
                search = bisect.SearchOptions(confidence=args.confidence, max_runs=args.max_runs,
                                              good_runs=args.good_runs, max_bad_runs=args.max_bad_runs,
                                              p_prior=p_prior)
                session = bisect.start(runner, store, plan, search, signature, command=sys.argv)
                started.append(session.run_id)
            state = session.state
            if resumed is None:
                print(f"bisect {session.run_id}: {state.n} commits after {state.commits[0].short} up to "
                      f"{state.commits[-1].short}; signature "
                      f"{state.signature or 'the first failure at the bad commit'}; confidence {args.confidence}")
                if session.prior:
                    print(printable(session.prior), flush=True)

            def say(index: int, observed: str, results: list[Result]) -> None:
                answer = state.search.answer()
                where = "good" if index == 0 else "bad" if index == state.n else f"{index}/{state.n}"
                judged = deciding(results)      # --test: the tests asked for, not the suite's own status
                labels = ", ".join(sorted({r.label for r in judged}))
                best = (f"; best {state.commits[answer.first].short} {100 * answer.probability:.1f}%"
                        if answer.first is not None else "")
                if observed == CLEAN and any(r.outcome.failed for r in judged):
                    observed = f"clean (no {state.signature})"      # other failures do not hide its absence
                failed = state.steps[-1].get("failing") or []
                tests = f" failed: {tests_text(failed)}" if failed else ""
                print(printable(f"step {len(state.steps)}: {state.commits[index].short} ({where}) {observed} "
                                f"[{labels}]{tests}{best}"), flush=True)
                for miss in unmatched(results) if len(state.steps) == 1 else ():    # said once, on the first step
                    print(printable(f"warning: {miss.line()}"), file=sys.stderr, flush=True)

            results = bisect.run(session, runner, store, command=sys.argv, on_step=say)
    report = bisect.finish(session, store, results)
    doc = bisect.document(session, store, results, report, command=sys.argv)
    for line in render_bisect(state, report, started=doc["started"], finished=doc["finished"]):
        print(line)
    for path in write_outputs(outputs(args), doc):
        print(f"wrote {path}")
    if not args.no_store:
        print(f"bisect {session.run_id} stored in {store.path} (resume with --resume {session.run_id})")
    found = state.search.answer().conclusion in (Conclusion.FOUND, Conclusion.SKIPPED_RANGE)
    return EXIT_OK if found else EXIT_FAILED


def cmd_bisect_run(args) -> int:
    """Never a code that would abort ``git bisect run``: only 0, 1 or 125 (see ``harness.cli.main``)."""
    if args.slower_than is not None:            # a slowdown, by latency (docs/latency.md)
        from harness.cli.latency_bisect import cmd_slower_bisect_run
        return cmd_slower_bisect_run(args)
    signature = Signature.parse(args.signature) if args.signature else None
    p_prior = parse_p_prior(args.p_prior)        # bad input: a usage error, which main turns into a skip
    devices(args)
    top = _checkout_top()
    state = repo_state_dir(top)     # the current directory is the code under test: write nothing there
    state.mkdir(parents=True, exist_ok=True)
    if args.build:
        log = Path(args.log_dir or state / "logs") / "bisect-run-build.log"
        built = refs.build(Path.cwd(), args.build, log, dict(os.environ), args.build_timeout)
        if not built.ok:
            print(f"harness bisect-run: build failed ({log}): skip", file=sys.stderr)
            return GIT_SKIP
    cases = load_cases(args)
    revision = git_revision(Path.cwd())
    with open_store(args, state / "results.sqlite") as store, session_golden_cache(args) as golden_cache:
        repeat = args.repeat
        if repeat is None:
            repeat, line = _repeat_from_prior(p_prior, store, cases, [str(d) for d in devices(args)], signature)
            print(printable(f"harness bisect-run: {line}"), flush=True)
        planned = flake.plan(cases, HuntOptions(repeat=repeat))
        planned = [replace(p, bitwise=False) for p in planned]
        run = engine_options(args, devices(args), golden_cache=golden_cache, default_log_dir=state / "logs")
        # workers import the kernel from the checkout: no __pycache__/ there either
        # command cases run in the checkout git bisect made ({worktree}, their default cwd), as under
        # `harness bisect`: not in the case file's directory, where the code under test is not
        run = replace(run, worker=replace(run.worker, base_env={**run.worker.base_env, "PYTHONDONTWRITEBYTECODE": "1"},
                                          worktree=str(top)))
        recorded = execute(planned, run, store,
                           kind="bisect-run", command=sys.argv, ref=revision["sha"][:12] if revision else None,
                           ref_sha=revision["sha"] if revision else None, publish=publisher(args))
    if not args.no_store:
        print(f"harness bisect-run: run {recorded.run_id} stored in {store.path}")
    for miss in unmatched(recorded.results):
        print(printable(f"harness bisect-run: {miss.line()}"), file=sys.stderr)
    judged = deciding(recorded.results)       # --test / -k reaching tests: those tests, not the suite's status
    what, sig = observe(judged, signature)
    for r in judged:
        if r.outcome.failed:
            print(printable(f"{r.label} {r.case_id} (run {r.repeat}): {r.summary}"))
    failed = failing_ids(recorded.results)
    if failed:
        print(printable(f"harness bisect-run: failed: {tests_text(failed)}"))
    if what == SIGHTED:
        print(f"harness bisect-run: bad ({sig} seen)")
        return GIT_BAD
    # git bisect trusts every "good": unlike `harness bisect`, a run where only other failures
    # showed (nothing passed) is a skip here, not evidence that the signature is absent
    ran_clean = what == CLEAN and any(r.outcome.passed for r in judged)
    if ran_clean and not any(r.outcome.failed for r in judged):
        print(f"harness bisect-run: good ({len(judged)} clean runs)")
        return GIT_GOOD
    if ran_clean:   # the signature did not show, other failures did: they say nothing about it
        print(f"harness bisect-run: good ({sig or 'the signature'} not seen; other failures ignored)")
        return GIT_GOOD
    print("harness bisect-run: skip (nothing ran clean and the signature did not show)")
    return GIT_SKIP


def _repeat_from_prior(mode, store: Store, cases, device_names: list[str],
                       signature: Signature | None) -> tuple[int, str]:
    """Runs per case when --repeat is not given: enough for a commit carrying the bug to show it
    99% of the time under the prior on p (docs/bisect.md "A stored rate as the prior"), else 1."""
    if mode == p_prior_module.NONE:
        return 1, "1 run per case (--p-prior none)"
    bad = _bisect_bad_sha()
    if bad is None and not isinstance(mode, float):
        return 1, "1 run per case (not under git bisect: no refs/bisect/bad to read a stored rate at)"
    chosen = p_prior_module.choose(mode, store=store, commits=[(bad, bad[:12])] if bad else [],
                                   case_ids=[c.case_id for c in cases], devices=device_names, signature=signature)
    if chosen.source == "none":
        return 1, f"1 run per case; {chosen.text}"
    runs, missed = p_prior_module.runs_to_see(chosen.evidence, cap=MAX_REPEAT)
    return runs, (f"{runs} run{'s' * (runs != 1)} per case (a bad commit shows nothing in all of them with "
                  f"probability {100 * missed:.1f}%); {chosen.text}")


def _bisect_bad_sha() -> str | None:
    """The commit ``git bisect`` holds as bad (``refs/bisect/bad``), or None outside a bisect."""
    try:
        out = subprocess.run(["git", "rev-parse", "--verify", "-q", "refs/bisect/bad"], cwd=Path.cwd(),
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and sha else None


def _checkout_top() -> Path:
    """The working tree ``git bisect run`` runs in (the current directory outside git)."""
    try:
        return open_repo(Path.cwd()).path
    except refs.RefError:
        return Path.cwd()
