"""``harness compare``: the same cases x N on several kernel-library refs, as a PR table (``--resume``
continues an interrupted one)."""
from __future__ import annotations

import secrets
import sys
from collections import Counter

from harness.cli.common import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, devices, engine_options, env_line, load_cases, no_test_matched,
                                no_kernel_on_resume, open_store, outputs, plain, ref_setup, resume_command,
                                session_golden_cache)
from harness.commands.selection import deciding
from harness.devices import parse_device
from harness.formats import printable
from harness.latency.statistics import (DEFAULT_THRESHOLD, LOOK_CONF, MAX_ROUNDS, Comparison, ci_label,
                                       rounds_floor)
from harness.errors import UsageError
from harness.run.session import terminated_as_interrupt
from harness.refs import compare as refcompare
from harness import refs
from harness.refs.runner import RefRunner
from harness.reports.flake_text import iteration_line
from harness.reports.terminal import Reporter
from harness.reports.writers import write_outputs
from harness.run.options import ResumeOptions, kernel_paths
from harness.store import Store

DEFAULT_REPEAT = 5


def cmd_compare(args) -> int:
    devices(args)
    no_kernel_on_resume(args)
    if args.resume:
        given = [flag for flag, value in (("--ref", args.refs), ("--repo", args.repo), ("--repeat", args.repeat),
                                          ("--seeds", args.seeds), ("--hunt-seed", args.hunt_seed),
                                          ("--test", args.tests)) if value]
        if given:
            raise UsageError(f"{given[0]} does not apply to --resume (a resumed compare keeps its refs, cases, "
                             f"repeats and seeds)")
        named: list[tuple[str, str]] = []
    else:
        named = refs.parse_ref_args(args.refs)
        if not named:
            raise UsageError("compare needs at least one --ref NAME=REV (two to compare), or --resume COMPARE_ID")
        if not args.repo:
            raise UsageError("compare needs --repo PATH (the kernel library's git repository)")
        if args.hunt_seed is not None and args.seeds != "fresh":
            raise UsageError("--hunt-seed applies to --seeds fresh only")
        if args.seed is not None and args.seeds == "fresh":
            raise UsageError("--seed fixes the inputs; it cannot be combined with --seeds fresh")
        if not args.latency:
            given = [f for f, v in (("--latency-threshold", args.latency_threshold),
                                    ("--latency-rounds", args.latency_rounds)) if v is not None]
            if given:
                raise UsageError(f"{given[0]} needs --latency")
        elif args.seeds == "fresh":
            raise UsageError("--seeds fresh does not apply to --latency (each round times the same inputs on every ref)")
        elif args.repeat is not None and args.latency_rounds is not None:
            raise UsageError("--repeat and --latency-rounds say the same thing for a latency compare: give one")
    with open_store(args) as store:
        return _compare(args, named, store)


def _plan(args, named: list[tuple[str, str]], store: Store) -> tuple[refcompare.ComparePlan, list]:
    """A new compare's plan from the flags (every ref resolves, or exit 2), or a stored one's."""
    if args.resume:
        plan = refcompare.load(store, args.resume)
        return plan, [(name, refs.resolve(plan.setup.repo, sha, name=name)) for name, sha in plan.refs]
    setup = ref_setup(args)
    cases = load_cases(args, import_kernel=False)
    commits = [(name, refs.resolve(setup.repo, rev, name=name)) for name, rev in named]
    seeds = args.seeds or "fixed"
    hunt_seed = (args.hunt_seed if args.hunt_seed is not None else secrets.randbelow(2 ** 31)) \
        if seeds == "fresh" else 0
    repeat = args.repeat or DEFAULT_REPEAT
    if args.latency:        # --repeat N or --latency-rounds N: at most N rounds, never fewer than MIN_ROUNDS
        flag = "--repeat" if args.repeat else "--latency-rounds"
        repeat, said = rounds_floor(args.repeat or args.latency_rounds or MAX_ROUNDS, flag)
        if said:
            print(said, flush=True)
    plan = refcompare.ComparePlan(
        setup=setup, refs=tuple((name, c.sha) for name, c in commits), cases=tuple(cases),
        repeat=repeat,
        devices=tuple(str(d) for d in devices(args)),
        options=ResumeOptions(kernel_paths(args.kernel_path), args.golden_dtype, args.tier, args.golden_device),
        seeds=seeds, hunt_seed=hunt_seed,
        latency={"threshold": args.latency_threshold or DEFAULT_THRESHOLD} if args.latency else None)
    return plan, commits


def _compare(args, named: list[tuple[str, str]], store: Store) -> int:
    plan, commits = _plan(args, named, store)
    ref_devices = devices(args, default=[parse_device(d) for d in plan.devices])
    with session_golden_cache(args) as golden_cache, \
            RefRunner(plan.setup, engine_options(args, ref_devices, kernel_paths=plan.options.kernel_paths,
                                                 golden_dtype=plan.options.golden_dtype, tier=plan.options.tier,
                                                 golden_device=plan.options.golden_device,
                                                 golden_cache=golden_cache), store,
                      warm_refs=plan.latency is not None) as runner:
        parent = args.resume or refcompare.start(store, plan, commits, command=sys.argv)
        if args.resume:
            print(f"compare {parent}: resuming; what its refs already ran is not run again", flush=True)
        if plan.seeds == "fresh":
            print(f"seeds fresh (hunt seed {plan.hunt_seed}): repeat i has the same seed on every ref", flush=True)

        def announce(name, commit, prepared) -> None:
            state = ("stored" if prepared is None else "BUILD FAILED" if not prepared.ok
                     else "built" if prepared.build else "ready")
            print(f"== {name} {commit.short} {commit.subject}  [{state}]", flush=True)
            if prepared is not None:
                print(f"   {env_line(prepared.env)}", flush=True)

        def reporter(name: str, total: int) -> Reporter:
            return Reporter(total=total, plain=plain(args),
                            line=lambda r: f"  {name}: " + iteration_line(r, True))

        done = refcompare.compared(store, parent, plan)
        try:
            with terminated_as_interrupt():
                refcompare.run_compare(runner, store, plan, commits, done, command=sys.argv, announce=announce,
                                       reporter=reporter)
        except KeyboardInterrupt:
            for path in write_outputs(outputs(args), done.document(sys.argv)):     # what finished
                print(f"wrote {path}", flush=True)
            if not args.no_store:
                print(f"compare {parent} interrupted; what finished is stored in {store.path}. To run the rest:",
                      flush=True)
                print(resume_command(args, parent, store), flush=True)
            raise
    names = [name for name, _ in commits]
    rows = done.rows
    _print_compare([r for r in rows if r.changed] if args.changed else rows, commits, ran_per_ref(done.results),
                   hidden=sum(not r.changed for r in rows) if args.changed else 0)
    if plan.seeds == "fresh":       # the seed to replay a failure alone with: harness run FILE -k CASE --seed S
        for row in done.rows:
            for name in names:
                first = row.flake[name].first_failure
                if first is not None:
                    print(f"{row.case_id} @{name}: first failure repeat {first.repeat} seed {first.seed} "
                          f"({first.label})")
    latency = done.latency_rows
    if latency is not None:
        _print_latency(latency, plan)
    for path in write_outputs(outputs(args), done.document(sys.argv)):
        print(f"wrote {path}")
    if not args.no_store:
        print(f"compare {done.parent} stored in {store.path}")
    if no_test_matched(done.results):
        return EXIT_USAGE
    candidate_failed = any(r.outcome.failed for r in deciding(done.results) if r.ref == names[-1])
    regressed = any(r.verdict is refcompare.RefVerdict.REGRESSED for r in done.rows)
    slower = any(row["latency_verdict"].get("verdict") == "SLOWER" for row in latency or ())
    return EXIT_FAILED if candidate_failed or regressed or slower else EXIT_OK


def _print_latency(rows: list[dict], plan) -> None:
    """Per case and candidate: ``upstream 412.0 µs -> fix 361.0 µs (0.876x, 99% CI 0.86-0.90): FASTER``."""
    print(f"latency: up to {plan.repeat} rounds per case, threshold {100 * plan.latency['threshold']:g}% "
          f"(a verdict needs the whole {ci_label(LOOK_CONF)} past it)")
    for row in rows:
        v = row["latency_verdict"]
        text = v["error"] if "error" in v else Comparison.from_json(v).describe()
        print(printable(f"  {row['case_id']}: {text}"))


def ran_per_ref(results) -> str:
    """``6 runs per case per ref`` (``3-6 runs ...`` when they differ): what ran, not the --repeat asked for
    (a latency compare stops a decided case early; an interrupted one stops everywhere)."""
    counts = Counter((r.case_id, r.ref) for r in results)
    lo, hi = min(counts.values(), default=0), max(counts.values(), default=0)
    return f"{lo if lo == hi else f'{lo}-{hi}'} run{'s' * (hi != 1)} per case per ref"


def _print_compare(rows: list[refcompare.CompareRow], commits, title: str, *, hidden: int = 0) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    names = [n for n, _ in commits]
    if hidden:
        title += f"; {hidden} unchanged case{'s' * (hidden != 1)} not shown (--changed)"
    t = Table(title=title, show_lines=False)
    t.add_column("case", overflow="fold")
    for name, commit in commits:
        t.add_column(f"{name} {commit.short[:7]}", overflow="fold")
    if len(names) > 1:
        t.add_column("verdict", overflow="fold")
    for r in rows:
        cells = [Text(r.cells[n]) for n in names]
        verdict = [Text(refcompare.verdict_detail(r, names))] if len(names) > 1 else []
        t.add_row(Text(r.case_id), *cells, *verdict)
    Console(highlight=False, width=200 if not sys.stdout.isatty() else None).print(t)
    for r in rows:          # the cell says "5/5 FAILED"; what the command printed says why
        if r.failure:
            print(printable(f"{r.case_id} fails on every ref; its output:"))
            for line in r.failure.splitlines():
                print(printable(f"  {line}"))
