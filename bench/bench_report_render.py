"""Report rendering: JUnit XML, Markdown and the one-file HTML for a large document.

    python bench/bench_report_render.py [--results 5000] [--failures 200] [--repeats 3] [--keep DIR]

Builds a compare-style document (two refs, cases x 5 repeats) of ``--results``
results of which ``--failures`` fail, with what real runs carry: comparison
metrics from real ``ratio_allclose`` calls (2-D maps, localisation, reports)
on every result, qwen3-sized attention outputs (batch 16 x 40 heads) with a
bad head, a bad batch row or noise, caches with a bad page, device faults and
hangs, and a log file on disk for every result (failing logs of ~300 lines,
some with ANSI colours and control characters).  The document goes through
JSON and back first, as ``harness report`` would read it.  Building it is not
timed.

Then it times, as the median of ``--repeats`` rounds, each renderer writing
its file (JUnit with log tails, Markdown, HTML with a heatmap per failing
buffer drawn by a fresh figure renderer), and prints the total and the HTML
size against the goals of issue 6: total <= 10 s, HTML <= 20 MB.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.worker.ratio_allclose import ratio_allclose  # noqa: E402
from harness.outcomes import Outcome, Result  # noqa: E402
from harness.reports.html import write_html  # noqa: E402
from harness.document import build_document  # noqa: E402
from harness.reports.junit import write_junit  # noqa: E402
from harness.reports.markdown import render_markdown  # noqa: E402
from harness.files import write_text  # noqa: E402

GOAL_TOTAL_S = 10.0
GOAL_HTML_MB = 20.0
TOL = dict(atol=3e-3, rtol=3e-3, max_error_ratio=0.005)


def _attention_metrics(g: torch.Generator, mode: str) -> tuple[dict, str]:
    """compare metrics + report of a [16, 40, 128] output: clean, one bad head/row, or noise."""
    expected = torch.randn(16, 40, 128, generator=g)
    actual = expected + 1e-4 * torch.randn(16, 40, 128, generator=g)
    if mode == "head":
        actual[:, int(torch.randint(40, (1,), generator=g))] += 1.0
    elif mode == "row":
        actual[int(torch.randint(16, (1,), generator=g))] += 1.0
    elif mode == "noise":
        actual[torch.rand(actual.shape, generator=g) < 0.05] += 1.0
    c = ratio_allclose(actual, expected, name="out", axes=("batch", "head", None), **TOL)
    return c.to_metrics(), c.report()


def _cache_metrics(g: torch.Generator, bad: bool, rows: int = 16, page: int = 128) -> tuple[dict, str]:
    """A cache compared as checks.py does: [layer, row, kv_head, D] rows grouped into pages."""
    expected = torch.randn(1, rows, 8, 128, generator=g)
    actual = expected.clone()
    slots = torch.randperm(400 * page, generator=g)[:rows]
    if bad:
        actual[0, int(torch.randint(rows, (1,), generator=g))] += 1.0
    c = ratio_allclose(actual, expected, name="k_cache rows", axes=("layer", "row", "kv_head", None),
                       groups={"page": (1, slots // page)}, **TOL)
    return c.to_metrics(), c.report()


def _log(path: Path, lines: int, failing: bool, i: int) -> str:
    body = [f"[{k:05d}] step {k}: launching kernel grid=(16,40) block=128" for k in range(lines)]
    if failing:
        body += ["\x1b[31mE rtKernelLaunch failed\x1b[0m \x07", f"ACL error 507018 at case {i}",
                 "EZ9999: aicore exception <pc 0x1234> | stream 3"]
    path.write_text("\n".join(body) + "\n")
    return str(path)


def build(n_results: int, n_failures: int, tmp: Path) -> dict:
    g = torch.Generator().manual_seed(0)
    logs = tmp / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    clean_out, _ = _attention_metrics(g, "clean")
    clean_cache, _ = _cache_metrics(g, False)
    refs = ("upstream", "fix")
    repeats = 5
    n_cases = max(1, n_results // (repeats * len(refs)))
    step = max(1, n_results // max(n_failures, 1))
    results = []
    i = 0
    for case in range(n_cases):
        matrix = f"decode-m{case % 10}"
        case_id = f"{matrix}[batch=16,seq_lens=uniform(1,3756),slot_mode=arange,seed={case}]"
        for ref in refs:
            for rep in range(repeats):
                fail = n_failures and i % step == step - 1 and sum(r.outcome.failed for r in results) < n_failures
                kind = (i // step) % 4
                log = _log(logs / f"{i}.log", 300 if fail else 20, bool(fail), i)
                common = dict(matrix=matrix, op="fused_rope_decode_attention", kernel="pkg.attn:fused",
                              seed=case, duration_s=0.05, repeat=rep, device=f"npu:{i % 8}", log=log,
                              params={"batch": 16, "seq_lens": "uniform(1,3756)", "slot_mode": "arange"},
                              ref=ref)
                if not fail:
                    metrics = {"compare": {"out": clean_out, "query": clean_out, "k_cache": clean_cache,
                                           "v_cache": clean_cache}, "golden_cache_hit": True}
                    results.append(Result(case_id, Outcome.PASS, metrics=metrics, **common))
                elif kind == 0:
                    results.append(Result(case_id, Outcome.DEVICE_FAULT, code=507018, sticky=True,
                                          summary="device fault 507018 (aicore exception)",
                                          report="Traceback (most recent call last):\n  RuntimeError: ACL 507018",
                                          **common))
                elif kind == 3:
                    results.append(Result(case_id, Outcome.HANG, summary="no answer after 60 s",
                                          report="Thread 0x1 (most recent call first):\n  File kernel.py", **common))
                else:
                    out, out_report = _attention_metrics(g, ("head", "row", "noise")[i % 3])
                    cache, cache_report = _cache_metrics(g, True)
                    metrics = {"compare": {"out": out, "query": clean_out, "k_cache": cache,
                                           "v_cache": clean_cache}}
                    results.append(Result(case_id, Outcome.MISMATCH, metrics=metrics,
                                          summary=f"out: {out['bad_count']} / {out['numel']} elements bad",
                                          report="[MISMATCH] out\n" + out_report + "\n[MISMATCH] k_cache\n"
                                          + cache_report, **common))
                i += 1
    provenance = {"run": {"host": "bench", "env": {"PTO2_RING_HEAP": "1073741824"}},
                  "devices": {f"npu:{d}": {"torch": "2.1.0", "torch_npu": "2.1.0.post3", "cann": "8.0.RC1",
                                           "device_name": "Ascend910B3"} for d in range(8)}}
    doc = build_document(results, started=time.time(), devices=[f"npu:{d}" for d in range(8)],
                         command=["harness", "compare", "cases"], provenance=provenance, kind="compare",
                         run_id="bench", refs=[{"name": "upstream", "sha": "68889bc" + "0" * 33, "subject": "up"},
                                               {"name": "fix", "sha": "65ae4d5" + "0" * 33, "subject": "fix"}])
    return json.loads(json.dumps(doc))      # as read back from --json


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=5000)
    parser.add_argument("--failures", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="write the reports here (default: a temporary directory)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp_name:
        tmp = Path(tmp_name)
        out = args.keep or tmp / "out"
        out.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        doc = build(args.results, args.failures, tmp)
        failing = sum(r["outcome"] not in ("PASS", "NEAR_TIE", "SKIPPED") for r in doc["results"])
        print(f"document: {len(doc['results'])} results, {failing} failing, "
              f"{len(json.dumps(doc)) / 2**20:.1f} MiB as JSON (built in {time.perf_counter() - start:.1f} s, "
              f"not timed); median of {args.repeats} rounds, torch {torch.__version__}")
        renderers = {
            "junit": lambda: write_junit(out / "report.xml", doc),
            "markdown": lambda: write_text(out / "report.md", render_markdown(doc)),
            "html": lambda: write_html(out / "report.html", doc),
        }
        times: dict[str, list[float]] = {name: [] for name in renderers}
        for _ in range(args.repeats):
            for name, render in renderers.items():
                t0 = time.perf_counter()
                render()
                times[name].append(time.perf_counter() - t0)
        medians = {name: statistics.median(ts) for name, ts in times.items()}
        for name, path in (("junit", "report.xml"), ("markdown", "report.md"), ("html", "report.html")):
            size = (out / path).stat().st_size
            print(f"  {name:9s} {medians[name]:7.2f} s   {size / 2**20:7.2f} MiB   "
                  f"(first round, imports included: {times[name][0]:.2f} s)")
        total = sum(medians.values())
        first = sum(ts[0] for ts in times.values())
        html_mb = (out / "report.html").stat().st_size / 1e6
        images = (out / "report.html").read_text().count("<svg class=\"heatmap\"")
        print(f"  total     {total:7.2f} s   (goal <= {GOAL_TOTAL_S:g} s; first round {first:.2f} s)")
        print(f"  html size {html_mb:7.2f} MB  (goal <= {GOAL_HTML_MB:g} MB), {images} embedded figures")
        if args.keep:
            print(f"reports kept in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
