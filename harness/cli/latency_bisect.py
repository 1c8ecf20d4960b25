"""``harness bisect --slower-than PCT`` and ``harness bisect-run --slower-than PCT --good REV``:
a slowdown bisected by latency (harness/refs/latency_bisect.py, docs/latency.md)."""
from __future__ import annotations

import sys
from pathlib import Path

from harness import refs
from harness.cli.common import (EXIT_FAILED, EXIT_OK, devices, engine_options, load_cases, open_store, outputs,
                                ref_setup, session_golden_cache)
from harness.devices import parse_device
from harness.errors import UsageError
from harness.formats import printable
from harness.refs import latency_bisect as slow
from harness.latency.statistics import MAX_ROUNDS, rounds_floor
from harness.refs.git import open_repo
from harness.refs.runner import RefRunner
from harness.reports.writers import write_outputs
from harness.run.options import ResumeOptions, kernel_paths, repo_state_dir
from harness.reports.history import stored_document
from harness.document.summary import summarize

GIT_GOOD, GIT_BAD, GIT_SKIP = 0, 1, 125


def _measure(args, setup) -> slow.Measure:
    args.latency = True                     # --slower-than times every case
    cases = tuple(load_cases(args, import_kernel=False))
    max_rounds, said = rounds_floor(args.latency_rounds or MAX_ROUNDS, "--latency-rounds")
    if said:
        print(said, flush=True)
    return slow.Measure(setup=setup, cases=cases, devices=tuple(str(d) for d in devices(args)),
                        options=ResumeOptions(kernel_paths(args.kernel_path), args.golden_dtype, args.tier,
                                              args.golden_device),
                        threshold=args.slower_than, max_rounds=max_rounds)


def cmd_slower_bisect(args) -> int:
    """The first slow commit in (good, bad]; exit 0 found, 1 none (the bad commit is not slower, or unsure)."""
    if args.resume:
        raise UsageError("--slower-than does not apply to --resume (a latency bisect is measured in one session)")
    missing = [flag for flag, value in (("--repo", args.repo), ("--good", args.good), ("--bad", args.bad)) if not value]
    if missing:
        raise UsageError(f"bisect --slower-than needs {', '.join(missing)}")
    if args.signature:
        raise UsageError("--signature looks for a failure; --slower-than for a slowdown: give one")
    setup = ref_setup(args)
    how = _measure(args, setup)
    good = refs.resolve(setup.repo, args.good, name="good")
    bad = refs.resolve(setup.repo, args.bad, name="bad")
    commits = refs.commits_between(setup.repo, good, bad, first_parent=args.first_parent)
    with open_store(args) as store, session_golden_cache(args) as golden_cache:
        options = engine_options(args, [parse_device(d) for d in how.devices], golden_cache=golden_cache,
                                 kernel_paths=how.options.kernel_paths)
        parent = store.start_run(command=sys.argv, devices=list(how.devices), kind="latency-bisect",
                                 extra={"slower_than": how.threshold, "good": good.sha, "bad": bad.sha,
                                        "cases": [c.case_id for c in how.cases]})
        print(f"bisect {parent}: {len(commits)} commits after {good.short} up to {bad.short}; slower than good "
              f"by more than {100 * how.threshold:g}% (each step measured against good in rounds, "
              f"up to {how.max_rounds})", flush=True)
        state = None
        try:
            with RefRunner(setup, options, store, warm_refs=True) as runner:
                state = slow.bisect(runner, store, how, good, commits, command=sys.argv, parent_id=parent,
                                    on_step=lambda step, n: print(printable(f"step: {step.line(n)}"), flush=True))
        finally:
            store.finish_run(parent, {**summarize([]), "slower_than": state.to_json() if state else None})
        for line in slow.conclusion_lines(state):
            print(printable(line))
        # every format from the one document `harness report RUN_ID` rebuilds: the steps' results,
        # and slower_than with the answer and the first slow commit's ratios
        for path in write_outputs(outputs(args), stored_document(store, parent)):
            print(f"wrote {path}")
    return EXIT_OK if state.first_slow is not None else EXIT_FAILED


def cmd_slower_bisect_run(args) -> int:
    """For ``git bisect run``: the checkout (HEAD) against ``--good`` in rounds; 0 not slow, 1 slow, 125 unsure."""
    if not args.good:
        raise UsageError("bisect-run --slower-than needs --good REV (the commit the checkout is measured against)")
    if args.signature:
        raise UsageError("--signature looks for a failure; --slower-than for a slowdown: give one")
    top = open_repo(Path.cwd()).path
    args.repo = str(top)
    setup = ref_setup(args)
    how = _measure(args, setup)
    good = refs.resolve(top, args.good, name="good")
    head = refs.resolve(top, "HEAD", name="HEAD")
    state_dir = repo_state_dir(top)
    state_dir.mkdir(parents=True, exist_ok=True)
    with open_store(args, state_dir / "results.sqlite") as store, session_golden_cache(args) as golden_cache:
        options = engine_options(args, [parse_device(d) for d in how.devices], golden_cache=golden_cache,
                                 kernel_paths=how.options.kernel_paths, default_log_dir=state_dir / "logs")
        with RefRunner(setup, options, store, warm_refs=True) as runner:
            verdict, rows, compare_id = slow.measure(runner, store, how, good, head, command=sys.argv, parent_id=None)
        step = slow.Step(0, head, verdict, tuple(rows), compare_id)
        print(printable(f"harness bisect-run: {step.line(1)}"))
        for path in write_outputs(outputs(args), stored_document(store, compare_id)):    # the step's compare
            print(f"wrote {path}")
    return {slow.StepVerdict.SLOW: GIT_BAD, slow.StepVerdict.NOT_SLOW: GIT_GOOD}.get(verdict, GIT_SKIP)
