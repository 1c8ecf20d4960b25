"""harness.adapters: each piece round-trips, bad specs fail in one line, and a kernel written
to another convention (HND cache, FlashInfer page lists, a returned tensor) passes a tiny
case through the real launcher and checks, and fails it with a deliberate bug."""
from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
import types
from dataclasses import replace

import pytest
import torch

from harness import goldens
from harness.adapters import (
    AdapterCall, adapt, block_table_from_flashinfer, cache_layout, const, drop, expand_layers,
    fia_pages, flashinfer_from_block_table, flashinfer_pages, per_layer, rename, returns,
)
from harness.classify.matching import classify_exception
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.errors import UsageError
from harness.ops import OPS
from harness.outcomes import Outcome
from harness.worker import checks
from harness.worker.inputs import generate
from harness.worker.launch import launch

CPU = torch.device("cpu")
N, P, HKV, D = 3, 4, 2, 8


def cache(layers: int | None = None) -> torch.Tensor:
    shape = (N, P, HKV, D) if layers is None else (layers, N, P, HKV, D)
    return torch.randn(shape).to(torch.bfloat16)


def decode_args(**over) -> dict:
    """Arguments of paged_decode_attention with small made-up shapes (no harness launch)."""
    args = dict(query=torch.randn(2, 4, D).to(torch.bfloat16), block_table=torch.tensor([[2, 0], [1, -1]], dtype=torch.int32),
                seq_lens=torch.tensor([6, 3], dtype=torch.int32), scale=0.5, k_cache=cache(), v_cache=cache(),
                out=torch.zeros(2, 4, D, dtype=torch.bfloat16))
    args.update(over)
    return args


# -- layouts -----------------------------------------------------------------------------------

def test_hnd_is_a_view_of_the_same_storage_and_needs_no_write_back():
    seen: dict = {}
    k = adapt("paged_decode_attention", lambda **kw: seen.update(kw),
              cache_layout(k_cache="HND", v_cache="HND"), name="hnd")
    args = decode_args()
    k(**args)
    hnd = seen["k_cache"]
    assert hnd.shape == (N, HKV, P, D) and hnd.data_ptr() == args["k_cache"].data_ptr()
    assert torch.equal(hnd[1, 0, 2], args["k_cache"][1, 2, 0])           # page, head, offset
    hnd[1, 0, 2] = 7.0                                                     # writes land in the harness's cache
    assert float(args["k_cache"][1, 2, 0, 0]) == 7.0
    assert k.last_call == AdapterCall("hnd")


@pytest.mark.parametrize("layout,shape", [("rows", (N * P * HKV, D)), ("slots", (N * P, HKV, D)), ("NHD", (N, P, HKV, D))])
def test_flat_layouts_alias_the_cache(layout, shape):
    seen: dict = {}
    k = adapt("paged_decode_attention", lambda **kw: seen.update(kw), cache_layout(k_cache=layout), name="flat")
    args = decode_args()
    k(**args)
    assert seen["k_cache"].shape == shape and seen["k_cache"].data_ptr() == args["k_cache"].data_ptr()
    slot, head = 2 * P + 1, 1                                             # page 2, offset 1
    row = seen["k_cache"].reshape(-1, D)[slot * HKV + head]
    assert torch.equal(row, args["k_cache"][2, 1, 1])


def test_contiguous_hnd_is_a_copy_written_back_and_reported():
    def lib(*, k_cache, **_):
        assert k_cache.is_contiguous() and k_cache.shape == (N, HKV, P, D)
        k_cache[0, 1, 3] = 5.0                       # page 0, head 1, offset 3

    k = adapt("paged_decode_attention", lib, cache_layout(contiguous=True, k_cache="HND"), name="copy")
    args = decode_args()
    before = args["k_cache"].clone()
    k(**args)
    assert float(args["k_cache"][0, 3, 1, 0]) == 5.0
    changed = (args["k_cache"] != before).any(-1)
    assert changed.sum() == 1 and changed[0, 3, 1]                 # the rest written back bit-identical
    assert k.last_call.copied_caches == ("k_cache",)


def test_decode_layers_layers_keep_their_leading_dim_per_layer_and_expand():
    seen: dict = {}
    k = adapt("decode_layers", lambda **kw: seen.update(kw), cache_layout(k_cache="HND"),
              per_layer("k_cache", "v_cache"), expand_layers("wq", "q_norm_weight"), name="layers")
    args = {n: None for n in OPS["decode_layers"].arg_names}
    args.update(k_cache=cache(3), v_cache=cache(3), wq=torch.randn(16, 32), q_norm_weight=torch.randn(D), num_layers=3)
    k(**args)
    assert isinstance(seen["k_cache"], tuple) and len(seen["k_cache"]) == 3
    assert seen["k_cache"][1].shape == (N, HKV, P, D)
    assert torch.equal(seen["k_cache"][1][2, 0, 1], args["k_cache"][1, 2, 1, 0])
    assert seen["v_cache"][2].data_ptr() == args["v_cache"][2].data_ptr()
    wq = seen["wq"]
    assert wq.shape == (3, 16, 32) and wq.stride()[0] == 0 and wq.data_ptr() == args["wq"].data_ptr()


@pytest.mark.parametrize("layout,shape", [("rows", (2, N * P * HKV, D)), ("slots", (2, N * P, HKV, D))])
def test_decode_layers_flat_layouts_keep_the_layer_dim(layout, shape):
    seen: dict = {}
    k = adapt("decode_layers", lambda **kw: seen.update(kw), cache_layout(v_cache=layout), name="flat-layers")
    args = {n: None for n in OPS["decode_layers"].arg_names}
    args.update(k_cache=cache(2), v_cache=cache(2))
    k(**args)
    assert seen["v_cache"].shape == shape and seen["v_cache"].data_ptr() == args["v_cache"].data_ptr()
    assert torch.equal(seen["v_cache"][1].reshape(-1, D)[(2 * P + 3) * HKV + 1], args["v_cache"][1, 2, 3, 1])
    assert k.last_call.copied_caches == ()


# -- page tables ---------------------------------------------------------------------------

def test_flashinfer_pages_of_a_known_table():
    table = torch.tensor([[4, 1, 7], [2, -1, -1], [0, 3, -1], [5, -1, -1]], dtype=torch.int32)
    indptr, indices, last = flashinfer_from_block_table(table, torch.tensor([9, 4, 5, 0]), page_size=4)
    assert indptr.tolist() == [0, 3, 4, 6, 6]
    assert indices.tolist() == [4, 1, 7, 2, 0, 3]
    assert last.tolist() == [1, 4, 1, 0]
    assert indptr.dtype == indices.dtype == last.dtype == torch.int32


@pytest.mark.parametrize("seed", range(5))
def test_flashinfer_pages_invert(seed):
    g = torch.Generator().manual_seed(seed)
    B, MB, page = 6, 5, 4
    lengths = torch.randint(0, MB * page + 1, (B,), generator=g)
    table = torch.full((B, MB), -1, dtype=torch.int32)
    pages = torch.randperm(B * MB, generator=g).to(torch.int32)
    for b, n in enumerate(lengths.tolist()):
        used = (n + page - 1) // page
        table[b, :used] = pages[b * MB: b * MB + used]
    back, back_lengths = block_table_from_flashinfer(*flashinfer_from_block_table(table, lengths, page), page, MB)
    assert torch.equal(back, table) and back_lengths.tolist() == lengths.tolist()


def test_fia_pages_keep_the_table_and_give_lengths_as_ints():
    seen: dict = {}
    k = adapt("paged_decode_attention", lambda **kw: seen.update(kw), fia_pages(), name="fia")
    args = decode_args()
    k(**args)
    assert seen["block_table"] is args["block_table"] and seen["actual_seq_lengths_kv"] == [6, 3]
    assert "seq_lens" not in seen


def test_prefill_pages_count_the_context_and_the_chunk():
    seen: dict = {}
    k = adapt("prefill_attention", lambda **kw: seen.update(kw), flashinfer_pages(), name="prefill")
    args = {n: None for n in OPS["prefill_attention"].arg_names}
    args.update(cu_seqlens=torch.tensor([0, 3, 4], dtype=torch.int32), context_lens=torch.tensor([5, 0], dtype=torch.int32),
                block_table=torch.tensor([[0, 2], [1, -1]], dtype=torch.int32), k_cache=cache(), v_cache=cache())
    k(**args)
    assert seen["indptr"].tolist() == [0, 2, 3] and seen["last_page_len"].tolist() == [4, 1]


# -- names and results ---------------------------------------------------------------------------

def test_rename_drop_const_shape_the_library_call_and_the_signature_is_the_ops():
    seen: dict = {}

    def lib(*, q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale, causal):
        seen.update(q=q, sm_scale=sm_scale, causal=causal, kv_indptr=kv_indptr)
        return torch.zeros(2, 4, D)

    k = adapt("paged_decode_attention", lib, rename(query="q", scale="sm_scale", indptr="kv_indptr",
                                                    indices="kv_indices", last_page_len="kv_last_page_len"),
              flashinfer_pages(), const(causal=False), returns("out"), name="names")
    assert tuple(inspect.signature(k).parameters) == OPS["paged_decode_attention"].arg_names
    assert k.library_args == ("q", "sm_scale", "k_cache", "v_cache", "kv_indptr", "kv_indices", "kv_last_page_len",
                              "causal")
    args = decode_args()
    assert k(**args) is None
    assert seen["q"] is args["query"] and seen["sm_scale"] == 0.5 and seen["causal"] is False


def test_returned_tensors_are_copied_into_the_buffers_and_reported():
    out_value, query_value = torch.randn(2, 4, D), torch.randn(2, 4 * D)
    k = adapt("fused_rope_decode_attention", lambda **kw: (out_value, query_value, torch.ones(2)),
              returns("out", "query"), name="ret")
    args = {n: None for n in OPS["fused_rope_decode_attention"].arg_names}
    args.update(out=torch.zeros(2, 4, D, dtype=torch.bfloat16), query=torch.zeros(2, 4, D, dtype=torch.bfloat16))
    k(**args)
    assert torch.equal(args["out"], out_value.to(torch.bfloat16))
    assert torch.equal(args["query"], query_value.view(2, 4, D).to(torch.bfloat16))      # same numel: reshaped
    assert k.last_call.copied_outputs == ("out", "query")
    assert k.last_call.to_metrics() == {"name": "ret", "copied_outputs": ["out", "query"], "copied_caches": []}


def test_returning_the_buffer_itself_is_no_copy_and_a_wrong_size_is_an_error():
    args = decode_args()
    k = adapt("paged_decode_attention", lambda **_: args["out"], returns("out"), name="same")
    k(**args)
    assert k.last_call.copied_outputs == ()
    k = adapt("paged_decode_attention", lambda **_: None, returns("out"), name="none")
    with pytest.raises(ValueError, match=r"adapter 'none': the library returned 0 value\(s\), expected out"):
        k(**decode_args())
    k = adapt("paged_decode_attention", lambda **_: torch.zeros(3, 3), returns("out"), name="short")
    with pytest.raises(ValueError, match=r"adapter 'short': the library returned out as \(3, 3\)"):
        k(**decode_args())


# -- eager validation ----------------------------------------------------------------------------

def any_fn(**_):
    return None


@pytest.mark.parametrize("op,pieces,message", [
    ("paged_decode_attention", (cache_layout(k_cache="HDN"),), r"cache_layout: unknown layout 'HDN' for k_cache"),
    ("paged_decode_attention", (cache_layout(query="HND"),), r"cache_layout: op paged_decode_attention has no argument 'query'"),
    ("paged_decode_attention", (rename(q_proj="q"),), r"rename: op paged_decode_attention has no argument 'q_proj'"),
    ("paged_decode_attention", (drop("eps"),), r"drop: op paged_decode_attention has no argument 'eps'"),
    ("paged_decode_attention", (returns("query"),), r"returns: op paged_decode_attention has no argument 'query'"),
    ("rope_kv_write", (flashinfer_pages(),), r"flashinfer_pages: op rope_kv_write has no argument 'block_table'"),
    ("paged_decode_attention", (per_layer("k_cache"),), r"per_layer: op paged_decode_attention has no layers"),
    ("decode_layers", (per_layer("wq"),), r"per_layer: wq has no \[L\] dimension"),
    ("decode_layers", (expand_layers("k_cache"),), r"expand_layers: k_cache is not a shared tensor"),
    ("paged_decode_attention", (cache_layout(k_cache="HND"), cache_layout(k_cache="rows")),
     r"cache_layout: k_cache is given a layout twice"),
    ("paged_decode_attention", (const(scale=1.0),), r"const: 'scale' is already an argument; drop it first"),
    ("paged_decode_attention", (rename(query="out"),), r"rename: two arguments would both be called out"),
    ("nope", (), r"unknown op 'nope'"),
])
def test_bad_specs_fail_in_one_line_naming_the_adapter(op, pieces, message):
    with pytest.raises(UsageError, match=message) as err:
        adapt(op, any_fn, *pieces, name="mine")
    assert str(err.value).startswith("adapter 'mine': ") and "\n" not in str(err.value)


def test_a_library_that_does_not_take_what_the_pieces_give_fails_eagerly():
    def lib(*, q, k_cache, v_cache):
        return q

    with pytest.raises(UsageError, match=r"adapter 'lib': the library callable does not take") as err:
        adapt("paged_decode_attention", lib, rename(query="q"), name="lib")
    assert "\n" not in str(err.value)


def test_a_non_piece_is_refused():
    with pytest.raises(UsageError, match="is not an adapter piece"):
        adapt("paged_decode_attention", any_fn, {"query": "q"}, name="x")


# -- a kernel in another convention through the real launcher and checks ---------------------------

def hnd_flashinfer_decode(*, q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale,
                          kv_head_of=lambda h, group, hkv: h // group):
    """A toy library kernel: HND pages ``[N, Hkv, P, D]``, FlashInfer page lists, returns a new tensor."""
    B, Hq, _ = q.shape
    Hkv, page = k_cache.shape[1], k_cache.shape[2]
    out = torch.empty(B, Hq, q.shape[2], dtype=torch.float32)
    for b in range(B):
        pages = kv_indices[kv_indptr[b]:kv_indptr[b + 1]].long()
        n = (len(pages) - 1) * page + int(kv_last_page_len[b])
        keys = k_cache[pages].permute(1, 0, 2, 3).reshape(Hkv, -1, q.shape[2])[:, :n].float()   # [Hkv, n, D]
        vals = v_cache[pages].permute(1, 0, 2, 3).reshape(Hkv, -1, q.shape[2])[:, :n].float()
        for h in range(Hq):
            g = kv_head_of(h, Hq // Hkv, Hkv)
            p = torch.softmax(sm_scale * keys[g] @ q[b, h].float(), dim=0)
            out[b, h] = p @ vals[g]
    return out


PIECES = (rename(query="q", scale="sm_scale", indptr="kv_indptr", indices="kv_indices", last_page_len="kv_last_page_len"),
          cache_layout(k_cache="HND", v_cache="HND"), flashinfer_pages(), returns("out"))


def decode_case() -> Case:
    return Case("adapted", "unit", "tests/unit", "paged_decode_attention", "reference",
                geometry=replace(PRESETS["tiny"], batch=4), seq_lens=SeqLens("multi_block"),
                slot_mode=SlotMode("random"), seed=7)


def check(kernel):
    c = decode_case()
    ci = generate(c)
    return checks.run_checks(c, ci, goldens.compute(c.op, ci.args), launch(kernel, ci, CPU, lambda: None))


def test_an_adapted_toy_kernel_passes_a_tiny_case():
    kernel = adapt("paged_decode_attention", hnd_flashinfer_decode, *PIECES, name="toy")
    found = check(kernel)
    assert found.outcome is Outcome.PASS, found.summary
    assert kernel.last_call.copied_outputs == ("out",)


def test_the_adapted_toy_kernel_with_a_gqa_bug_fails_it():
    def wrong_gqa(**kw):
        return hnd_flashinfer_decode(**kw, kv_head_of=lambda h, group, hkv: h % hkv)

    found = check(adapt("paged_decode_attention", wrong_gqa, *PIECES, name="toy-bug"))
    assert found.outcome is Outcome.MISMATCH, found.summary


def test_the_adapted_toy_kernel_with_a_short_last_page_fails_it():
    def short(*, kv_last_page_len, **kw):
        return hnd_flashinfer_decode(kv_last_page_len=(kv_last_page_len - 1).clamp(min=1), **kw)

    found = check(adapt("paged_decode_attention", short, *PIECES, name="toy-short"))
    assert found.outcome is Outcome.MISMATCH, found.summary


def test_the_worker_reports_what_the_adapter_copied(tmp_path):
    from harness.devices import Device, backend
    from harness.goldens.cache import GoldenCache
    from harness.worker.execute import KernelLoader, execute_case

    device = Device("cpu")
    c = replace(decode_case(), kernel="torch-sdpa")
    reply = execute_case(c, device, backend(device), GoldenCache(tmp_path), KernelLoader())
    assert reply.outcome is Outcome.PASS, reply.summary
    assert reply.metrics["adapter"] == {"name": "torch-sdpa", "copied_outputs": ["out"], "copied_caches": []}


# -- the shipped kernels -----------------------------------------------------------------------

SHIPPED = ("torch-sdpa", "torch-flex", "transformers-qwen3")


CHECK_SHIPPED = """
import importlib, inspect
from harness.adapters import Adapted
from harness.ops import OPS
from harness.ops.registry import BUILTINS
for name in %r:
    for op, target in BUILTINS[name].items():
        module, _, attr = target.partition(":")
        kernel = getattr(importlib.import_module(module), attr)
        assert isinstance(kernel, Adapted) and kernel.name == name, target
        assert tuple(inspect.signature(kernel).parameters) == OPS[op].arg_names, target
print("ok")
"""


def test_shipped_kernels_are_adapters_with_the_contract_signature():
    # A process of its own: flex_attention and transformers import triton, which the Triton
    # interpreter tests must be the first to import in theirs (test_triton_kernels.py).
    proc = subprocess.run([sys.executable, "-c", CHECK_SHIPPED % (SHIPPED,)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_transformers_qwen3_with_transformers_broken_inside_names_that_not_an_install(monkeypatch):
    """Installed but failing inside (here: a transformers without Qwen3Config, as an old release or
    a shadowed dependency gives): the message says it is installed and what failed."""
    pytest.importorskip("transformers")
    monkeypatch.setitem(sys.modules, "transformers", types.ModuleType("transformers"))
    monkeypatch.delitem(sys.modules, "harness.kernels.adapted.transformers_qwen3", raising=False)
    with pytest.raises(ImportError) as err:
        importlib.import_module("harness.kernels.adapted.transformers_qwen3")
    assert re.search(r"transformers [\d.]+\S* is installed, but importing what this kernel uses from it failed",
                     str(err.value)), str(err.value)
    assert "pip install" not in str(err.value) and "Qwen3Config" in str(err.value)


def test_transformers_qwen3_without_transformers_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)          # import transformers -> ImportError
    monkeypatch.delitem(sys.modules, "harness.kernels.adapted.transformers_qwen3", raising=False)
    with pytest.raises(ImportError, match=r"transformers-qwen3 needs `pip install transformers`") as err:
        importlib.import_module("harness.kernels.adapted.transformers_qwen3")
    found = classify_exception("import", "ImportError", str(err.value), "")
    assert found.outcome is Outcome.BUILD_ERROR and "needs `pip install transformers`" in found.summary
