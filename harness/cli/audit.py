"""``harness audit``: run a matrix with each mutation operator and say which bug classes it is blind to."""
from __future__ import annotations

import sys

from harness.audit.operators import parse_mutants
from harness.audit.session import run_audit
from harness.cli.common import (EXIT_FAILED, EXIT_INTERNAL, EXIT_OK, devices, engine_options, load_cases,
                                open_store, session_golden_cache)
from harness.errors import UsageError
from harness.formats import printable
from harness.reports.audit_text import render_text, write_audit


def cmd_audit(args) -> int:
    operators = parse_mutants(args.mutants)
    if args.junit:
        raise UsageError("--junit: harness audit writes --json, --markdown and --html")
    run_devices = devices(args)
    with open_store(args) as store, session_golden_cache(args) as goldens:
        cases = load_cases(args)
        options = engine_options(args, run_devices, golden_cache=goldens)
        audit = run_audit(cases, operators, options, store, command=sys.argv, delta=args.delta, sensitivity=args.sensitivity,
                          on_run=lambda name, n: print(printable(f"audit: {name} ({n} cases)"), flush=True))
        doc = audit.document()
        store.update_extra(audit.run_id, {"audit": doc})      # harness report RUN_ID renders it again
    print(printable(render_text(doc)), end="", flush=True)
    for fmt, path in (("json", args.json_path), ("markdown", args.markdown), ("html", args.html)):
        if path:
            write_audit(path, fmt, doc)
            print(printable(f"wrote {path}"))
    if not args.no_store:
        print(printable(f"audit run {audit.run_id} stored in {store.path}"))
    if audit.harness_broke:
        return EXIT_INTERNAL
    if args.min_score is not None:
        return EXIT_OK if audit.score.value >= args.min_score else EXIT_FAILED
    return EXIT_OK if audit.score.killed == audit.score.applicable else EXIT_FAILED
