"""``harness`` command line: a thin front end over ``Engine``.

Exit codes (DESIGN §6): 0 every case passed (or was skipped), 1 some case
failed, 2 bad usage or bad case files, 3 the harness itself broke.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import time
from pathlib import Path

from harness import __version__
from harness.case import Case
from harness.classify import default_rules
from harness.devices import DeviceError, parse_device, parse_device_list
from harness.engine import Engine, Planned, RunOptions
from harness.matrix import MatrixError, load_paths, select
from harness.outcomes import Outcome, Result
from harness.pool import WorkerOptions
from harness.provenance import run_provenance
from harness.reports.json_report import summarize, write_json
from harness.reports.terminal import Reporter
from harness.store import DEFAULT_STORE, MemoryStore, Store, StoreError, planned_entry

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


class UsageError(Exception):
    pass


def _add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", default=["cases"], help="case files or directories (default: cases)")
    p.add_argument("-k", dest="expr", default=None, help="select cases whose id matches EXPR (and/or/not)")
    p.add_argument("--tier", choices=("auto", "ci", "device", "all"), default="auto",
                   help="auto: every case, device-tier ones skipped on cpu; ci/device: only that tier; "
                        "all: every case, device tier run on cpu too")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description="Correctness harness for fused LLM kernels.")
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p_list = sub.add_parser("list", help="expand and validate case files, print case ids")
    _add_selection(p_list)

    p_run = sub.add_parser("run", help="run cases on a device")
    _add_selection(p_run)
    p_run.add_argument("--device", default=None, help="cpu, cuda:N or npu:N (default cpu)")
    p_run.add_argument("--devices", default=None, help="several devices, one worker each: npu:0-7, cuda:0,cuda:1")
    p_run.add_argument("--json", dest="json_path", default=None, help="write results and summary as JSON")
    p_run.add_argument("--kernel-path", action="append", default=[], metavar="DIR",
                       help="prepend DIR to the workers' PYTHONPATH (repeatable)")
    p_run.add_argument("--golden-cache", default=None, metavar="DIR",
                       help="golden cache directory (default $HARNESS_GOLDEN_CACHE or ~/.cache/...)")
    p_run.add_argument("--no-golden-cache", action="store_true", help="compute every golden")
    p_run.add_argument("--golden-dtype", choices=("fp32", "fp64"), default="fp32")
    p_run.add_argument("--log-dir", default=None, help="per-case logs (default reports/logs/<timestamp>)")
    p_run.add_argument("--rules", action="append", default=[], metavar="FILE",
                       help="extra classifier rules (YAML; harness-rules.yaml in the cwd is read too)")
    p_run.add_argument("-x", "--exitfirst", action="store_true", help="stop after the first failure")
    p_run.add_argument("--no-progress", action="store_true", help="plain line-per-case output")
    p_run.add_argument("--store", default=None, metavar="PATH",
                       help=f"results database (default $HARNESS_STORE or {DEFAULT_STORE})")
    p_run.add_argument("--no-store", action="store_true", help="keep results in memory only")
    p_run.add_argument("--resume", default=None, metavar="RUN_ID",
                       help="run only the cases RUN_ID planned and has no result for (cases, kernel paths, "
                            "golden dtype and tier come from that run)")
    return parser


def _load(args) -> list[Case]:
    cases = load_paths(args.paths)
    if args.tier in ("ci", "device"):
        cases = [c for c in cases if c.tier == args.tier]
    if args.expr:
        cases = select(cases, args.expr)
    if not cases:
        what = f" matching -k {args.expr!r}" if args.expr else ""
        raise UsageError(f"no cases{what} in {', '.join(args.paths)}")
    return cases


def cmd_list(args) -> int:
    for case in _load(args):
        print(f"{case.case_id}\t{case.op}\t{case.kernel}\t{case.tier}\t{case.source}")
    return EXIT_OK


def _open_store(args) -> Store:
    """Before any case loads or runs: an unusable store path is a usage error."""
    if args.no_store:
        if args.resume:
            raise UsageError("--resume needs the store the run was recorded in (drop --no-store)")
        return MemoryStore()
    try:
        return Store(args.store or os.environ.get("HARNESS_STORE") or DEFAULT_STORE)
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


def cmd_run(args) -> int:
    if args.device and args.devices:
        raise UsageError("give --device or --devices, not both")
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
    else:
        planned = [Planned(i, c) for i, c in enumerate(_load(args))]
    if args.devices or args.device or not args.resume:
        devices = parse_device_list(args.devices) if args.devices else [parse_device(args.device or "cpu")]
    else:
        devices = [parse_device(d) for d in old["devices"]]
    kernel_paths = tuple(stored.get("kernel_paths") or (str(Path(p).resolve()) for p in args.kernel_path))
    golden_dtype = stored.get("golden_dtype", args.golden_dtype)
    tier = stored.get("tier", args.tier)
    from goldens.cache import default_cache_dir
    golden_cache = "" if args.no_golden_cache else str(args.golden_cache or default_cache_dir())
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    log_dir = Path(args.log_dir or Path("reports") / "logs" / stamp).resolve()
    rules = default_rules(extra=[Path(p) for p in args.rules])     # a bad rules file: exit 2 before any case
    options = RunOptions(
        devices=devices,
        worker=WorkerOptions(log_dir=log_dir, golden_cache=golden_cache, golden_dtype=golden_dtype,
                             kernel_paths=kernel_paths, rules=rules),
        run_device_tier_on_cpu=tier == "all",
        exitfirst=args.exitfirst,
    )
    started = time.time()
    run_info = run_provenance(options.worker.kernel_paths)
    run_id = store.start_run(
        command=sys.argv, devices=[str(d) for d in devices], provenance={"run": run_info}, env=run_info["env"],
        cases=[planned_entry(p.case, p.repeat) for p in planned], resumed_from=args.resume,
        extra={"options": {"kernel_paths": list(kernel_paths), "golden_dtype": golden_dtype, "tier": tier},
               "log_dir": str(log_dir)})
    results: list[Result] = []
    reporter = Reporter(total=len(planned), plain=args.no_progress or not sys.stdout.isatty())

    def on_result(p: Planned, r: Result) -> None:
        store.add_result(run_id, r)  # first: committed before anything else can fail
        results.append(r)
        reporter.finished(r)

    with reporter, Engine(options) as engine:
        try:
            results = engine.run(
                planned,
                on_start=lambda p, w: reporter.started(p.case.case_id, str(w.device)),
                on_result=on_result,
            )
        finally:
            # Whatever happened, what was computed is written.
            provenance = {"run": run_info, "devices": {str(w.device): w.info for w in engine.workers}}
            store.finish_run(run_id, summarize(results), provenance=provenance)
            if args.json_path:
                write_json(args.json_path, results, started=started, devices=[str(d) for d in devices],
                           command=sys.argv, provenance=provenance)
    summary = summarize(results)
    reporter.final(results, summary)
    if args.json_path:
        reporter.note(f"wrote {args.json_path}")
    if not args.no_store:
        reporter.note(f"run {run_id} stored in {store.path}")
    if summary["counts"].get(Outcome.HARNESS_ERROR.value):
        return EXIT_INTERNAL
    return EXIT_FAILED if summary["failed"] else EXIT_OK


COMMANDS = {"list": cmd_list, "run": cmd_run}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (MatrixError, DeviceError, UsageError) as exc:
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
