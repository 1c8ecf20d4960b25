"""Report documents for the renderer tests: real comparison metrics, logs on disk, nasty strings.

``sample_document(tmp_path)`` builds a compare-style document (two refs,
repeats, every kind of outcome) whose texts carry what must be escaped:
``<script>``, ``|``, backticks, newlines, Markdown emphasis and link syntax,
control characters and ANSI colour codes.
"""
from __future__ import annotations

from pathlib import Path

import torch

from harness.worker.ratio_allclose import ratio_allclose
from harness.outcomes import Outcome, Result
from harness.document import build_document

NASTY_ID = "evil[name=<script>alert(1)</script>|x*y_z`tick`[a](b)]"
NASTY_SUMMARY = "out: | broken *row* _x_ `code` <b>bold</b>\nsecond line [link](http://x) & more"
NASTY_LOG = ("starting kernel\n\x1b[31mred text\x1b[0m and a NUL \x00 and bell \x07\n"
             "</pre><script>alert('log')</script>\n```\nfence breaker\n"
             "ACL error 507018: aicore exception\n")


def mismatch_metrics(bad_head: int | None = 2, bad_row: int | None = None, batch: int = 4,
                     heads: int = 8, name: str = "out") -> tuple[dict, str]:
    """Real ``compare`` metrics and report for an attention output with one wrong head/row."""
    g = torch.Generator().manual_seed(0)
    expected = torch.randn(batch, heads, 16, generator=g)
    actual = expected.clone()
    if bad_head is not None:
        actual[:, bad_head] += 1.0
    if bad_row is not None:
        actual[bad_row] += 1.0
    c = ratio_allclose(actual, expected, atol=3e-3, rtol=3e-3, max_error_ratio=0.005, name=name,
                       axes=("batch", "head", None))
    return c.to_metrics(), c.report()


def cache_metrics(bad_page: int = 1, page_size: int = 4, rows: int = 16) -> tuple[dict, str]:
    g = torch.Generator().manual_seed(1)
    expected = torch.randn(1, rows, 2, 8, generator=g)
    actual = expected.clone()
    actual[0, bad_page * page_size:(bad_page + 1) * page_size] += 1.0
    c = ratio_allclose(actual, expected, atol=3e-3, rtol=3e-3, max_error_ratio=0.005, name="k_cache rows",
                       axes=("layer", "row", "kv_head", None),
                       groups={"page": (1, torch.arange(rows) // page_size)})
    return c.to_metrics(), c.report()


def sample_results(tmp_path: Path) -> list[Result]:
    logs = tmp_path / "logs"
    logs.mkdir(parents=True, exist_ok=True)

    def log(name: str, text: str) -> str:
        path = logs / name
        path.write_bytes(text.encode("utf-8", errors="surrogateescape"))
        return str(path)

    out_metrics, out_report = mismatch_metrics()
    cache_m, cache_report = cache_metrics()
    results = []
    decode = "decode-rope-kv[batch=16,seq_lens=uniform(1,3756),slot_mode=arange,seed=1234]"
    for ref in ("upstream", "fix"):
        for rep in range(5):
            if ref == "upstream":
                results.append(Result(
                    decode, Outcome.DEVICE_FAULT, matrix="decode-rope-kv", op="rope_kv_write", kernel="pkg.mod:fn",
                    seed=1234, code=507018, summary="device fault 507018 (aicore exception)",
                    metrics={"rule": "npu_acl_code", "fault_name": "ACL_ERROR_RT_AICPU_EXCEPTION"},
                    report="Traceback (most recent call last):\n  RuntimeError: ACL error 507018",
                    duration_s=0.5, repeat=rep, device="npu:0", ref=ref,
                    log=log(f"decode-{ref}-{rep}.log", NASTY_LOG), params={"batch": 16, "slot_mode": "arange"},
                    sticky=True))
            else:
                results.append(Result(decode, Outcome.PASS, matrix="decode-rope-kv", seed=1234, duration_s=0.25,
                                      repeat=rep, device="npu:0", ref=ref, params={"batch": 16}))
    for ref in ("upstream", "fix"):
        results.append(Result(
            "paged-attn[batch=4]", Outcome.MISMATCH, matrix="paged-attn", op="paged_decode_attention",
            seed=7, summary="out: 64 / 512 elements bad (12.5%), allowed 3", report="[MISMATCH] out\n" + out_report,
            metrics={"compare": {"out": out_metrics}}, duration_s=0.1, device="npu:0", ref=ref,
            log=log(f"paged-{ref}.log", "ok\n" * 100 + "last line\n"), params={"batch": 4}))
    results.append(Result(
        "cache[page=1]", Outcome.MISMATCH, matrix="paged-attn", seed=3, summary="k_cache rows: page 1 wrong",
        report=cache_report, metrics={"compare": {"k_cache": cache_m}}, device="npu:1", ref="fix"))
    results.append(Result(NASTY_ID, Outcome.MISMATCH, matrix="evil|matrix", seed=1, summary=NASTY_SUMMARY,
                          report="report with <script>alert(2)</script> and ``` fences\n| a | b |",
                          device="npu:0", ref="upstream", log=log("evil.log", NASTY_LOG),
                          params={"name": "<script>alert(1)</script>", "pipe": "a|b"}))
    results.append(Result("hang-case[x=1]", Outcome.HANG, matrix="paged-attn", summary="timed out after 60 s",
                          device="npu:0", ref="fix", log=str(tmp_path / "missing.log")))
    results.append(Result("skipped-case[x=1]", Outcome.SKIPPED, matrix="paged-attn",
                          summary="torch-npu is not installed", device="npu:0", ref="fix"))
    results.append(Result("broken[x=1]", Outcome.HARNESS_ERROR, matrix="paged-attn",
                          summary="golden raised KeyError", report="Traceback ...", device="npu:0", ref="fix"))
    return results


def sample_document(tmp_path: Path, kind: str = "compare", **extra) -> dict:
    results = sample_results(tmp_path)
    provenance = {
        "run": {"host": "ci-runner-3", "python": "3.11.9", "harness_version": "0.1.0",
                "harness_git": {"sha": "0123456789abcdef", "subject": "x", "dirty": True},
                "env": {"PTO2_RING_HEAP": "1073741824", "ASCEND_HOME_PATH": "/usr/local/Ascend|<x>"}},
        "devices": {"npu:0": {"torch": "2.1.0", "device_name": "Ascend910B3", "torch_npu": "2.1.0.post3",
                              "cann": "8.0.RC1"},
                    "npu:1": {"torch": "2.1.0", "device_name": "Ascend910B3", "torch_npu": "2.1.0.post3",
                              "cann": "8.0.RC1"}},
    }
    refs = [{"name": "upstream", "sha": "68889bc0d1e2f3a4b5c6", "subject": "upstream head",
             "build": {"ok": True, "log": "/tmp/b1.log"}},
            {"name": "fix", "sha": "65ae4d5aaaabbbbcccc", "subject": "fix: add the missing barrier <b>",
             "build": {"ok": True, "log": "/tmp/b2.log"}}]
    doc = build_document(results, started=1796000000.0, devices=["npu:0", "npu:1"],
                         command=["harness", "compare", "cases", "--ref", "upstream=68889bc"],
                         provenance=provenance, kind=kind, run_id="run-42", refs=refs, **extra)
    return doc


def flake_summary() -> dict:
    return {"decode-rope-kv[batch=16]": {
        "total": 20, "counts": {"PASS": 17, "FAIL_507018": 3}, "failures": 3, "rate": 0.15,
        "wilson": [0.052, 0.36], "clopper_pearson": [0.032, 0.379], "conf": 0.95,
        "determinism": {"identical": False, "summary": "NONDETERMINISTIC: 2 of 19 iterations differ | <b>"}},
        NASTY_ID: {"total": 5, "counts": {"PASS": 5}, "failures": 0, "rate": 0.0, "wilson": [0.0, 0.43],
                   "clopper_pearson": [0.0, 0.52], "determinism": None}}
