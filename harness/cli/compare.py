"""``harness compare``: the same cases x N on several kernel-library refs, as a PR table."""
from __future__ import annotations

import sys

from harness.cli.common import (EXIT_FAILED, EXIT_OK, devices, engine_options, env_line, load_cases, open_store,
                                outputs, plain, ref_setup, session_golden_cache)
from harness.errors import UsageError
from harness.refs import compare as refcompare
from harness import refs
from harness.refs.runner import RefRunner
from harness.reports.flake_text import iteration_line
from harness.reports.terminal import Reporter
from harness.reports.writers import write_outputs
from harness.store import Store


def cmd_compare(args) -> int:
    devices(args)
    named = refs.parse_ref_args(args.refs)
    if not named:
        raise UsageError("compare needs at least one --ref NAME=REV (two to compare)")
    with open_store(args) as store:
        return _compare(args, named, store)


def _compare(args, named: list[tuple[str, str]], store: Store) -> int:
    cases = load_cases(args, import_kernel=False)
    ref_devices = devices(args)
    with session_golden_cache(args) as golden_cache, \
            RefRunner(ref_setup(args), engine_options(args, ref_devices, golden_cache=golden_cache), store) as runner:
        commits = [(name, runner.resolve(name, rev)) for name, rev in named]    # every ref resolves, or exit 2

        def announce(name, commit, prepared) -> None:
            state = "BUILD FAILED" if not prepared.ok else "built" if prepared.build else "ready"
            print(f"== {name} {commit.short} {commit.subject}  [{state}]", flush=True)
            print(f"   {env_line(prepared.env)}", flush=True)

        def reporter(name: str, total: int) -> Reporter:
            return Reporter(total=total, plain=plain(args),
                            line=lambda r: f"  {name}: " + iteration_line(r, True))

        done = refcompare.run_compare(runner, store, cases, commits, args.repeat, command=sys.argv,
                                      devices=[str(d) for d in ref_devices], announce=announce, reporter=reporter)
    names = [name for name, _ in commits]
    _print_compare(done.rows, commits, args.repeat)
    for path in write_outputs(outputs(args), done.document(sys.argv)):
        print(f"wrote {path}")
    if not args.no_store:
        print(f"compare {done.parent} stored in {store.path}")
    candidate_failed = any(r.outcome.failed for r in done.results if r.ref == names[-1])
    regressed = any(r.verdict is refcompare.RefVerdict.REGRESSED for r in done.rows)
    return EXIT_FAILED if candidate_failed or regressed else EXIT_OK


def _print_compare(rows: list[refcompare.CompareRow], commits, repeat: int) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    names = [n for n, _ in commits]
    t = Table(title=f"{repeat} run{'s' * (repeat != 1)} per case per ref", show_lines=False)
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
