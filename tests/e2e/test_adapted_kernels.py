"""Adapted kernels through `harness run`: a shipped one by name, and a user's kernel written to
another convention (HND pages, FlashInfer page lists, a returned tensor) plugged in with
harness.adapters from --kernel-path: correct, buggy, and with a bad adapter spec."""
from __future__ import annotations

import json

from helpers import run_harness, write_case_file

CASES = """\
name: {name}
op: paged_decode_attention
kernel: {kernel}
geometry: tiny
matrix:
  batch: [1, 4]
  seq_lens: [multi_block]
  slot_mode: [random]
"""

USER_KERNEL = '''\
import torch
from harness.adapters import adapt, cache_layout, flashinfer_pages, rename, returns


def decode(*, q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale, group_of=None):
    """HND pages [N, Hkv, P, D]; sequence b holds pages kv_indices[kv_indptr[b]:kv_indptr[b+1]]."""
    B, Hq, D = q.shape
    Hkv, P = k_cache.shape[1], k_cache.shape[2]
    out = torch.empty(B, Hq, D)
    for b in range(B):
        pages = kv_indices[kv_indptr[b]:kv_indptr[b + 1]].long()
        n = (len(pages) - 1) * P + int(kv_last_page_len[b])
        k = k_cache[pages].transpose(0, 1).reshape(Hkv, -1, D)[:, :n].float()
        v = v_cache[pages].transpose(0, 1).reshape(Hkv, -1, D)[:, :n].float()
        for h in range(Hq):
            g = group_of(h, Hq, Hkv) if group_of else h // (Hq // Hkv)
            out[b, h] = torch.softmax(sm_scale * k[g] @ q[b, h].float(), 0) @ v[g]
    return out


def wrong_gqa(**kw):
    return decode(**kw, group_of=lambda h, hq, hkv: h % hkv)


PIECES = (rename(query="q", scale="sm_scale", indptr="kv_indptr", indices="kv_indices",
                 last_page_len="kv_last_page_len"),
          cache_layout(k_cache="HND", v_cache="HND"), flashinfer_pages(), returns("out"))
good = adapt("paged_decode_attention", decode, *PIECES, name="toy")
bad = adapt("paged_decode_attention", wrong_gqa, *PIECES, name="toy-wrong-gqa")
'''


def run(tmp_path, golden_cache_dir, name, kernel, *extra):
    cases = write_case_file(tmp_path / name, f"{name}.yaml", CASES.format(name=name, kernel=kernel))
    out = tmp_path / f"{name}.json"
    proc = run_harness("run", str(cases), "--device", "cpu", "--json", str(out), "--no-store",
                       "--golden-cache", str(golden_cache_dir), "--log-dir", str(tmp_path / "logs"), *extra,
                       cwd=tmp_path)
    return proc, json.loads(out.read_text())["results"] if out.exists() else []


def test_a_shipped_adapted_kernel_runs_by_name_and_reports_its_copies(tmp_path, golden_cache_dir):
    proc, results = run(tmp_path, golden_cache_dir, "sdpa", "torch-sdpa")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(results) == 2 and {r["outcome"] for r in results} == {"PASS"}
    for r in results:
        assert r["metrics"]["adapter"] == {"name": "torch-sdpa", "copied_outputs": ["out"], "copied_caches": []}


def test_a_user_kernel_in_another_convention_plugs_in(tmp_path, golden_cache_dir):
    pkg = tmp_path / "userkernels" / "toy"
    pkg.mkdir(parents=True)
    (pkg / "mod.py").write_text(USER_KERNEL)
    (pkg / "badspec.py").write_text(USER_KERNEL.replace('k_cache="HND"', 'k_cache="HDN"'))
    path = ("--kernel-path", str(tmp_path / "userkernels"))

    proc, results = run(tmp_path, golden_cache_dir, "good", "toy.mod:good", *path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {r["outcome"] for r in results} == {"PASS"}

    proc, results = run(tmp_path, golden_cache_dir, "bad", "toy.mod:bad", *path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert {r["outcome"] for r in results} == {"MISMATCH"}

    proc, results = run(tmp_path, golden_cache_dir, "spec", "toy.badspec:good", *path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert {r["outcome"] for r in results} == {"BUILD_ERROR"}
    assert "adapter 'toy': cache_layout: unknown layout 'HDN' for k_cache" in results[0]["summary"]
