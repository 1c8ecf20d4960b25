"""The command line: ``harness list|run|flake|compare|bisect|bisect-run|ops|report|history|audit``.

The commands parse flags (``parser``), call the harness and print; ``main`` maps
errors to exit codes (README): ``UsageError`` is 2 with its one line, any other
``HarnessError`` (the store failed mid-run, ...) is 3 with its one line, anything
else is 3 with a traceback (a harness bug).  A closed stdout (``| head``) ends the
command quietly with 141, the shell's code for a command killed by SIGPIPE.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time

from harness import trace
from harness.cli.audit import cmd_audit
from harness.cli.bisect import GIT_BAD, GIT_GOOD, GIT_SKIP, cmd_bisect, cmd_bisect_run
from harness.cli.common import EXIT_INTERNAL, EXIT_SIGINT, EXIT_SIGTERM, EXIT_USAGE, check_output_flags, check_path_flags
from harness.cli.compare import cmd_compare
from harness.cli.dumps import cmd_dumps
from harness.cli.flake import cmd_flake
from harness.cli.ops import cmd_ops
from harness.cli.parser import build_parser
from harness.cli.runs import cmd_list, cmd_run
from harness.cli.stored import cmd_history, cmd_report
from harness.errors import HarnessError, UsageError
from harness.formats import printable

__all__ = ["main"]

EXIT_BROKEN_PIPE = 128 + 13       # as a shell reports a command that SIGPIPE ended

COMMANDS = {"list": cmd_list, "run": cmd_run, "flake": cmd_flake, "compare": cmd_compare, "bisect": cmd_bisect,
            "bisect-run": cmd_bisect_run, "ops": cmd_ops, "report": cmd_report, "history": cmd_history,
            "audit": cmd_audit, "dumps": cmd_dumps}


def main(argv: list[str] | None = None) -> int:
    command_line = argv is None
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bisect-run"]:
        return _git_safe(argv)
    args = build_parser().parse_args(argv)
    code = _dispatch(args)
    if command_line and code in (EXIT_SIGINT, EXIT_SIGTERM):
        _leave_promptly(code)
    return code


INTERRUPT_EXIT_S = 10.0


def _leave_promptly(code: int) -> None:
    """After an interrupt the command has said what it saved and closed its store, workers and golden
    process; the interpreter would still join every helper thread (an executor's, waiting on a
    process the interrupt cut short) and run the exit hooks (multiprocessing's joins its children)
    before it ends.  Give the threads ``INTERRUPT_EXIT_S``, then end with ``code``: an interrupted
    harness must end (a bisect stopped by SIGTERM once sat for minutes after printing how to resume
    it, 1 of 4 fresh CI runs)."""
    deadline = time.monotonic() + INTERRUPT_EXIT_S
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
    waiting = [t.name for t in threading.enumerate() if t.is_alive() and not t.daemon and t is not threading.main_thread()]
    if waiting:
        trace.log.debug("exit %d with helper threads still waiting: %s", code, ", ".join(waiting))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


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
    trace.enable(args.debug or trace.enabled_by_env())
    try:
        check_output_flags(args)
        check_path_flags(args)
        return COMMANDS[args.command](args)
    except UsageError as exc:
        print(f"harness: error: {printable(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except HarnessError as exc:  # the store failed mid-run (disk full, ...): not a harness bug
        print(f"harness: error: {printable(exc)}", file=sys.stderr)
        return EXIT_INTERNAL
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        return EXIT_SIGINT
    except BrokenPipeError:   # the reader of stdout went away (`harness history ... | head`): nothing to say
        _stdout_to_devnull()
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # the harness itself broke: say so, ask for a report
        import traceback
        traceback.print_exc()
        print(f"harness: internal error: {type(exc).__name__}: {printable(exc)} (this is a harness bug)",
              file=sys.stderr)
        return EXIT_INTERNAL


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what is still buffered
    does not fail on the closed pipe again ("Exception ignored ... BrokenPipeError")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
