"""The report document, read once, and what every renderer shares.

A report document is the dict ``harness.document.build_document`` builds (and
``--json`` writes; docs/json-schema.md), plus optional keys other commands add:
``kind`` (``run``, ``flake``, ``compare``, ``bisect``, ``merge``), ``run_id``,
``refs`` (the kernel-library checkouts: ``name``, ``sha``, ``subject``,
``build``), ``flake`` (per-case hunt summaries) and ``shards``.  Results may
carry ``ref``.  Everything here is pure: no rendering, no torch.

``outcome_table`` is the engineers' table of a document (``harness.document.table``;
one row per case, one column per ref, device or a single column; cells
``0/5 PASS, 5/5 FAIL_507018``): the Markdown and HTML reports build it here.
``failure_groups`` is their list of failures: one entry per case and label.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from harness.formats import pct
from harness.document.table import Column, OutcomeTable, cell_text, label_details, passed_text, tabulate
from harness.outcomes import Outcome, Result

__all__ = [
    "FLAKE_COLUMNS", "FailureGroup", "device_text", "failing", "failure_groups", "flake_confidence", "flake_rows",
    "kind_of", "load_document", "outcome_table", "provenance_items", "ref_text", "ref_title", "results_of",
    "short_sha", "totals_text",
]



# -- reading ----------------------------------------------------------------------

def load_document(path: str | os.PathLike) -> dict:
    """A ``--json`` file as a dict; ValueError naming the file when it is not one."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable report document ({type(exc).__name__}: {exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise ValueError(f"{path}: not a report document (no \"results\" list)")
    return doc


def results_of(doc: Mapping[str, Any]) -> list[Result]:
    """The document's results as ``Result`` records (unknown keys ignored, ``ref`` kept)."""
    return [Result.from_json(r) for r in doc.get("results", [])]


def kind_of(doc: Mapping[str, Any]) -> str:
    kind = doc.get("kind") or "run"
    return kind if isinstance(kind, str) else "run"


def short_sha(sha: Any) -> str:
    return str(sha or "")[:7]


def ref_title(ref: Mapping[str, Any]) -> str:
    """``upstream 68889bc``: how a ref heads a column."""
    sha = short_sha(ref.get("sha"))
    name = str(ref.get("name") or sha or "?")
    return f"{name} {sha}" if sha and sha != name else name


def failing(results: Iterable[Result]) -> list[Result]:
    return [r for r in results if r.outcome.failed]


def totals_text(results: Iterable[Result]) -> str:
    """``5 passed, 11 failed, 1 skipped``; near-ties are passes, noted: ``10 passed (9 clean, 1 near-tie)``."""
    results = list(results)
    near_tie = sum(r.outcome is Outcome.NEAR_TIE for r in results)
    return (f"{passed_text(sum(r.outcome.passed for r in results), near_tie)}, "
            f"{sum(r.outcome.failed for r in results)} failed, "
            f"{sum(r.outcome is Outcome.SKIPPED for r in results)} skipped")


# -- failures, one entry per case and label ------------------------------------------

MAX_LISTED_LOGS = 8           # other logs of a group named before "and N more"


def _runs(values: list[int]) -> str:
    """``0-4, 7``: sorted integers as ranges."""
    values = sorted(set(values))
    spans: list[list[int]] = []
    for v in values:
        if spans and v == spans[-1][1] + 1:
            spans[-1][1] = v
        else:
            spans.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


@dataclass(frozen=True)
class FailureGroup:
    """The failing results of one case with one label (repeats, devices, refs), in document order.

    ``first`` is the representative: its summary, report, figures and log are shown; the
    others are counted, placed (``where``) and their logs named (``other_logs``)."""

    case_id: str
    label: str
    results: tuple[Result, ...]

    @property
    def first(self) -> Result:
        return self.results[0]

    @property
    def count(self) -> int:
        return len(self.results)

    @property
    def times(self) -> str:
        """``×8``, or ``""`` for a single failure."""
        return f"×{self.count}" if self.count > 1 else ""

    @property
    def detail(self) -> str:
        """The failures' key detail over the group (``out 12.5%-25.0% bad``): ``label_details``."""
        return label_details(self.results).get(self.label, "")

    @property
    def same_summary(self) -> bool:
        return len({r.summary for r in self.results}) == 1

    @property
    def repeats(self) -> str:
        """``0-4, 7``: the group's repeat indices as ranges."""
        return _runs([r.repeat for r in self.results])

    @property
    def where(self) -> str:
        """``npu:0, ref fix, repeat 0, seed 7`` / ``npu:0, npu:1, refs up, fix, repeats 0-4, seed 1234``."""
        rs = self.results
        devices = list(dict.fromkeys(r.device for r in rs if r.device))
        refs = list(dict.fromkeys(r.ref for r in rs if r.ref))
        seeds = list(dict.fromkeys(r.seed for r in rs if r.seed is not None))
        parts = list(devices)
        if refs:
            parts.append(("ref " if len(refs) == 1 else "refs ") + ", ".join(refs))
        parts.append(("repeat " if len({r.repeat for r in rs}) == 1 else "repeats ") + self.repeats)
        if len(seeds) == 1:
            parts.append(f"seed {seeds[0]}")
        elif len(seeds) <= 4 and seeds:
            parts.append("seeds " + ", ".join(map(str, seeds)))
        elif seeds:
            parts.append(f"{len(seeds)} seeds")
        return ", ".join(parts)

    @property
    def log(self) -> str | None:
        """The representative's log, else the first log any of the group has."""
        return self.first.log or next((r.log for r in self.results if r.log), None)

    @property
    def other_logs(self) -> str:
        """The group's other logs, compactly: file names when they share the representative's
        folder (``in /x/logs: a.log, b.log``), at most ``MAX_LISTED_LOGS`` and how many more."""
        main = self.log
        others = [log for log in dict.fromkeys(r.log for r in self.results if r.log) if log != main]
        if not others:
            return ""
        folder = os.path.dirname(main or "")
        shown = others[:MAX_LISTED_LOGS]
        if folder and all(os.path.dirname(log) == folder for log in shown):
            text = "in the same folder: " + ", ".join(os.path.basename(log) for log in shown)
        else:
            text = ", ".join(shown)
        return text + (f" and {len(others) - len(shown)} more" if len(others) > len(shown) else "")


def result_warnings(results: Iterable[Result]) -> list[tuple[str, str]]:
    """``(case id, warning)`` for every result's ``warnings``, once each (a hunt's repeats say it
    once), in the order the results came."""
    return list(dict.fromkeys((r.case_id, w) for r in results for w in r.warnings))


def failure_groups(results: Iterable[Result]) -> list[FailureGroup]:
    """The failing results grouped by (case id, label), in order of each group's first failure."""
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in failing(results):
        groups.setdefault((r.case_id, r.label), []).append(r)
    return [FailureGroup(case_id, label, tuple(rs)) for (case_id, label), rs in groups.items()]


# -- the table -------------------------------------------------------------------

def outcome_table(source: Mapping[str, Any] | Iterable[Result]) -> OutcomeTable:
    """The engineers' table of a document (its ``refs`` first among the columns) or of bare results."""
    if not isinstance(source, Mapping):
        return tabulate(source)
    refs = [r for r in source.get("refs") or [] if isinstance(r, Mapping)]
    return tabulate(results_of(source), [Column(str(r.get("name") or short_sha(r.get("sha"))), ref_title(r))
                                         for r in refs])


# -- provenance and flake summaries, as plain text pairs (renderers escape) ----------------

_DEVICE_KEYS = (("device_name", ""), ("torch", "torch "), ("torch_npu", "torch-npu "), ("cann", "CANN "),
                ("cuda", "CUDA "), ("cuda_driver", "driver "))


def _utc(ts: Any) -> str | None:
    if not isinstance(ts, (int, float)) or isinstance(ts, bool):
        return None
    import datetime
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def device_text(info: Mapping[str, Any]) -> str:
    """``NVIDIA H200, torch 2.11.0, CUDA 12.8, driver 570.1`` from a worker's device report."""
    parts = [f"{prefix}{info[key]}" for key, prefix in _DEVICE_KEYS if info.get(key)]
    parts += [f"{k} {v}" for k, v in sorted(info.items())
              if k not in dict(_DEVICE_KEYS) and isinstance(v, (str, int, float)) and not isinstance(v, bool)]
    return ", ".join(parts)


def ref_text(ref: Mapping[str, Any]) -> str:
    """``68889bc fix the barrier (build failed: /logs/build.log)``."""
    text = short_sha(ref.get("sha"))
    if ref.get("subject"):
        text += f" {ref['subject']}"
    build = ref.get("build")
    if isinstance(build, Mapping) and build.get("ok") is False:
        text += " (build failed" + (f": {build['log']}" if build.get("log") else "") + ")"
    return text.strip()


def provenance_items(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Where and on what a document's results were produced, as (key, text) pairs.

    The kernels the results ran, devices with what their workers reported (torch,
    torch-npu, CANN, CUDA), host, harness version and revision, refs, the relevant environment
    (``PTO2_*``, ``ASCEND_*``, ...), kernel paths, command, times, shards.
    """
    items: list[tuple[str, str]] = [("kind", kind_of(doc))]
    if doc.get("run_id"):
        items.append(("run", str(doc["run_id"])))
    # Which kernel ran: the cases' own, or the one --kernel put in every case.
    kernels = dict.fromkeys(r.get("kernel") for r in doc.get("results", [])
                            if isinstance(r, Mapping) and r.get("kernel"))
    if kernels:
        items.append(("kernel", ", ".join(map(str, kernels))))
    prov = doc.get("provenance") if isinstance(doc.get("provenance"), Mapping) else {}
    run = prov.get("run") if isinstance(prov.get("run"), Mapping) else {}
    devices = prov.get("devices") if isinstance(prov.get("devices"), Mapping) else {}
    for name in doc.get("devices") or list(devices):
        info = devices.get(name)
        items.append((f"device {name}", device_text(info) if isinstance(info, Mapping) else "(no report)"))
    for name in devices:
        if name not in (doc.get("devices") or []):
            items.append((f"device {name}", device_text(devices[name]) if isinstance(devices[name], Mapping) else ""))
    if doc.get("host") or run.get("host"):
        items.append(("host", str(doc.get("host") or run.get("host"))))
    harness = str(doc.get("harness_version") or run.get("harness_version") or "")
    git = run.get("harness_git")
    if isinstance(git, Mapping) and git.get("sha"):
        harness += f" (git {short_sha(git['sha'])}{', dirty' if git.get('dirty') else ''})"
    if harness:
        items.append(("harness", harness))
    for key in ("python", "platform"):
        if run.get(key):
            items.append((key, str(run[key])))
    for ref in doc.get("refs") or []:
        if isinstance(ref, Mapping):
            items.append((f"ref {ref.get('name') or short_sha(ref.get('sha'))}", ref_text(ref)))
    paths = run.get("kernel_paths")
    if isinstance(paths, Mapping):
        for path, rev in paths.items():
            rev_text = f"{short_sha(rev.get('sha'))} {rev.get('subject') or ''}".strip() \
                if isinstance(rev, Mapping) else ""
            items.append(("kernel path", f"{path} {rev_text}".strip()))
    env = run.get("env")
    if isinstance(env, Mapping):
        items += [(f"env {k}", str(v)) for k, v in sorted(env.items())]
    command = doc.get("command")
    if isinstance(command, list) and command:
        import shlex
        items.append(("command", shlex.join(str(c) for c in command)))
    for key in ("started", "finished"):
        when = _utc(doc.get(key))
        if when:
            items.append((key, when))
    shards = doc.get("shards")
    if isinstance(shards, list) and shards:
        items.append(("shards", f"{len(shards)} merged"))
    return items


def _interval(v: Any) -> str:
    if isinstance(v, (list, tuple)) and len(v) == 2:
        return f"[{pct(v[0])}, {pct(v[1])}]"
    return "-"


FLAKE_COLUMNS = ("case", "runs", "outcomes", "failure rate", "Wilson", "exact (Clopper-Pearson)",
                 "determinism")


def flake_rows(doc: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """One row of plain text per case of ``doc["flake"]``, in ``FLAKE_COLUMNS`` order."""
    flake = doc.get("flake")
    if not isinstance(flake, Mapping):
        return []
    runs: dict[str, list[Result]] = {}
    for r in results_of(doc):
        runs.setdefault(r.case_id, []).append(r)
    rows = []
    for case_id, s in flake.items():
        if not isinstance(s, Mapping):
            continue
        counts = s.get("counts") if isinstance(s.get("counts"), Mapping) else {}
        total = s.get("total", sum(counts.values()))
        failures = s.get("failures")
        rate = pct(s.get("rate"))
        if failures is not None:
            rate += f" ({failures}/{total})"
        det = s.get("determinism")
        det_text = str(det.get("summary") or "") if isinstance(det, Mapping) else "not checked"
        rows.append((str(case_id), str(total), cell_text(counts, label_details(runs.get(str(case_id), ()))), rate, _interval(s.get("wilson")),
                     _interval(s.get("clopper_pearson")), det_text))
    return rows


def flake_confidence(doc: Mapping[str, Any]) -> str:
    """``95%``: the level of the flake intervals (from the summaries, else the default)."""
    for s in (doc.get("flake") or {}).values() if isinstance(doc.get("flake"), Mapping) else []:
        if isinstance(s, Mapping) and isinstance(s.get("conf"), (int, float)):
            return f"{100 * s['conf']:g}%"
    return "95%"
