"""``harness report`` and ``harness history``: what the store (or a --json file) holds, rendered."""
from __future__ import annotations

import statistics

import datetime as _dt
import json
import sys
from pathlib import Path

from harness.cli.common import EXIT_FAILED, EXIT_OK, outputs, store_path
from harness.errors import UsageError
from harness.outcomes import Outcome
from harness.reports.audit_text import is_audit_document, write_audit
from harness.reports.audit_text import render_markdown as render_audit_markdown
from harness.document import load_document
from harness.latency.statistics import us
from harness.reports.history import case_history, stored_document
from harness.reports.writers import write_outputs
from harness.shard.merge import merge
from harness.store import Store


def cmd_report(args) -> int:
    if args.merge:
        if args.source:
            raise UsageError("give a SOURCE to re-render or --merge SOURCES, not both")
        doc = merge(args.merge, force=args.force, command=sys.argv)
        for warning in doc.get("warnings", []):
            print(f"harness: warning: {warning}", file=sys.stderr)
    else:
        doc = _stored_document(args)
    if is_audit_document(doc):
        return _report_audit(args, doc)
    asked = outputs(args)
    if not asked.any():     # nothing asked for: the Markdown summary on stdout
        from harness.reports.markdown import render_markdown
        print(render_markdown(doc))
    for path in write_outputs(asked, doc):
        print(f"wrote {path}", file=sys.stderr)
    summary = doc.get("summary") or {}
    return EXIT_FAILED if summary.get("failed") else EXIT_OK


def _report_audit(args, doc: dict) -> int:
    """An audit's document (from the store or its --json), as ``harness audit`` rendered it."""
    asked = outputs(args)
    if asked.junit:
        raise UsageError("--junit: an audit has no JUnit form (it writes --json, --markdown and --html)")
    if not asked.any():
        print(render_audit_markdown(doc), end="")
    for fmt, path in (("json", asked.json), ("markdown", asked.markdown), ("html", asked.html)):
        if path:
            write_audit(path, fmt, doc)
            print(f"wrote {path}", file=sys.stderr)
    return EXIT_OK if doc.get("killed") == doc.get("applicable") else EXIT_FAILED


def _stored_document(args) -> dict:
    if args.source and Path(args.source).is_file():
        try:
            return load_document(args.source)
        except (OSError, ValueError) as exc:
            audit = _audit_file(args.source)
            if audit is not None:
                return audit
            raise UsageError(f"{args.source}: not a harness report document ({exc})") from None
    path = store_path(args)
    if not Path(path).exists():
        raise UsageError(f"no store at {path} (and {args.source!r} is not a file)" if args.source
                         else f"no store at {path}: give a run id with --store, or a --json file")
    with Store(path) as store:
        run_id = args.source
        if run_id is None:
            latest = store.runs(limit=50)
            top = [r for r in latest if r["parent_id"] is None]
            if not top:
                raise UsageError(f"no runs in {store.path}")
            run_id = top[0]["run_id"]
        run = store.run(run_id)
        if run is not None and run["kind"] == "audit" and is_audit_document(run["extra"].get("audit")):
            return run["extra"]["audit"]
        return stored_document(store, run_id)


def _audit_file(path: str) -> dict | None:
    """The audit document in ``path`` (``harness audit --json``), or None."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return doc if is_audit_document(doc) else None


def cmd_history(args) -> int:
    with Store(store_path(args)) as store:
        entries = case_history(store, args.pattern, args.kind, mutants=args.mutants)
    if not entries:
        kind = f" (--kind {args.kind})" if args.kind else ""
        raise UsageError(f"no stored results for a case matching {args.pattern!r}{kind} in {store.path}")
    print("when                 run                    kind         device    ref                 runs  "
          "outcomes        fail rate  latency      case")
    for entry in entries[-args.limit:]:
        print(_history_line(entry.row, ""))
        for step in entry.steps:
            print(_history_line(step, "  "))
        for mutant in entry.mutants:       # another kernel's runs: named, with the case they ran
            print(_history_line({**mutant, "case_id": f"{mutant['case_id']} [mutant {mutant['mutant']}]"}, "  ",
                                named=True))
    return EXIT_OK


def _history_line(g: dict, indent: str, *, named: bool = False) -> str:
    """One row; a session's steps are indented under it (``indent``) and leave their case id to it
    (an audit's mutants, ``named``, keep theirs: it says which mutant ran)."""
    when = _dt.datetime.fromtimestamp(g["started"]).strftime("%Y-%m-%d %H:%M:%S")
    ref = g["ref"] or "-"
    if ".." in ref:                 # a bisect's range, good..bad
        ref = "..".join(end[:8] for end in ref.split("..", 1))
    ref += f" {g['ref_sha'][:8]}" if g.get("ref_sha") else ""
    ran = g["total"] - g["outcomes"].get(Outcome.SKIPPED.value, 0)
    rate = f"{100.0 * g['failed'] / ran:.1f}%" if ran else "-"
    counts = ", ".join(f"{n} {label}" for label, n in sorted(g["counts"].items(), key=lambda kv: -kv[1]))
    case = g["case_id"] if named or not indent else ""
    return (f"{when}  {indent + g['run_id']:<22} {g['kind'] or '-':<12} {','.join(g['devices']) or '-':<9} "
            f"{ref:<19} {g['total']:>4}  {counts:<15} {rate:>9}  {_latency(g):<11}  {case}").rstrip()


def _latency(g: dict) -> str:
    """The median of the timed results' medians (``--latency``), ``-`` when none was timed."""
    found = g.get("latency_s") or []
    return us(statistics.median(found)) if found else "-"
