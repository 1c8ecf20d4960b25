"""``harness`` command line: a thin front end over ``Engine``.

Exit codes (DESIGN §6): 0 every case passed (or was skipped), 1 some case
failed, 2 bad usage or bad case files, 3 the harness itself broke.
"""
from __future__ import annotations

import argparse
import datetime as _dt
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


def cmd_run(args) -> int:
    if args.device and args.devices:
        raise UsageError("give --device or --devices, not both")
    devices = parse_device_list(args.devices) if args.devices else [parse_device(args.device or "cpu")]
    cases = _load(args)
    from goldens.cache import default_cache_dir
    golden_cache = "" if args.no_golden_cache else str(args.golden_cache or default_cache_dir())
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    log_dir = Path(args.log_dir or Path("reports") / "logs" / stamp).resolve()
    rules = default_rules(extra=[Path(p) for p in args.rules])     # a bad rules file: exit 2 before any case
    options = RunOptions(
        devices=devices,
        worker=WorkerOptions(log_dir=log_dir, golden_cache=golden_cache, golden_dtype=args.golden_dtype,
                             kernel_paths=tuple(str(Path(p).resolve()) for p in args.kernel_path),
                             rules=rules),
        run_device_tier_on_cpu=args.tier == "all",
        exitfirst=args.exitfirst,
    )
    planned = [Planned(i, c) for i, c in enumerate(cases)]
    started = time.time()
    run_info = run_provenance(options.worker.kernel_paths)
    results: list[Result] = []
    reporter = Reporter(total=len(planned), plain=args.no_progress or not sys.stdout.isatty())
    with reporter, Engine(options) as engine:
        try:
            results = engine.run(
                planned,
                on_start=lambda p, w: reporter.started(p.case.case_id, str(w.device)),
                on_result=lambda p, r: (results.append(r), reporter.finished(r)),
            )
        finally:
            # Whatever happened, what was computed is written.
            if args.json_path:
                provenance = {"run": run_info, "devices": {str(w.device): w.info for w in engine.workers}}
                write_json(args.json_path, results, started=started, devices=[str(d) for d in devices],
                           command=sys.argv, provenance=provenance)
    summary = summarize(results)
    reporter.final(results, summary)
    if args.json_path:
        reporter.note(f"wrote {args.json_path}")
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
