"""What the commands share: exit codes, loading cases, the store, devices, engine settings, outputs."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import signal
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Callable

from harness.case import Case, LatencySpec
from harness.casefiles import load_paths
from harness.casefiles.expression import command_case_match
from harness.casefiles.commandspec import CommandSpec, TestSelection, pattern_matches, placeholders
from harness.commands.selection import any_matched, unmatched
from harness.devices import Device, parse_device, parse_device_list
from harness.errors import UsageError
from harness.formats import printable
from harness.path_kinds import refuse_special_path
from harness.refs import with_defaults
from harness.refs.runner import DEFAULT_ENV, RefSetup
from harness.reports.terminal import Reporter
from harness.run import options
from harness.run.engine import RunOptions
from harness.reports.writers import Outputs, check_outputs, write_outputs
from harness.store import MemoryStore, Store

# README: 0 every case passed (or was skipped), 1 some case failed, 2 bad usage or bad
# case files, 3 the harness itself broke.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_SIGINT, EXIT_SIGTERM = 128 + signal.SIGINT, 128 + signal.SIGTERM     # a command interrupted, as a shell says it


def load_kernel_paths(args) -> tuple[str, ...]:
    """``--kernel-path`` as the case files are loaded with: ``{worktree}`` is the checkout of
    ``--repo`` (compare, bisect: the user's working tree; each ref then gets its own worktree), or
    of the current directory (a spec module found in the library it tests; docs/specs.md)."""
    from harness.run.spawn import WORKTREE, checkout_top, expand_kernel_paths
    paths = tuple(getattr(args, "kernel_path", None) or ())
    if not any(WORKTREE in p for p in paths):
        return paths
    where = os.path.abspath(getattr(args, "repo", None) or ".")
    top = checkout_top(where)
    if top is None:
        raise UsageError(f"--kernel-path {next(p for p in paths if WORKTREE in p)}: {where} is not in a git "
                         f"checkout (give --repo, or run inside the library's checkout)")
    expanded = expand_kernel_paths(paths, top)
    for path in expanded:
        refuse_special_path(path, "--kernel-path")
    return expanded


def load_cases(args, *, import_kernel: bool = True) -> list[Case]:
    """The selected cases; under ``--kernel``, run by that kernel (``import_kernel``: check it
    imports and binds first; compare and bisect do not, each ref has its own code)."""
    cases = load_paths(args.paths, args.max_cases, load_kernel_paths(args))
    if args.tier in ("ci", "device"):
        cases = [c for c in cases if c.tier == args.tier]
    if args.expr:
        cases = _select_k(cases, args.expr)
    if not cases:
        what = f" matching -k {args.expr!r}" if args.expr else ""
        raise UsageError(f"no cases{what} in {', '.join(args.paths)}")
    if getattr(args, "tests", None):
        cases = _select_tests(args, cases)
    if getattr(args, "seed", None) is not None:
        cases = [c.with_seed(args.seed) for c in cases]
    if getattr(args, "kernel", None):
        cases = _with_kernel(args, cases, import_kernel)
    return with_latency(args, cases)


def _with_tests(case: Case, selection: TestSelection) -> Case:
    """A command case that keeps only the JUnit tests ``selection`` names (stored with the case)."""
    spec = CommandSpec.from_wire(case.command)
    merged = selection if spec.tests is None else spec.tests.merged(selection)
    return dataclasses.replace(case, command=dataclasses.replace(spec, tests=merged).to_wire())


def _reports_tests(case: Case) -> bool:
    """A command case whose command, cwd or env names ``{junit}``: only such a case can have tests."""
    if case.command is None:
        return False
    spec = CommandSpec.from_wire(case.command)
    texts = [spec.command] if spec.shell else list(spec.command)
    texts += [spec.cwd or "", *case.env.values()]
    return any(name == "junit" for text in texts for name, _ in placeholders(text))


def _select_k(cases: list[Case], expr: str) -> list[Case]:
    """-k on case ids; a word in no case id also reaches the JUnit tests of command cases
    (``command_case_match``): such a case runs and keeps the tests ``case::test`` that match."""
    match = command_case_match(expr, [c.case_id for c in cases])
    kept = []
    for c in cases:
        if not _reports_tests(c):
            if match(c.case_id).whole:
                kept.append(c)
            continue
        m = match(c.case_id)
        if m.whole:
            kept.append(c)
        elif m.tests:
            kept.append(_with_tests(c, TestSelection(expr=expr)))
    return kept


def _select_tests(args, cases: list[Case]) -> list[Case]:
    """``--test``: a command case keeps only the tests named (known when it has run); a kernel case
    stays only when a pattern names its own id."""
    patterns = tuple(args.tests)
    kept = [_with_tests(c, TestSelection(patterns)) if _reports_tests(c) else c for c in cases
            if _reports_tests(c) or any(pattern_matches(p, c.case_id) for p in patterns)]
    if not kept:
        raise UsageError(f"--test {patterns[0]!r}: no command case that writes JUnit ({{junit}}) and no case "
                         f"with that id in {', '.join(args.paths)}")
    return kept


def no_test_matched(results: list) -> bool:
    """``--test`` (or ``-k`` reaching tests) named no test of any command case that ran: say which tests
    there are, one line each on stderr; the caller exits 2 after writing what it has."""
    if any_matched(results):
        return False
    for miss in unmatched(results):
        print(printable(miss.line()), file=sys.stderr)
    return bool(unmatched(results))


def with_latency(args, cases: list[Case]) -> list[Case]:
    """``--latency``: every case timed; the ``--latency-*`` flags over a case file's ``latency:`` block."""
    flags, given = {}, []
    for flag, attr, key, convert in (("--latency-target", "latency_target", "target", None),
                                     ("--latency-budget", "latency_budget", "budget_s", None),
                                     ("--latency-cold", "latency_cold", "cold", {"on": True, "off": False, "auto": None}),
                                     ("--latency-clock", "latency_clock", "clock", None)):
        value = getattr(args, attr, None)
        if value is not None:
            flags[key] = convert[value] if convert else value
            given.append(flag)
    if not getattr(args, "latency", False):
        if given:
            switch = "--slower-than" if hasattr(args, "slower_than") else "--latency"
            raise UsageError(f"{given[0]} needs {switch}")
        return cases
    return [c.with_latency(dataclasses.replace(c.latency or LatencySpec(), **flags)) for c in cases]


def _with_kernel(args, cases: list[Case], import_kernel: bool) -> list[Case]:
    commands = [c for c in cases if c.command is not None]    # command cases run no kernel: kept as they are
    if commands:
        kernel_cases = [c for c in cases if c.command is None]
        if not kernel_cases:
            raise UsageError(f"--kernel {args.kernel}: the selected cases are all command cases (no kernel to replace)")
        chosen = {c.case_id: c for c in _with_kernel(args, kernel_cases, import_kernel)}
        return [c if c.command is not None else chosen[c.case_id] for c in cases
                if c.command is not None or c.case_id in chosen]
    ops = list(dict.fromkeys(c.op for c in cases))
    spec_args = {c.op: c.op_spec.arg_names for c in cases if c.spec is not None}
    states = (options.kernel_states(args.kernel, ops, args.kernel_path, arg_names=spec_args) if import_kernel
              else options.registry_states(args.kernel, ops))
    chosen = options.with_kernel(cases, args.kernel, states)
    print(printable(f"kernel: {chosen.kernel}"), flush=True)
    for note in chosen.notes:
        print(printable(note), flush=True)
    return list(chosen.cases)


def no_kernel_on_resume(args) -> None:
    if args.resume and args.kernel:
        raise UsageError("--kernel does not apply to --resume (a resumed run keeps the kernels it was planned with)")


def store_path(args, default: Path | None = None) -> str:
    return options.store_path(args.store, default=default)


def open_store(args, default: Path | None = None) -> Store:
    """Before any case loads or runs: an unusable store path is a usage error (``StoreOpenError``)."""
    if getattr(args, "no_store", False):
        if getattr(args, "resume", None):
            raise UsageError("--resume needs the store the run was recorded in (drop --no-store)")
        return MemoryStore()
    return Store(store_path(args, default))


def outputs(args) -> Outputs:
    return Outputs(json=args.json_path, junit=args.junit, markdown=args.markdown, html=args.html)


# Every flag that names a path to read or to put on a search path (the report outputs, --store,
# --log-dir and --golden-cache have their own checks): refused by what it is, by ``stat`` alone,
# before anything opens it (a FIFO on PYTHONPATH hangs every import of the worker and the spec check).
PATH_FLAGS: tuple[tuple[str, str], ...] = (
    ("kernel_path", "--kernel-path"), ("rules", "--rules"), ("repo", "--repo"), ("worktree_cache", "--worktree-cache"),
    ("shard_durations", "--shard-durations"), ("source", "report"), ("merge", "--merge"), ("folder", "dumps"))


def check_path_flags(args) -> None:
    """Before a command does anything: no path flag names a FIFO, a socket, a device or a symlink loop
    (``UsageError`` naming the flag and the kind, exit 2)."""
    for dest, flag in PATH_FLAGS:
        given = getattr(args, dest, None)
        for value in ([given] if isinstance(given, str) else given or ()):
            if isinstance(value, str) and not value.startswith("{worktree}"):
                refuse_special_path(value, flag)


def check_output_flags(args) -> None:
    """Before a command does anything: every report path it was given can be written
    (``OutputPathError``, exit 2, instead of exit 3 after every case ran)."""
    if hasattr(args, "json_path"):
        check_outputs(outputs(args))


def publisher(args) -> Callable[[dict], list[str]] | None:
    """What a run does with its document once its results are in: write the report files asked for."""
    asked = outputs(args)
    return (lambda doc: write_outputs(asked, doc)) if asked.any() else None


def devices(args, default: list[Device] | None = None) -> list[Device]:
    if args.device and args.devices:
        raise UsageError("give --device or --devices, not both")
    if args.devices:
        return parse_device_list(args.devices)
    if args.device or default is None:
        return [parse_device(args.device or "cpu")]
    return default


def engine_options(args, devices: list[Device], *, kernel_paths=None, golden_dtype: str | None = None,
                   tier: str | None = None, exitfirst: bool = False, golden_cache: str | None = None,
                   default_log_dir: Path | None = None, golden_device: str | None = None) -> RunOptions:
    """The engine options an executing command's flags say; the keywords override them (a resumed
    run's stored options, a session's golden cache; ``default_log_dir``: the logs' parent without
    ``--log-dir``, in place of ``reports/logs``).  A bad rules file or an absent accelerator
    (without ``--allow-absent-devices``), or a ``--golden-device`` that is absent: exit 2 before any case."""
    options.require_present(devices, args.allow_absent_devices)
    golden_device = options.golden_device(golden_device or args.golden_device)
    return options.run_options(options.Settings(
        devices=tuple(devices),
        kernel_paths=tuple(args.kernel_path if kernel_paths is None else kernel_paths),
        golden_cache=golden_cache if golden_cache is not None
        else options.golden_cache(args.golden_cache, args.no_golden_cache),
        golden_dtype=golden_dtype or args.golden_dtype, golden_device=golden_device, log_dir=args.log_dir, log_root=default_log_dir,
        rules=tuple(args.rules), tier=tier or args.tier, exitfirst=exitfirst, max_log_bytes=args.max_log_mb << 20,
        device_logs=getattr(args, "device_logs", False), blocking_rerun=not getattr(args, "no_blocking_rerun", False),
        intermediates=intermediates_mode(args), isolation=getattr(args, "isolation", "warm")))


def intermediates_mode(args) -> str:
    """--intermediates as given, else the command's default: off for a flake hunt (it counts launches, and
    a rerun of each failing iteration would double its time) and for an audit (its mutants are meant to
    fail: each would run twice), on-failure for every other command."""
    given = getattr(args, "intermediates", None)
    return given or ("off" if getattr(args, "command", "") in ("flake", "audit") else "on-failure")


@contextlib.contextmanager
def session_golden_cache(args) -> Iterator[str | None]:
    """The golden cache directory of a multi-run session: the usual one, or with --no-golden-cache
    a temporary one for this session only (each distinct golden is still computed once)."""
    if not args.no_golden_cache:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="harness-goldens-") as tmp:
        yield tmp


def ref_setup(args) -> RefSetup:
    """``--env`` adds to the default templates (one setting a variable a default sets replaces that default)."""
    return RefSetup(repo=Path(args.repo), env_templates=with_defaults(DEFAULT_ENV, args.env_templates or ()),
                    build=args.build, build_timeout_s=args.build_timeout, cache_dir=args.worktree_cache)


def env_line(env: Mapping[str, str]) -> str:
    """A ref's effective environment (the expanded templates), as a shell would set it."""
    return "env: " + " ".join(f"{key}={shlex.quote(value)}" for key, value in env.items())


def plain(args) -> bool:
    return args.no_progress or args.no_color or not sys.stdout.isatty()


def note_outputs(reporter: Reporter, args, run_id: str, store: Store) -> None:
    for path in (args.json_path, args.junit, args.markdown, args.html):
        if path:
            reporter.note(f"wrote {path}")
    if not args.no_store:
        reporter.note(f"run {run_id} stored in {store.path}")


# Flags that say how to run or what to write, not what runs: a resumed run takes them again.
_RESUME_VALUE_FLAGS = (("--golden-cache", "golden_cache"), ("--json", "json_path"), ("--junit", "junit"),
                       ("--markdown", "markdown"), ("--html", "html"))
_RESUME_SWITCHES = (("--no-golden-cache", "no_golden_cache"), ("--no-progress", "no_progress"),
                    ("--no-color", "no_color"), ("--allow-nondeterministic", "allow_nondeterministic"),
                    ("--changed", "changed"))


def resume_command(args, run_id: str, store: Store) -> str:
    """The one line that continues an interrupted ``flake``, ``compare`` or ``bisect`` (the store holds
    the plan).  Paths are absolute, so the line works from any directory."""
    argv = ["harness", args.command, "--resume", run_id, "--store", str(Path(store.path).resolve())]
    for flag, dest in _RESUME_VALUE_FLAGS:
        if getattr(args, dest, None):
            argv += [flag, str(Path(getattr(args, dest)).resolve())]
    for path in getattr(args, "rules", ()):
        argv += ["--rules", str(Path(path).resolve())]
    argv += [flag for flag, dest in _RESUME_SWITCHES if getattr(args, dest, False)]
    return shlex.join(argv)
