"""The document's provenance and flake statistics as plain text: where and on what its results
were produced (``provenance_items``), and a hunt's statistics per case (``flake_rows``).  Plain
text pairs and rows that every renderer lays out and escapes; no rendering, no torch.
"""
from __future__ import annotations

from typing import Any, Mapping

from harness.document import kind_of, results_of
from harness.document.table import cell_text, label_details, short_sha
from harness.formats import pct
from harness.outcomes import Result

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
