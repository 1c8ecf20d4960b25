"""``harness`` command line: a thin front end over ``Engine``.

Exit codes (README): 0 every case passed (or was skipped), 1 some case
failed, 2 bad usage or bad case files, 3 the harness itself broke.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
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
from harness.flake import hunt as flake
from harness.flake.changes import HuntChange, hunt_changes
from harness.flake.summary import HuntSummary, hunt_failed, summarize_hunt
from harness.refs import compare as refcompare
from harness import refs
from harness.run.engine import Planned, RunOptions
from harness.bisect.driver import (CLEAN, SIGHTED, BisectError, BisectState, Signature, SignatureError, observe,
                            render_report, run_steps)
from harness.bisect.search import FlakyBisect
from harness.flake.hunt import SEED_MODES, HuntOptions
from harness.casefiles import ExpressionError, LocatedError, load_paths, select
from harness.outcomes import Outcome, Result
from harness.shard.merge import MergeError, load_durations, merge
from harness.run.pool import WorkerOptions
from harness.reports.flake_text import change_line, iteration_line, summary_lines
from harness.reports.terminal import Reporter
from harness.provenance import git_revision, run_provenance
from harness.refs.runner import DEFAULT_ENV, RefRunner, RefSetup
from harness.report_document import build_document
from harness.summary import summarize
from harness.reports.document import load_document, results_of
from harness.stored import stored_document
from harness.run.session import Outputs, execute, write_outputs
from harness.shard.split import ShardError, parse_shard, select_shard, shard_info
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
    p_run.add_argument("--shard", default=None, metavar="I/N",
                       help="run only shard I of N (1-based; deterministic: every host computes the same split)")
    p_run.add_argument("--shard-durations", default=None, metavar="SOURCE",
                       help="balance shards by the durations in SOURCE (a --json report or a store); default: "
                            "the store's recorded durations, by count when it has none. Give every shard the "
                            "same SOURCE, or they split differently (report --merge notices)")
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

    p_bis = sub.add_parser("bisect", help="the first commit of the kernel library that shows a failure, "
                                          "even when it reproduces only sometimes")
    _add_selection(p_bis)
    _add_execution(p_bis)
    _add_refs(p_bis)
    p_bis.add_argument("--good", default=None, metavar="REV", help="a commit without the failure")
    p_bis.add_argument("--bad", default=None, metavar="REV", help="a commit with it")
    p_bis.add_argument("--signature", default=None, metavar="OUTCOME[:CODE]",
                       help="the failure to look for (MISMATCH, DEVICE_FAULT:507018, FAIL_507018, CRASH:SIGSEGV); "
                            "default: the first failure seen at the bad commit")
    p_bis.add_argument("--confidence", type=float, default=0.99, help="stop when one commit holds this posterior")
    p_bis.add_argument("--first-parent", action="store_true", help="follow only first parents (merge-heavy history)")
    p_bis.add_argument("--max-runs", type=_int_arg("--max-runs"), default=300, help="run budget (default 300)")
    p_bis.add_argument("--good-runs", type=int, default=0, metavar="N",
                       help="run the good commit N times right after the first sighting, as a smoke test "
                            "(default 0: it is run when that is informative; docs/bisect.md)")
    p_bis.add_argument("--max-bad-runs", type=_int_arg("--max-bad-runs"), default=50, metavar="N",
                       help="give up (NOT_REPRODUCED) after N clean runs at the bad commit (default 50)")
    p_bis.add_argument("--resume", default=None, metavar="BISECT_ID",
                       help="continue a stored bisect (its cases, refs and options come from the store)")

    p_brun = sub.add_parser("bisect-run", help="for `git bisect run`: exit 0 good, 1 bad, 125 skip, nothing else")
    _add_selection(p_brun)
    _add_execution(p_brun)
    p_brun.add_argument("--signature", default=None, metavar="OUTCOME[:CODE]",
                        help="bad only when this failure shows (other failures: skip); default: any failure is bad")
    p_brun.add_argument("--repeat", type=_int_arg("--repeat"), default=1,
                        help="runs per case; bad if the signature shows in any (for flaky failures)")
    p_brun.add_argument("--build", default=None, metavar="CMD", help="run first in the current directory; "
                        "a failing build is a skip (125)")
    p_brun.add_argument("--build-timeout", type=float, default=1800.0, metavar="S")

    p_rep = sub.add_parser("report", help="render a stored run, a --json file or merged shards in any format")
    p_rep.add_argument("source", nargs="?", default=None,
                       help="a run id in the store, or a --json file (default: the newest stored run)")
    p_rep.add_argument("--merge", nargs="+", default=None, metavar="SOURCE",
                       help="merge shard outputs (--json files, stores, or STORE::RUN_ID) into one report")
    p_rep.add_argument("--force", action="store_true",
                       help="merge sources from different matrices or harness versions anyway (warnings say what)")
    _add_store(p_rep)
    _add_outputs(p_rep)

    p_hist = sub.add_parser("history", help="a case's results across stored runs")
    p_hist.add_argument("pattern", help="case id: a glob with * and ?, else a substring")
    p_hist.add_argument("--limit", type=int, default=50, help="newest N rows (default 50)")
    _add_store(p_hist)
    return parser


def _add_refs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo", default=None, metavar="PATH", help="the kernel library's git repository")
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
    from harness.goldens.cache import default_cache_dir
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
    shard_extra = None
    if args.resume:
        planned, old = _resume_plan(args, store)
        stored = old["extra"].get("options", {})
        if not planned:
            print(f"harness: run {args.resume}: nothing missing")
            return EXIT_OK
        devices = _devices(args, default=[parse_device(d) for d in old["devices"]])
        shard_extra = old["extra"].get("shard")
    else:
        cases, shard_extra = _shard(args, _load(args), store)
        planned = [Planned(i, c) for i, c in enumerate(cases)]
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
                   "log_dir": str(options.worker.log_dir), **({"shard": shard_extra} if shard_extra else {})},
            on_start=lambda p, w: reporter.started(p.case.case_id, str(w.device)),
            on_result=lambda p, r: reporter.finished(r), outputs=_outputs(args),
            document_extra=lambda rec: {"shard": shard_extra} if shard_extra else {})
    summary = recorded.summary
    reporter.final(recorded.results, summary)
    _note_outputs(reporter, args, recorded, store)
    if summary["counts"].get(Outcome.HARNESS_ERROR.value):
        return EXIT_INTERNAL
    return EXIT_FAILED if summary["failed"] else EXIT_OK


def _shard(args, cases: list[Case], store: Store) -> tuple[list[Case], dict | None]:
    """This host's part of the matrix under ``--shard I/N`` (the whole list otherwise)."""
    if not args.shard:
        return cases, None
    shard = parse_shard(args.shard)
    if args.shard_durations:
        try:
            durations = load_durations(args.shard_durations)
        except MergeError as exc:
            raise UsageError(f"--shard-durations: {exc}") from None
    else:
        durations = store.durations()
    ids = [c.case_id for c in cases]
    durations = {k: v for k, v in durations.items() if k in set(ids)} or None
    mine = select_shard(cases, shard, key=lambda c: c.case_id, durations=durations)
    info = shard_info(shard, ids, durations, matrices={c.matrix for c in cases})
    print(f"shard {shard}: {len(mine)} of {len(set(ids))} cases (balanced by {info['balanced_by']})", flush=True)
    return mine, info


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
                            line=lambda r: iteration_line(r, show_case))
        reporter.note(f"flake hunt: {len(cases)} case{'s' * (len(cases) != 1)} x {options.repeat} on "
                      f"{', '.join(map(str, devices))}, seeds {options.seeds}"
                      + (f" (hunt seed {options.hunt_seed})" if options.seeds == "fresh" else ""))

        def on_result(p: Planned, r: Result) -> None:
            rules.record(r)
            reporter.finished(r)

        def extra_doc(recorded) -> dict:
            summaries = summarize_hunt(recorded.results, options.conf, options.target_rate)
            as_json = {case_id: s.to_json() for case_id, s in summaries.items()}
            return {"kind": "flake", "flake": as_json, "summary_extra": {"flake": as_json}}

        with reporter:
            recorded = execute(
                planned, run, store, kind="flake", command=sys.argv,
                extra={"flake": {"repeat": options.repeat, "seeds": options.seeds, "hunt_seed": options.hunt_seed,
                                 "stop_after": options.stop_after, "max_minutes": options.max_minutes,
                                 "conf": options.conf},
                       "log_dir": str(run.worker.log_dir)},
                on_start=lambda p, w: reporter.started(f"{p.case.case_id} iter {p.repeat}", str(w.device)),
                on_result=on_result, should_run=rules.should_run, outputs=_outputs(args), document_extra=extra_doc)
    summaries = {case_id: HuntSummary.from_json(s) for case_id, s in recorded.document_extra["flake"].items()}
    for case_id, s in summaries.items():
        for line in summary_lines(case_id, s):
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
    return EXIT_FAILED if hunt_failed(summaries, args.allow_nondeterministic) else EXIT_OK


def _hunt_summaries(ref: str, store_path: str, conf: float) -> tuple[str, dict[str, HuntSummary]]:
    """A stored hunt's per-case summaries, from a run id in the store or a --json file."""
    path = Path(ref)
    if path.is_file():
        try:
            results = results_of(load_document(path))
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"--compare {ref}: {exc}") from None
        return str(path), summarize_hunt(results, conf)
    try:
        store = Store(store_path)
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    with store:
        if store.run(ref) is None:
            raise UsageError(f"--compare {ref}: no such run in {store.path} (nor a file)")
        return ref, summarize_hunt(store.results(ref, include_resumes=True), conf)


def _flake_compare(args) -> int:
    name_a, before = _hunt_summaries(args.compare[0], _store_path(args), args.confidence)
    name_b, after = _hunt_summaries(args.compare[1], _store_path(args), args.confidence)
    rows = hunt_changes(before, after)
    if not rows:
        raise UsageError(f"--compare {name_a} {name_b}: the two runs share no case "
                         f"({len(before)} and {len(after)} cases)")
    print(f"before: {name_a}   after: {name_b}")
    for row in rows:
        print(change_line(row))
    only = sorted(set(before) ^ set(after))
    if only:
        print(f"({len(only)} case{'s' * (len(only) != 1)} in only one of the runs left out)")
    if args.json_path:
        from harness.reports.json_report import write_document
        write_document(args.json_path, {"schema": 1, "kind": "flake-compare", "before": name_a, "after": name_b,
                                        "rows": [r.to_json() for r in rows]})
    return EXIT_FAILED if any(r.change is HuntChange.REGRESSED for r in rows) else EXIT_OK


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
    with _session_golden_cache(args) as golden_cache, \
            RefRunner(_ref_setup(args), run_options(args, devices, golden_cache=golden_cache), store) as runner:
        commits = [(name, runner.resolve(name, rev)) for name, rev in named]    # every ref resolves, or exit 2

        def announce(name, commit, prepared) -> None:
            state = "BUILD FAILED" if not prepared.ok else "built" if prepared.build else "ready"
            print(f"== {name} {commit.short} {commit.subject}  [{state}]", flush=True)

        def reporter(name: str, total: int) -> Reporter:
            return Reporter(total=total, plain=_plain(args), line=lambda r: f"  {name}: " + iteration_line(r, True))

        done = refcompare.run_compare(runner, store, cases, commits, args.repeat, command=sys.argv,
                                      devices=[str(d) for d in devices], announce=announce, reporter=reporter)
    names = [name for name, _ in commits]
    _print_compare(done.rows, commits, args.repeat)
    for path in write_outputs(_outputs(args), done.document(sys.argv)):
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


# -- bisect -------------------------------------------------------------------------

def cmd_bisect(args) -> int:
    _devices(args)
    if not 0 < args.confidence < 1:
        raise UsageError(f"--confidence must be in (0, 1), got {args.confidence}")
    if args.good_runs < 0:
        raise UsageError(f"--good-runs must be >= 0, got {args.good_runs}")
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
    signature = None
    if args.signature:
        try:
            signature = Signature.parse(args.signature)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    with _open_store(args) as store:
        return _bisect(args, signature, store)


def _bisect(args, signature, store: Store) -> int:
    if args.resume:
        parent, saved, cases, state = _bisect_resume(args, store)
        devices = [parse_device(d) for d in saved["devices"]]
        setup = RefSetup(repo=Path(saved["repo"]), env_templates=tuple(saved["env_templates"]),
                         build=saved["build"], build_timeout_s=saved["build_timeout_s"],
                         cache_dir=saved["worktree_cache"])
        args.tier = saved["tier"]
        kernel_paths, golden_dtype = saved["kernel_paths"], saved["golden_dtype"]
    else:
        cases = _load(args)
        devices = _devices(args)
        setup = _ref_setup(args)
        kernel_paths, golden_dtype = [str(Path(p).resolve()) for p in args.kernel_path], args.golden_dtype
    with _session_golden_cache(args) as golden_cache:
        options = run_options(args, devices, golden_cache=golden_cache, kernel_paths=kernel_paths,
                              golden_dtype=golden_dtype)
        with RefRunner(setup, options, store) as runner:
            if not args.resume:
                good, bad = runner.resolve("good", args.good), runner.resolve("bad", args.bad)
                between = refs.commits_between(setup.repo, good, bad, first_parent=args.first_parent)
                if not between:
                    raise UsageError(f"--good {args.good} and --bad {args.bad} are the same commit: nothing to bisect")
                search = FlakyBisect(len(between), confidence=args.confidence, max_runs=args.max_runs,
                                     min_good_runs=args.good_runs, max_bad_runs=args.max_bad_runs)
                state = BisectState([good, *between], search, signature)
                saved = {"repo": str(setup.repo.resolve()), "env_templates": list(setup.env_templates),
                         "build": setup.build, "build_timeout_s": setup.build_timeout_s,
                         "worktree_cache": setup.cache_dir, "devices": [str(d) for d in devices], "tier": args.tier,
                         "kernel_paths": kernel_paths, "golden_dtype": golden_dtype,
                         "cases": [c.to_wire() for c in cases], "good": args.good, "bad": args.bad,
                         "first_parent": args.first_parent}
                parent = store.start_run(command=sys.argv, devices=saved["devices"], kind="bisect",
                                         ref=f"{good.short}..{bad.short}", ref_sha=bad.sha,
                                         extra={"bisect": {"options": saved, "state": state.to_dict()}})
                print(f"bisect {parent}: {state.n} commits after {good.short} up to {bad.short}; signature "
                      f"{state.signature or 'the first failure at the bad commit'}; confidence {args.confidence}")
            results = _bisect_loop(args, runner, store, parent, saved, cases, state)
    report = state.report()
    for line in render_report(state, report):
        print(line)
    store.finish_run(parent, {**summarize(results), "bisect": report})
    doc = build_document(results, started=time.time(), devices=saved["devices"], command=sys.argv,
                         provenance={"run": run_provenance()}, run_id=parent, kind="bisect", bisect=report,
                         refs=state.endpoint_refs())
    for path in write_outputs(_outputs(args), doc):
        print(f"wrote {path}")
    if not args.no_store:
        print(f"bisect {parent} stored in {store.path} (resume with --resume {parent})")
    return EXIT_OK if report["verdict"] in ("FOUND", "SKIPPED_RANGE") else EXIT_FAILED


def _bisect_resume(args, store: Store):
    run = store.run(args.resume)
    if run is None or run["kind"] != "bisect":
        raise UsageError(f"--resume {args.resume}: no bisect with that id in {store.path}")
    try:
        saved = run["extra"]["bisect"]["options"]
        state = BisectState.from_dict(run["extra"]["bisect"]["state"])
        cases = [Case.from_wire(c) for c in saved["cases"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"--resume {args.resume}: the stored bisect state does not read ({exc})") from None
    print(f"bisect {args.resume}: resuming after {len(state.steps)} steps ({state.search.runs} recorded runs)")
    return args.resume, saved, cases, state


def _bisect_loop(args, runner: RefRunner, store: Store, parent: str, saved: dict, cases: list[Case],
                 state: BisectState) -> list[Result]:
    def save() -> None:   # the --resume point, after every run
        store.update_extra(parent, {"bisect": {"options": saved, "state": state.to_dict()}})

    def say(index: int, observed: str, results: list[Result]) -> None:
        answer = state.search.answer()
        commit = state.commits[index]
        where = "good" if index == 0 else "bad" if index == state.n else f"{index}/{state.n}"
        labels = ", ".join(sorted({r.label for r in results}))
        best = (f"; best {state.commits[answer.first].short} {100 * answer.probability:.1f}%"
                if answer.first is not None else "")
        print(f"step {len(state.steps)}: {commit.short} ({where}) {observed} [{labels}]{best}", flush=True)

    return run_steps(state, runner, cases, parent=parent, command=sys.argv, save=save, on_step=say)


# -- bisect-run ---------------------------------------------------------------------

GIT_GOOD, GIT_BAD, GIT_SKIP = 0, 1, 125


def cmd_bisect_run(args) -> int:
    """Never a code that would abort ``git bisect run``: only 0, 1 or 125 (see main)."""
    signature = Signature.parse(args.signature) if args.signature else None
    _devices(args)
    if args.build:
        log = Path(args.log_dir or Path("reports") / "logs") / "bisect-run-build.log"
        built = refs.build(Path.cwd(), args.build, log, dict(os.environ), args.build_timeout)
        if not built.ok:
            print(f"harness bisect-run: build failed ({log}): skip", file=sys.stderr)
            return GIT_SKIP
    cases = _load(args)
    planned = flake.plan(cases, HuntOptions(repeat=args.repeat))
    planned = [replace(p, bitwise=False) for p in planned]
    revision = git_revision(Path.cwd())
    with _open_store(args) as store, _session_golden_cache(args) as golden_cache:
        recorded = execute(planned, run_options(args, _devices(args), golden_cache=golden_cache), store,
                           kind="bisect-run", command=sys.argv, ref=revision["sha"][:12] if revision else None,
                           ref_sha=revision["sha"] if revision else None, outputs=_outputs(args))
    what, sig = observe(recorded.results, signature)
    for r in recorded.results:
        if r.outcome.failed:
            print(f"{r.label} {r.case_id} (run {r.repeat}): {r.summary}")
    if what == SIGHTED:
        print(f"harness bisect-run: bad ({sig} seen)")
        return GIT_BAD
    if what == CLEAN and not any(r.outcome.failed for r in recorded.results):
        print(f"harness bisect-run: good ({len(recorded.results)} clean runs)")
        return GIT_GOOD
    if what == CLEAN:   # the signature did not show, other failures did: they say nothing about it
        print(f"harness bisect-run: good ({sig or 'the signature'} not seen; other failures ignored)")
        return GIT_GOOD
    print("harness bisect-run: skip (nothing ran clean and the signature did not show)")
    return GIT_SKIP


# -- report -------------------------------------------------------------------------

def cmd_report(args) -> int:
    if args.merge:
        if args.source:
            raise UsageError("give a SOURCE to re-render or --merge SOURCES, not both")
        try:
            doc = merge(args.merge, force=args.force, command=sys.argv)
        except MergeError as exc:
            raise UsageError(str(exc)) from None
        for warning in doc.get("warnings", []):
            print(f"harness: warning: {warning}", file=sys.stderr)
    else:
        doc = _stored_document(args)
    outputs = _outputs(args)
    if not outputs.any():     # nothing asked for: the Markdown summary on stdout
        from harness.reports.markdown import render_markdown
        print(render_markdown(doc))
    for path in write_outputs(outputs, doc):
        print(f"wrote {path}", file=sys.stderr)
    summary = doc.get("summary") or {}
    return EXIT_FAILED if summary.get("failed") else EXIT_OK


def _stored_document(args) -> dict:
    if args.source and Path(args.source).is_file():
        try:
            return load_document(args.source)
        except (OSError, ValueError) as exc:
            raise UsageError(f"{args.source}: not a harness report document ({exc})") from None
    path = _store_path(args)
    if not Path(path).exists():
        raise UsageError(f"no store at {path} (and {args.source!r} is not a file)" if args.source
                         else f"no store at {path}: give a run id with --store, or a --json file")
    try:
        store = Store(path)
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    with store:
        run_id = args.source
        if run_id is None:
            latest = store.runs(limit=50)
            top = [r for r in latest if r["parent_id"] is None]
            if not top:
                raise UsageError(f"no runs in {store.path}")
            run_id = top[0]["run_id"]
        try:
            return stored_document(store, run_id)
        except LookupError as exc:
            raise UsageError(str(exc)) from None


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


COMMANDS = {"list": cmd_list, "run": cmd_run, "flake": cmd_flake, "compare": cmd_compare, "bisect": cmd_bisect,
            "bisect-run": cmd_bisect_run, "report": cmd_report, "history": cmd_history}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bisect-run"]:
        return _git_safe(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    return _dispatch(args)


def _git_safe(argv: list[str]) -> int:
    """``bisect-run`` under ``git bisect run``: any code but 0, 1 and 125 aborts the whole bisect,
    so bad usage, a broken harness or an interrupt all become 125 (skip), said on stderr."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return GIT_SKIP if exc.code not in (0, None) else 0
    code = _dispatch(args)
    if code not in (GIT_GOOD, GIT_BAD, GIT_SKIP):
        print(f"harness bisect-run: exit {code} turned into 125 (skip) so git bisect goes on", file=sys.stderr)
        return GIT_SKIP
    return code


def _dispatch(args) -> int:
    try:
        return COMMANDS[args.command](args)
    except (LocatedError, ExpressionError, DeviceError, UsageError, refs.RefError, BisectError, SignatureError,
            ShardError) as exc:
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
