"""``harness bisect`` (the flake-aware search over a commit range) and ``harness bisect-run``
(one verdict for ``git bisect run``)."""
from __future__ import annotations

import os
import signal
import sys
from dataclasses import replace
from pathlib import Path

from harness.bisect import session as bisect
from harness.bisect.driver import CLEAN, SIGHTED, Signature, observe
from harness.bisect.search import Conclusion
from harness.cli.common import (EXIT_FAILED, EXIT_OK, devices, engine_options, env_line, load_cases,
                                no_kernel_on_resume, open_store, outputs, publisher, ref_setup, resume_command,
                                session_golden_cache)
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
from harness.reports.bisect_text import render_bisect
from harness.run.options import kernel_paths, repo_state_dir
from harness.run.session import Terminated, execute, terminated_as_interrupt
from harness.reports.writers import write_outputs
from harness.store import Store

# `git bisect run` aborts on any other exit code.
GIT_GOOD, GIT_BAD, GIT_SKIP = 0, 1, 125
# The shell's codes for a process ended by SIGINT and SIGTERM.
EXIT_SIGINT, EXIT_SIGTERM = 128 + signal.SIGINT, 128 + signal.SIGTERM


def cmd_bisect(args) -> int:
    devices(args)
    if args.slower_than is not None:            # a slowdown, by latency (docs/latency.md)
        from harness.cli.latency_bisect import cmd_slower_bisect
        return cmd_slower_bisect(args)
    if not 0 < args.confidence < 1:
        raise UsageError(f"--confidence must be in (0, 1), got {args.confidence}")
    if args.good_runs < 0:
        raise UsageError(f"--good-runs must be >= 0, got {args.good_runs}")
    no_kernel_on_resume(args)
    if args.resume:
        if args.no_store:
            raise UsageError("--resume needs the store the bisect was recorded in (drop --no-store)")
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
            return _bisect(args, signature, store, started)
        except KeyboardInterrupt as stop:
            terminated = isinstance(stop, Terminated)
            print(f"harness: {'terminated (SIGTERM)' if terminated else 'interrupted'}", file=sys.stderr)
            if started and not args.no_store:
                print(f"bisect {started[0]} is saved up to its last finished step; resume it with:", file=sys.stderr)
                print(resume_command(args, started[0], store), file=sys.stderr, flush=True)
            elif started:
                print(f"bisect {started[0]} was not stored (--no-store): nothing to resume", file=sys.stderr)
            return EXIT_SIGTERM if terminated else EXIT_SIGINT


def _bisect(args, signature: Signature | None, store: Store, started: list[str]) -> int:
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
                                              good_runs=args.good_runs, max_bad_runs=args.max_bad_runs)
                session = bisect.start(runner, store, plan, search, signature, command=sys.argv)
                started.append(session.run_id)
            state = session.state
            if resumed is None:
                print(f"bisect {session.run_id}: {state.n} commits after {state.commits[0].short} up to "
                      f"{state.commits[-1].short}; signature "
                      f"{state.signature or 'the first failure at the bad commit'}; confidence {args.confidence}")

            def say(index: int, observed: str, results: list[Result]) -> None:
                answer = state.search.answer()
                where = "good" if index == 0 else "bad" if index == state.n else f"{index}/{state.n}"
                labels = ", ".join(sorted({r.label for r in results}))
                best = (f"; best {state.commits[answer.first].short} {100 * answer.probability:.1f}%"
                        if answer.first is not None else "")
                if observed == CLEAN and any(r.outcome.failed for r in results):
                    observed = f"clean (no {state.signature})"      # other failures do not hide its absence
                print(f"step {len(state.steps)}: {state.commits[index].short} ({where}) {observed} [{labels}]{best}",
                      flush=True)

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
    devices(args)
    state = repo_state_dir(_checkout_top())     # the current directory is the code under test: write nothing there
    state.mkdir(parents=True, exist_ok=True)
    if args.build:
        log = Path(args.log_dir or state / "logs") / "bisect-run-build.log"
        built = refs.build(Path.cwd(), args.build, log, dict(os.environ), args.build_timeout)
        if not built.ok:
            print(f"harness bisect-run: build failed ({log}): skip", file=sys.stderr)
            return GIT_SKIP
    cases = load_cases(args)
    planned = flake.plan(cases, HuntOptions(repeat=args.repeat))
    planned = [replace(p, bitwise=False) for p in planned]
    revision = git_revision(Path.cwd())
    with open_store(args, state / "results.sqlite") as store, session_golden_cache(args) as golden_cache:
        run = engine_options(args, devices(args), golden_cache=golden_cache, default_log_dir=state / "logs")
        # workers import the kernel from the checkout: no __pycache__/ there either
        run = replace(run, worker=replace(run.worker, base_env={**run.worker.base_env, "PYTHONDONTWRITEBYTECODE": "1"}))
        recorded = execute(planned, run, store,
                           kind="bisect-run", command=sys.argv, ref=revision["sha"][:12] if revision else None,
                           ref_sha=revision["sha"] if revision else None, publish=publisher(args))
    if not args.no_store:
        print(f"harness bisect-run: run {recorded.run_id} stored in {store.path}")
    what, sig = observe(recorded.results, signature)
    for r in recorded.results:
        if r.outcome.failed:
            print(printable(f"{r.label} {r.case_id} (run {r.repeat}): {r.summary}"))
    if what == SIGHTED:
        print(f"harness bisect-run: bad ({sig} seen)")
        return GIT_BAD
    # git bisect trusts every "good": unlike `harness bisect`, a run where only other failures
    # showed (nothing passed) is a skip here, not evidence that the signature is absent
    ran_clean = what == CLEAN and any(r.outcome.passed for r in recorded.results)
    if ran_clean and not any(r.outcome.failed for r in recorded.results):
        print(f"harness bisect-run: good ({len(recorded.results)} clean runs)")
        return GIT_GOOD
    if ran_clean:   # the signature did not show, other failures did: they say nothing about it
        print(f"harness bisect-run: good ({sig or 'the signature'} not seen; other failures ignored)")
        return GIT_GOOD
    print("harness bisect-run: skip (nothing ran clean and the signature did not show)")
    return GIT_SKIP


def _checkout_top() -> Path:
    """The working tree ``git bisect run`` runs in (the current directory outside git)."""
    try:
        return open_repo(Path.cwd()).path
    except refs.RefError:
        return Path.cwd()
