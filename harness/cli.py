"""``harness`` command line: a thin front end over ``Engine``.

Exit codes (DESIGN §6): 0 every case passed (or was skipped), 1 some case
failed, 2 bad usage or bad case files, 3 the harness itself broke.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import secrets
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from harness import __version__
from harness.case import Case
from harness.classify import default_rules
from harness.devices import DeviceError, parse_device, parse_device_list
from harness import flake, refcompare, refs
from harness.engine import Planned, RunOptions
from harness.flake import SEED_MODES, HuntOptions
from harness.matrix import MatrixError, load_paths, select
from harness.outcomes import Outcome, Result
from harness.pool import WorkerOptions
from harness.reports.terminal import Reporter
from harness.provenance import run_provenance
from harness.refrun import DEFAULT_ENV, RefRunner, RefSetup
from harness.reports.json_report import build_document, summarize
from harness.session import Outputs, execute, write_outputs
from harness.store import DEFAULT_STORE, MemoryStore, Store, StoreError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


class UsageError(Exception):
    pass


def _add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", default=["cases"], help="case files or directories (default: cases)")
    p.add_argument("-k", dest="expr", default=None, help="select cases whose id matches EXPR (and/or/not)")
    p.add_argument("--tier", choices=("auto", "ci", "device", "all"), default="auto",
                   help="auto: every case, device-tier ones skipped on cpu; ci/device: only that tier; "
                        "all: every case, device tier run on cpu too")


def _add_store(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=None, metavar="PATH",
                   help=f"results database (default $HARNESS_STORE or {DEFAULT_STORE})")


def _add_outputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", dest="json_path", default=None, metavar="FILE", help="results and summary as JSON")
    p.add_argument("--junit", default=None, metavar="FILE", help="JUnit XML (one testcase per result)")
    p.add_argument("--markdown", default=None, metavar="FILE", help="Markdown summary for a PR comment")
    p.add_argument("--html", default=None, metavar="FILE", help="one self-contained HTML report")


def _add_execution(p: argparse.ArgumentParser) -> None:
    """Options of every command that runs cases (run, flake, compare, bisect)."""
    p.add_argument("--device", default=None, help="cpu, cuda:N or npu:N (default cpu)")
    p.add_argument("--devices", default=None, help="several devices, one worker each: npu:0-7, cuda:0,cuda:1")
    p.add_argument("--kernel-path", action="append", default=[], metavar="DIR",
                   help="prepend DIR to the workers' PYTHONPATH (repeatable)")
    p.add_argument("--golden-cache", default=None, metavar="DIR",
                   help="golden cache directory (default $HARNESS_GOLDEN_CACHE or ~/.cache/...)")
    p.add_argument("--no-golden-cache", action="store_true",
                   help="do not keep goldens between runs (a run still computes each distinct golden once)")
    p.add_argument("--golden-dtype", choices=("fp32", "fp64"), default="fp32")
    p.add_argument("--log-dir", default=None, help="per-case logs (default reports/logs/<timestamp>)")
    p.add_argument("--rules", action="append", default=[], metavar="FILE",
                   help="extra classifier rules (YAML; harness-rules.yaml in the cwd is read too)")
    p.add_argument("--no-progress", action="store_true", help="plain line-per-case output")
    p.add_argument("--no-color", action="store_true", help="plain output without colours (as when not a TTY)")
    _add_store(p)
    p.add_argument("--no-store", action="store_true", help="keep results in memory only")
    p.add_argument("--seed", type=int, default=None, help="run every selected case with this input seed "
                   "(replays one iteration of a fresh-seed hunt)")
    _add_outputs(p)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description="Correctness harness for fused LLM kernels.")
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p_list = sub.add_parser("list", help="expand and validate case files, print case ids")
    _add_selection(p_list)

    p_run = sub.add_parser("run", help="run cases on a device")
    _add_selection(p_run)
    _add_execution(p_run)
    p_run.add_argument("-x", "--exitfirst", action="store_true", help="stop after the first failure")
    p_run.add_argument("--resume", default=None, metavar="RUN_ID",
                       help="run only the cases RUN_ID planned and has no result for (cases, kernel paths, "
                            "golden dtype and tier come from that run)")

    p_flake = sub.add_parser("flake", help="run cases N times: failure rate, intervals, bitwise determinism")
    _add_selection(p_flake)
    _add_execution(p_flake)
    p_flake.add_argument("--repeat", type=_int_arg("--repeat"), default=None,
                         help="iterations per case (default 20; with --until-fail, the cap, default 1000)")
    p_flake.add_argument("--seeds", choices=SEED_MODES, default="fixed",
                         help="fixed: identical inputs every iteration, outputs compared bit for bit across "
                              "iterations; fresh: a new recorded seed per iteration")
    p_flake.add_argument("--hunt-seed", type=int, default=None,
                         help="fresh seeds derive from this (default: random, printed and stored)")
    p_flake.add_argument("--until-fail", action="store_true", help="stop a case at its first failure")
    p_flake.add_argument("--stop-after", type=_int_arg("--stop-after"), default=None, metavar="K",
                         help="stop a case after K failures")
    p_flake.add_argument("--max-minutes", type=float, default=None, help="stop starting iterations after this")
    p_flake.add_argument("--confidence", type=float, default=0.95, help="interval confidence (default 0.95)")
    p_flake.add_argument("--target-rate", type=float, default=None, metavar="RATE",
                         help="for a clean case, say how many more clean runs would bound its rate at RATE")
    p_flake.add_argument("--allow-nondeterministic", action="store_true",
                         help="bits that vary between iterations (values within tolerance) do not fail the hunt")
    p_flake.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), default=None,
                         help="compare two stored hunts (run ids, or --json files): failure-rate change per "
                              "case with a Fisher exact test; runs nothing")

    p_cmp = sub.add_parser("compare", help="the same cases x N on several kernel-library refs, as a PR table")
    _add_selection(p_cmp)
    _add_execution(p_cmp)
    _add_refs(p_cmp)
    p_cmp.add_argument("--ref", dest="refs", action="append", default=[], metavar="NAME=REV",
                       help="a ref to run (sha, branch, tag, remote ref of a fork); repeat; the first is the "
                            "baseline, the last the candidate")
    p_cmp.add_argument("--repeat", type=_int_arg("--repeat"), default=5, help="runs per case per ref (default 5)")

    p_hist = sub.add_parser("history", help="a case's results across stored runs")
    p_hist.add_argument("pattern", help="case id: a glob with * and ?, else a substring")
    p_hist.add_argument("--limit", type=int, default=50, help="newest N rows (default 50)")
    _add_store(p_hist)
    return parser


def _add_refs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo", required=True, metavar="PATH", help="the kernel library's git repository")
    p.add_argument("--env", dest="env_templates", action="append", default=None, metavar="KEY=TEMPLATE",
                   help="per-ref environment, e.g. 'PYTHONPATH={worktree}/python:{PYTHONPATH}' or "
                        "'PYPTO_ROOT={worktree}' (repeatable; default 'PYTHONPATH={worktree}:{PYTHONPATH}')")
    p.add_argument("--build", default=None, metavar="CMD", help="run in each ref's worktree before its cases "
                   "(once per commit; a failing build is BUILD_ERROR for that ref)")
    p.add_argument("--build-timeout", type=float, default=1800.0, metavar="S", help="default 1800 s")
    p.add_argument("--worktree-cache", default=None, metavar="DIR",
                   help="where refs are checked out (default $HARNESS_WORKTREE_CACHE or ~/.cache/harness/worktrees)")


def _ref_setup(args) -> RefSetup:
    return RefSetup(repo=Path(args.repo), env_templates=tuple(args.env_templates or DEFAULT_ENV), build=args.build,
                    build_timeout_s=args.build_timeout, cache_dir=args.worktree_cache)


def _int_arg(flag: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes a whole number, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{flag} must be at least 1, got {value}")
        return value
    return parse


def _load(args) -> list[Case]:
    cases = load_paths(args.paths)
    if args.tier in ("ci", "device"):
        cases = [c for c in cases if c.tier == args.tier]
    if args.expr:
        cases = select(cases, args.expr)
    if not cases:
        what = f" matching -k {args.expr!r}" if args.expr else ""
        raise UsageError(f"no cases{what} in {', '.join(args.paths)}")
    if getattr(args, "seed", None) is not None:
        cases = [c.with_seed(args.seed) for c in cases]
    return cases


def cmd_list(args) -> int:
    for case in _load(args):
        print(f"{case.case_id}\t{case.op}\t{case.kernel}\t{case.tier}\t{case.source}")
    return EXIT_OK


def _store_path(args) -> str:
    return str(args.store or os.environ.get("HARNESS_STORE") or DEFAULT_STORE)


def _open_store(args) -> Store:
    """Before any case loads or runs: an unusable store path is a usage error."""
    if getattr(args, "no_store", False):
        if getattr(args, "resume", None):
            raise UsageError("--resume needs the store the run was recorded in (drop --no-store)")
        return MemoryStore()
    try:
        return Store(_store_path(args))
    except StoreError as exc:
        raise UsageError(str(exc)) from None


def _resume_plan(args, store: Store) -> tuple[list[Planned], dict]:
    old = store.run(args.resume)
    if old is None:
        raise UsageError(f"--resume {args.resume}: no such run in {store.path}")
    todo = store.missing(args.resume)
    if any(e["case"] is None for e in todo):
        raise UsageError(f"--resume {args.resume}: the run did not record its case definitions")
    return [Planned(i, Case.from_wire(e["case"]), e["repeat"]) for i, e in enumerate(todo)], old


def _outputs(args) -> Outputs:
    return Outputs(json=args.json_path, junit=args.junit, markdown=args.markdown, html=args.html)


def run_options(args, devices, *, kernel_paths=None, golden_dtype=None, tier=None, exitfirst=False,
                base_env=None, golden_cache=None) -> RunOptions:
    """The engine options an executing command's flags say (a bad rules file: exit 2 before any case)."""
    from goldens.cache import default_cache_dir
    if golden_cache is None:
        golden_cache = "" if args.no_golden_cache else str(args.golden_cache or default_cache_dir())
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    log_dir = Path(args.log_dir or Path("reports") / "logs" / stamp).resolve()
    worker = WorkerOptions(
        log_dir=log_dir, golden_cache=golden_cache, golden_dtype=golden_dtype or args.golden_dtype,
        kernel_paths=tuple(kernel_paths if kernel_paths is not None
                           else (str(Path(p).resolve()) for p in args.kernel_path)),
        rules=default_rules(extra=[Path(p) for p in args.rules]))
    if base_env is not None:
        worker.base_env = base_env
    return RunOptions(devices=devices, worker=worker, run_device_tier_on_cpu=(tier or args.tier) == "all",
                      exitfirst=exitfirst)


def _devices(args, default=None):
    if args.device and args.devices:
        raise UsageError("give --device or --devices, not both")
    if args.devices:
        return parse_device_list(args.devices)
    if args.device or default is None:
        return [parse_device(args.device or "cpu")]
    return default


def _plain(args) -> bool:
    return args.no_progress or args.no_color or not sys.stdout.isatty()


def cmd_run(args) -> int:
    _devices(args)    # --device and --devices together: exit 2 before the store is touched
    with _open_store(args) as store:
        return _run(args, store)


def _run(args, store: Store) -> int:
    stored: dict = {}
    if args.resume:
        planned, old = _resume_plan(args, store)
        stored = old["extra"].get("options", {})
        if not planned:
            print(f"harness: run {args.resume}: nothing missing")
            return EXIT_OK
        devices = _devices(args, default=[parse_device(d) for d in old["devices"]])
    else:
        planned = [Planned(i, c) for i, c in enumerate(_load(args))]
        devices = _devices(args)
    kernel_paths = stored.get("kernel_paths") or [str(Path(p).resolve()) for p in args.kernel_path]
    golden_dtype = stored.get("golden_dtype", args.golden_dtype)
    tier = stored.get("tier", args.tier)
    options = run_options(args, devices, kernel_paths=kernel_paths, golden_dtype=golden_dtype, tier=tier,
                          exitfirst=args.exitfirst)
    reporter = Reporter(total=len(planned), plain=_plain(args))
    with reporter:
        recorded = execute(
            planned, options, store, command=sys.argv, resumed_from=args.resume,
            extra={"options": {"kernel_paths": list(kernel_paths), "golden_dtype": golden_dtype, "tier": tier},
                   "log_dir": str(options.worker.log_dir)},
            on_start=lambda p, w: reporter.started(p.case.case_id, str(w.device)),
            on_result=lambda p, r: reporter.finished(r), outputs=_outputs(args))
    summary = recorded.summary
    reporter.final(recorded.results, summary)
    _note_outputs(reporter, args, recorded, store)
    if summary["counts"].get(Outcome.HARNESS_ERROR.value):
        return EXIT_INTERNAL
    return EXIT_FAILED if summary["failed"] else EXIT_OK


def _note_outputs(reporter: Reporter, args, recorded, store: Store) -> None:
    for path in (args.json_path, args.junit, args.markdown, args.html):
        if path:
            reporter.note(f"wrote {path}")
    if not args.no_store:
        reporter.note(f"run {recorded.run_id} stored in {store.path}")


# -- flake ------------------------------------------------------------------------

def cmd_flake(args) -> int:
    if args.compare:
        return _flake_compare(args)
    _devices(args)
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
    with _open_store(args) as store:
        return _flake(args, options, store)


@contextlib.contextmanager
def _session_golden_cache(args):
    """The golden cache directory of a multi-run session: the usual one, or with --no-golden-cache
    a temporary one for this session only (each distinct golden is still computed once)."""
    if not args.no_golden_cache:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="harness-goldens-") as tmp:
        yield tmp


def _flake(args, options: HuntOptions, store: Store) -> int:
    cases = _load(args)
    devices = _devices(args)
    with _session_golden_cache(args) as golden_cache:
        run = run_options(args, devices, golden_cache=golden_cache)
        planned = flake.plan(cases, options)
        rules = flake.StopRules(options)
        show_case = len(cases) > 1
        reporter = Reporter(total=len(planned), plain=_plain(args),
                            line=lambda r: flake.iteration_line(r, show_case))
        reporter.note(f"flake hunt: {len(cases)} case{'s' * (len(cases) != 1)} x {options.repeat} on "
                      f"{', '.join(map(str, devices))}, seeds {options.seeds}"
                      + (f" (hunt seed {options.hunt_seed})" if options.seeds == "fresh" else ""))

        def on_result(p: Planned, r: Result) -> None:
            rules.record(r)
            reporter.finished(r)

        def extra_doc(recorded) -> dict:
            summaries = flake.summarize_hunt(recorded.results, options.conf, options.target_rate)
            return {"kind": "flake", "flake": summaries, "summary_extra": {"flake": summaries}}

        with reporter:
            recorded = execute(
                planned, run, store, kind="flake", command=sys.argv,
                extra={"flake": {"repeat": options.repeat, "seeds": options.seeds, "hunt_seed": options.hunt_seed,
                                 "stop_after": options.stop_after, "max_minutes": options.max_minutes,
                                 "conf": options.conf},
                       "log_dir": str(run.worker.log_dir)},
                on_start=lambda p, w: reporter.started(f"{p.case.case_id} iter {p.repeat}", str(w.device)),
                on_result=on_result, should_run=rules.should_run, outputs=_outputs(args), document_extra=extra_doc)
    summaries = recorded.document_extra["flake"]
    for case_id, s in summaries.items():
        for line in flake.summary_lines(case_id, s):
            reporter.note(line)
    if rules.deadline_hit:
        reporter.note(f"--max-minutes {options.max_minutes:g} reached: {sum(rules.dropped.values())} iterations "
                      f"not started")
    stopped = {c: n for c, n in rules.dropped.items() if rules.failures[c] >= (options.stop_after or 10 ** 9)}
    for case_id, n in stopped.items():
        reporter.note(f"{case_id}: stopped after {rules.failures[case_id]} failure(s); {n} iterations not run")
    _note_outputs(reporter, args, recorded, store)
    if recorded.summary["counts"].get(Outcome.HARNESS_ERROR.value):
        return EXIT_INTERNAL
    return EXIT_FAILED if flake.hunt_failed(summaries, args.allow_nondeterministic) else EXIT_OK


def _hunt_summaries(ref: str, store_path: str, conf: float) -> tuple[str, dict[str, dict]]:
    """A stored hunt's per-case summaries, from a run id in the store or a --json file."""
    path = Path(ref)
    if path.is_file():
        try:
            doc = json.loads(path.read_text())
            results = [Result.from_json(r) for r in doc["results"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"--compare {ref}: not a harness --json file ({type(exc).__name__}: {exc})") from None
        return str(path), flake.summarize_hunt(results, conf)
    try:
        store = Store(store_path)
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    with store:
        if store.run(ref) is None:
            raise UsageError(f"--compare {ref}: no such run in {store.path} (nor a file)")
        return ref, flake.summarize_hunt(store.results(ref, include_resumes=True), conf)


def _flake_compare(args) -> int:
    name_a, before = _hunt_summaries(args.compare[0], _store_path(args), args.confidence)
    name_b, after = _hunt_summaries(args.compare[1], _store_path(args), args.confidence)
    rows = flake.compare_hunts(before, after)
    if not rows:
        raise UsageError(f"--compare {name_a} {name_b}: the two runs share no case "
                         f"({len(before)} and {len(after)} cases)")
    print(f"before: {name_a}   after: {name_b}")
    for row in rows:
        print(flake.comparison_line(row))
    only = sorted(set(before) ^ set(after))
    if only:
        print(f"({len(only)} case{'s' * (len(only) != 1)} in only one of the runs left out)")
    if args.json_path:
        from harness.reports.json_report import write_document
        write_document(args.json_path, {"schema": 1, "kind": "flake-compare", "before": name_a, "after": name_b,
                                        "rows": rows})
    return EXIT_FAILED if any(r["verdict"] == "regressed" for r in rows) else EXIT_OK


# -- compare ------------------------------------------------------------------------

def cmd_compare(args) -> int:
    _devices(args)
    named = refs.parse_ref_args(args.refs)
    if not named:
        raise UsageError("compare needs at least one --ref NAME=REV (two to compare)")
    with _open_store(args) as store:
        return _compare(args, named, store)


def _compare(args, named: list[tuple[str, str]], store: Store) -> int:
    cases = _load(args)
    devices = _devices(args)
    setup = _ref_setup(args)
    with _session_golden_cache(args) as golden_cache, \
            RefRunner(setup, run_options(args, devices, golden_cache=golden_cache), store) as runner:
        commits = [(name, runner.resolve(name, rev)) for name, rev in named]    # every ref resolves, or exit 2
        names = [name for name, _ in commits]
        parent = store.start_run(command=sys.argv, devices=[str(d) for d in devices], kind="compare",
                                 extra={"refs": [{"name": n, "sha": c.sha, "subject": c.subject} for n, c in commits],
                                        "repeat": args.repeat, "cases": [c.case_id for c in cases]})
        planned = flake.plan(cases, HuntOptions(repeat=args.repeat))
        planned = [replace(p, bitwise=False) for p in planned]
        results: list[Result] = []
        provenance: list[dict] = []
        started = time.time()
        for name, commit in commits:
            prepared = runner.prepare(name, commit)
            provenance.append(prepared.provenance)
            state = "built" if prepared.build and prepared.ok else "BUILD FAILED" if not prepared.ok else "ready"
            print(f"== {name} {commit.short} {commit.subject}  [{state}]", flush=True)
            reporter = Reporter(total=len(planned), plain=_plain(args),
                                line=lambda r: f"  {name}: " + flake.iteration_line(r, True))
            with reporter:
                recorded = runner.run(prepared, planned, kind="compare-ref", parent_id=parent, command=sys.argv,
                                      on_start=lambda p, w: reporter.started(p.case.case_id, str(w.device)),
                                      on_result=lambda p, r: reporter.finished(r))
            results.extend(recorded.results)
            store.update_extra(parent, {"done": [*store.run(parent)["extra"].get("done", []), name]})
    rows = refcompare.table(results, names)
    _print_compare(rows, commits, args.repeat)
    summary = summarize(results)
    store.finish_run(parent, {**summary, "compare": [{k: r[k] for k in ("case_id", "cells", "verdict", "p_value")}
                                                     for r in rows]})
    doc = build_document(results, started=started, devices=[str(d) for d in devices], command=sys.argv,
                         provenance={"run": run_provenance(), "refs": provenance}, run_id=parent, kind="compare",
                         refs=[{"name": p["name"], "sha": p["sha"], "subject": p["subject"], "build": p["build"]}
                               for p in provenance],
                         compare=rows)
    for path in write_outputs(_outputs(args), doc):
        print(f"wrote {path}")
    if not args.no_store:
        print(f"compare {parent} stored in {store.path}")
    last = names[-1]
    candidate_failed = any(r.outcome.failed for r in results if r.ref == last)
    regressed = any(r["verdict"] == "regressed" for r in rows)
    return EXIT_FAILED if candidate_failed or regressed else EXIT_OK


def _print_compare(rows: list[dict], commits, repeat: int) -> None:
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
        cells = [Text(r["cells"][n]) for n in names]
        verdict = [Text(refcompare.verdict_detail(r, names))] if len(names) > 1 else []
        t.add_row(Text(r["case_id"]), *cells, *verdict)
    Console(highlight=False, width=200 if not sys.stdout.isatty() else None).print(t)


# -- history ----------------------------------------------------------------------

def cmd_history(args) -> int:
    try:
        store = Store(_store_path(args))
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    with store:
        rows = store.history(args.pattern)
    if not rows:
        raise UsageError(f"no stored results for a case matching {args.pattern!r} in {store.path}")
    rows = rows[-args.limit:]
    print("when                 run                  kind    device    ref                 runs  outcomes        "
          "fail rate  case")
    for g in rows:
        when = _dt.datetime.fromtimestamp(g["started"]).strftime("%Y-%m-%d %H:%M:%S")
        ref = (g["ref"] or "-") + (f" {g['ref_sha'][:8]}" if g.get("ref_sha") else "")
        ran = g["total"] - g["outcomes"].get(Outcome.SKIPPED.value, 0)
        rate = f"{100.0 * g['failed'] / ran:.1f}%" if ran else "-"
        counts = ", ".join(f"{n} {label}" for label, n in sorted(g["counts"].items(), key=lambda kv: -kv[1]))
        print(f"{when}  {g['run_id']:<20} {g['kind'] or '-':<7} {','.join(g['devices']) or '-':<9} {ref:<19} "
              f"{g['total']:>4}  {counts:<15} {rate:>9}  {g['case_id']}")
    return EXIT_OK


COMMANDS = {"list": cmd_list, "run": cmd_run, "flake": cmd_flake, "compare": cmd_compare, "history": cmd_history}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (MatrixError, DeviceError, UsageError, refs.RefError) as exc:
        print(f"harness: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StoreError as exc:  # the store failed mid-run (disk full, ...): not a harness bug
        print(f"harness: error: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the harness itself broke: say so, ask for a report
        import traceback
        traceback.print_exc()
        print(f"harness: internal error: {type(exc).__name__}: {exc} (this is a harness bug)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
