"""``harness list`` and ``harness run`` (with ``--shard`` and ``--resume``)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from harness.case import Case
from harness.cli.common import (EXIT_FAILED, EXIT_INTERNAL, EXIT_OK, devices, engine_options, load_cases,
                                no_kernel_on_resume, note_outputs, open_store, plain, publisher, store_path)
from harness.devices import parse_device
from harness.errors import UsageError
from harness.formats import printable
from harness.outcomes import Outcome
from harness.latency.across import against_baseline
from harness.latency.statistics import DEFAULT_THRESHOLD, Comparison
from harness.reports.latency_text import latency_lines
from harness.reports.terminal import Reporter
from harness.run.engine import Planned
from harness.run.options import ResumeOptions
from harness.run.options import kernel_paths as resolved_kernel_paths
from harness.run.session import Addendum, execute, resumed
from harness.shard.merge import MergeError, load_durations, split_source
from harness.shard.split import parse_shard, select_shard, shard_info, shard_plan
from harness.store import Store


def cmd_list(args) -> int:
    for case in load_cases(args):
        print(list_line(case))
    return EXIT_OK


def list_line(case: Case) -> str:
    """One line per case, whatever it holds (tab-separated: id, op, kernel or command, tier, source).
    A command written over several lines (a YAML block) or holding tabs is shown with ``\\n``/``\\t``,
    so a script reading the listing gets one case per line and five fields."""
    from harness.casefiles.commandspec import CommandSpec
    what = case.kernel if case.command is None else CommandSpec.from_wire(case.command).text
    fields = (case.case_id, case.op, what, case.tier, case.source)
    return "\t".join(printable(str(f).replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t"))
                     for f in fields)


def cmd_run(args) -> int:
    devices(args)    # --device and --devices together: exit 2 before the store is touched
    no_kernel_on_resume(args)
    with open_store(args) as store:
        return _run(args, store)


def _run(args, store: Store) -> int:
    _check_baseline(args, store)
    flags = ResumeOptions(resolved_kernel_paths(args.kernel_path), args.golden_dtype, args.tier, args.golden_device)
    if args.resume:
        resume = resumed(store, args.resume, flags)
        if not resume.planned:
            print(f"harness: run {args.resume}: nothing missing")
            return EXIT_OK
        planned, shard, resume_options = resume.planned, resume.shard, resume.options
        run_devices = devices(args, default=[parse_device(d) for d in resume.devices])
    else:
        cases, shard = _shard(args, load_cases(args))
        planned, resume_options = [Planned(i, c) for i, c in enumerate(cases)], flags
        run_devices = devices(args)
    options = engine_options(args, run_devices, kernel_paths=resume_options.kernel_paths,
                             golden_dtype=resume_options.golden_dtype, tier=resume_options.tier,
                             golden_device=resume_options.golden_device, exitfirst=args.exitfirst)
    reporter = Reporter(total=len(planned), plain=plain(args))
    with reporter:
        recorded = execute(
            planned, options, store, command=sys.argv, resumed_from=args.resume,
            extra={"options": resume_options.to_dict(), "log_dir": str(options.worker.log_dir),
                   **({"shard": shard} if shard else {})},
            on_start=lambda p, w: reporter.started(p.case.case_id, str(w.device)),
            on_result=lambda p, r: reporter.finished(r), publish=publisher(args),
            addendum=lambda rec: Addendum(document={"shard": shard} if shard else {}))
    summary = recorded.summary
    reporter.final(recorded.results, summary)
    for line in latency_lines(recorded.results):      # --latency, or a case file's latency: block
        reporter.note(line)
    slower = False
    if args.latency_baseline:
        for row in against_baseline(store, args.latency_baseline, recorded.results,
                                    args.latency_threshold or DEFAULT_THRESHOLD):
            v = row["latency_verdict"]
            slower |= v.get("verdict") == "SLOWER"
            reporter.note(printable(f"{row['case_id']}: " + (v["error"] if "error" in v
                                                             else Comparison.from_json(v).describe())))
    for warning in recorded.warnings:
        reporter.note(f"warning: {warning}")
    note_outputs(reporter, args, recorded.run_id, store)
    if summary["counts"].get(Outcome.HARNESS_ERROR.value):
        return EXIT_INTERNAL
    return EXIT_FAILED if summary["failed"] or slower else EXIT_OK


def _check_baseline(args, store: Store) -> None:
    """``--latency-baseline``: needs ``--latency`` and a stored run (exit 2 before any case)."""
    if args.latency_threshold is not None and not args.latency_baseline:
        raise UsageError("--latency-threshold needs --latency-baseline RUN_ID")
    if args.latency_baseline:
        if not args.latency:
            raise UsageError("--latency-baseline needs --latency")
        if store.run(args.latency_baseline) is None:
            raise UsageError(f"--latency-baseline {args.latency_baseline}: no run with that id in {store.path}")


def _shard(args, cases: list[Case]) -> tuple[list[Case], dict | None]:
    """This host's part of the matrix under ``--shard I/N`` (the whole list otherwise): a function
    of the case ids, N and ``--shard-durations`` only, never of the store, whose durations
    change as shards run beside it."""
    if not args.shard:
        return cases, None
    shard = parse_shard(args.shard)
    durations: dict[str, float] = {}
    if args.shard_durations:
        _not_the_run_store(args)
        try:
            durations = load_durations(args.shard_durations)
        except MergeError as exc:     # a usage error already; the message gains the flag's name
            raise UsageError(f"--shard-durations: {exc}") from None
    ids = [c.case_id for c in cases]
    durations = {k: v for k, v in durations.items() if k in set(ids)} or None
    mine = select_shard(cases, shard, key=lambda c: c.case_id, durations=durations)
    info = {**shard_info(shard, ids, durations, matrices={c.matrix for c in cases}),
            **shard_plan(shard, ids, durations)}
    print(f"shard {shard}: {len(mine)} of {len(set(ids))} cases (balanced by {info['balanced_by']})", flush=True)
    return mine, info


def _not_the_run_store(args) -> None:
    """The store this run writes to grows as shards run: as a durations source it would give each
    shard another split."""
    if args.no_store:
        return
    source, own = Path(split_source(args.shard_durations)[0]), Path(store_path(args))
    if source.resolve() == own.resolve() or (source.exists() and own.exists() and os.path.samefile(source, own)):
        raise UsageError(f"--shard-durations {args.shard_durations}: is the store this run records into, which "
                         "changes as shards run; pass a copy or a --json report made before the shards")
