"""The report document, read once, and what every renderer shares.

A report document is the dict ``json_report.build_document`` builds (and
``--json`` writes; docs/json-schema.md), plus optional keys other commands add:
``kind`` (``run``, ``flake``, ``compare``, ``bisect``, ``merge``), ``run_id``,
``refs`` (the kernel-library checkouts: ``name``, ``sha``, ``subject``,
``build``), ``flake`` (per-case hunt summaries) and ``shards``.  Results may
carry ``ref``.  Everything here is pure: no rendering, no torch.

``outcome_table`` is the engineers' table (one row per case, one column per
ref, device or a single column; cells ``0/5 PASS, 5/5 FAIL_507018``): the
Markdown and HTML reports and ``harness compare`` all build it here.
"""
from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from harness.formats import pct
from harness.outcomes import Outcome, Result

__all__ = [
    "FLAKE_COLUMNS", "Cell", "Column", "OutcomeTable", "Row", "cell_text", "clean_text",
    "device_text", "failing", "flake_confidence", "flake_rows", "kind_of", "label_counts",
    "load_document", "log_tail", "outcome_table", "provenance_items", "ref_text", "ref_title",
    "results_of", "short_sha",
]

PASS = Outcome.PASS.value
LOG_TAIL_LINES = 40
LOG_TAIL_BYTES = 8192


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


# -- counting -----------------------------------------------------------------------

def label_counts(results: Iterable[Result]) -> dict[str, int]:
    """Results per display label: PASS first, then by count (largest first), then by name."""
    return _ordered(Counter(r.label for r in results))


def _ordered(counts: Mapping[str, int]) -> dict[str, int]:
    items = sorted(counts.items(), key=lambda kv: (kv[0] != PASS, -kv[1], kv[0]))
    return dict(items)


def cell_text(counts: Mapping[str, int]) -> str:
    """``5/5 PASS`` / ``0/5 PASS, 5/5 FAIL_507018``: PASS always first, then the rest by count."""
    total = sum(counts.values())
    if not total:
        return "-"
    parts = [f"{counts.get(PASS, 0)}/{total} {PASS}"]
    parts += [f"{n}/{total} {label}" for label, n in _ordered(counts).items() if label != PASS and n]
    return ", ".join(parts)


@dataclass(frozen=True)
class Column:
    key: str          # the ref name, the device, or "" for the single column
    title: str        # ``upstream 68889bc``, ``npu:6``, ``result``


@dataclass(frozen=True)
class Cell:
    counts: dict[str, int]            # per label, ordered as in ``cell_text``
    failed: int                       # results whose outcome failed
    skipped: int

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def text(self) -> str:
        return cell_text(self.counts)

    @property
    def status(self) -> str:
        """``fail`` (any failure), ``pass`` (all passed), ``skip`` (nothing ran), ``mixed``, ``empty``."""
        if not self.total:
            return "empty"
        if self.failed:
            return "fail"
        if self.skipped == self.total:
            return "skip"
        return "pass" if not self.skipped else "mixed"


EMPTY_CELL = Cell({}, 0, 0)


@dataclass(frozen=True)
class Row:
    case_id: str
    matrix: str
    cells: dict[str, Cell]            # column key -> cell (absent: the case did not run there)

    def cell(self, key: str) -> Cell:
        return self.cells.get(key, EMPTY_CELL)

    @property
    def labels(self) -> list[str]:
        """Every label in the row, for filters."""
        return sorted({label for c in self.cells.values() for label in c.counts})

    @property
    def differs(self) -> bool:
        """The columns disagree (a different set of labels somewhere): what compare looks for."""
        return len({tuple(sorted(c.counts)) for c in self.cells.values()}) > 1


@dataclass(frozen=True)
class OutcomeTable:
    by: str                                       # "ref", "device" or "single"
    columns: tuple[Column, ...]
    matrices: tuple[tuple[str, tuple[Row, ...]], ...]   # in order of first appearance

    @property
    def rows(self) -> list[Row]:
        return [row for _, rows in self.matrices for row in rows]


def _columns(doc: Mapping[str, Any] | None, results: list[Result]) -> tuple[str, list[Column]]:
    refs = [r for r in (doc or {}).get("refs") or [] if isinstance(r, Mapping)]
    if refs or any(r.ref for r in results):
        columns, seen = [], set()
        for ref in refs:
            name = str(ref.get("name") or short_sha(ref.get("sha")))
            if name not in seen:
                seen.add(name)
                columns.append(Column(name, ref_title(ref)))
        for r in results:
            key = r.ref or ""
            if key not in seen:
                seen.add(key)
                columns.append(Column(key, key or "(no ref)"))
        return "ref", columns
    devices = list(dict.fromkeys(r.device for r in results))
    if len(devices) > 1:
        return "device", [Column(d, d or "(no device)") for d in devices]
    return "single", [Column("", devices[0] if devices and devices[0] else "result")]


def outcome_table(source: Mapping[str, Any] | Iterable[Result]) -> OutcomeTable:
    """The engineers' table of a document (or of bare results).

    Rows: case ids, grouped by matrix, both in order of first appearance.
    Columns: the refs (``doc["refs"]`` order, then any other ``ref`` a result
    names), else the devices when there are several, else one column.  A cell
    counts labels over every result of that case in that column (repeats,
    and devices when the columns are refs).
    """
    if isinstance(source, Mapping):
        doc, results = source, results_of(source)
    else:
        doc, results = None, list(source)
    by, columns = _columns(doc, results)
    counts: dict[str, dict[str, Counter]] = {}
    failed: Counter = Counter()
    skipped: Counter = Counter()
    matrix_of: dict[str, str] = {}
    for r in results:
        key = (r.ref or "") if by == "ref" else (r.device if by == "device" else "")
        counts.setdefault(r.case_id, {}).setdefault(key, Counter())[r.label] += 1
        matrix_of.setdefault(r.case_id, r.matrix or r.case_id.split("[", 1)[0])
        failed[r.case_id, key] += r.outcome.failed
        skipped[r.case_id, key] += r.outcome is Outcome.SKIPPED
    grouped: dict[str, list[Row]] = {}
    for case_id, per_column in counts.items():
        cells = {key: Cell(_ordered(c), failed[case_id, key], skipped[case_id, key])
                 for key, c in per_column.items()}
        grouped.setdefault(matrix_of[case_id], []).append(Row(case_id, matrix_of[case_id], cells))
    return OutcomeTable(by, tuple(columns), tuple((m, tuple(rows)) for m, rows in grouped.items()))


# -- text from outside: logs, messages ---------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
# Not allowed in XML 1.0 (and invisible or harmful in HTML and Markdown).
_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\ud800-\udfff\ufffe\uffff]")   # _ILLEGAL, CR, ESC


def clean_text(text: Any) -> str:
    """Printable text: ANSI colour codes dropped, CR/LF normalised, every other
    control character (and what XML 1.0 forbids) shown as ``\\xNN``/``\\uNNNN``."""
    text = str(text)
    if not _CONTROL.search(text):                 # the common case: nothing to do
        return text
    text = _ANSI.sub("", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _ILLEGAL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)


def log_tail(path: str | os.PathLike | None, lines: int = LOG_TAIL_LINES,
             max_bytes: int = LOG_TAIL_BYTES) -> str | None:
    """The last ``lines`` lines of a log (at most ``max_bytes`` read from its end), cleaned.

    None when there is no such file.  A line cut by the byte cap is dropped.
    """
    if not path:
        return None
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read(max_bytes)
    except OSError:
        return None
    text = data.decode("utf-8", errors="replace")
    parts = text.splitlines()
    if size > max_bytes and parts:
        parts = parts[1:]
    return clean_text("\n".join(parts[-lines:]))


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

    Devices with what their workers reported (torch, torch-npu, CANN, CUDA),
    host, harness version and revision, refs, the relevant environment
    (``PTO2_*``, ``ASCEND_*``, ...), kernel paths, command, times, shards.
    """
    items: list[tuple[str, str]] = [("kind", kind_of(doc))]
    if doc.get("run_id"):
        items.append(("run", str(doc["run_id"])))
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
        rows.append((str(case_id), str(total), cell_text(counts), rate, _interval(s.get("wilson")),
                     _interval(s.get("clopper_pearson")), det_text))
    return rows


def flake_confidence(doc: Mapping[str, Any]) -> str:
    """``95%``: the level of the flake intervals (from the summaries, else the default)."""
    for s in (doc.get("flake") or {}).values() if isinstance(doc.get("flake"), Mapping) else []:
        if isinstance(s, Mapping) and isinstance(s.get("conf"), (int, float)):
            return f"{100 * s['conf']:g}%"
    return "95%"
