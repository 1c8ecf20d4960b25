"""The Triton kernels, run by the Triton interpreter on CPU tensors, against the reference.

``TRITON_INTERPRET`` is read when ``triton.jit`` decorates a function, so triton
is first imported, and a private copy of ``kernels/triton_kernels.py`` loaded,
with the variable set; it stays set only while this module's tests run, and
``harness.kernels.triton_kernels`` itself is left alone.  Launches go through the
harness's own launcher: outputs NaN-poisoned, caches and outputs as views into
guard-banded buffers, guard damage and the return value reported.

The interpreter runs every program in Python: shapes stay tiny.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from harness import kernels
from harness.ops import registry
import harness.kernels.reference as ref
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.worker.inputs import CaseInputs, generate
from harness.worker.launch import Launched, launch, poison_mask
from harness.ops import OPS

TINY = PRESETS["tiny"]
# One bf16 ulp is 2^-7 relative at most (the interpreter runs come out bit-identical to the reference).
BF16 = {"atol": 1e-5, "rtol": 8e-3}
KERNEL_FILE = Path(kernels.__file__).resolve().parent / "triton_kernels.py"
INSTALL_HINT = "the triton kernels need the `cuda` extra: pip install -e .[cuda]"


def _interpreted(triton) -> bool:
    """Whether triton's own library functions (``tl.sum``, ...) were decorated for the interpreter."""
    from triton.runtime.interpreter import InterpretedFunction
    return isinstance(triton.language.standard.sum, InterpretedFunction)


@pytest.fixture(scope="module")
def tk():
    """``kernels/triton_kernels.py`` loaded with ``TRITON_INTERPRET=1``, as a module of its own.

    ``triton.jit`` reads the variable when it decorates, and triton decorates its
    own library when it is first imported: the first import of triton in the
    process must happen here.  The variable stays set while this module's tests
    run: triton imports more of itself lazily, on the first launch.
    """
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        triton = pytest.importorskip("triton")
        if not _interpreted(triton):
            pytest.skip("triton was imported before TRITON_INTERPRET=1 was set; run this module in its own process")
        spec = importlib.util.spec_from_file_location("_triton_kernels_interpreted", KERNEL_FILE)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module


# -- cases and launches ---------------------------------------------------------------

PADDED = SlotMode("padded", 0.25)
MULTI_BLOCK = SeqLens("multi_block")


def make_case(op: str, *, slot_mode: SlotMode = PADDED, seq_lens: SeqLens = MULTI_BLOCK, seed: int = 3,
              **fields: Any) -> Case:
    return Case(f"{op}-triton-test", "unit", "tests/unit", op, "triton", geometry=fields.pop("geometry", TINY),
                seq_lens=seq_lens, slot_mode=slot_mode, seed=seed, **fields)


def run(kernel: Callable[..., Any], inputs: CaseInputs, **overrides: Any) -> Launched:
    if overrides:
        inputs = replace(inputs, args={**inputs.args, **overrides})
    return launch(kernel, inputs, torch.device("cpu"), lambda: None)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({2: torch.int16, 4: torch.int32}[t.element_size()])


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(bits(a), bits(b))


def check_contract(got: Launched) -> None:
    """Outputs fully written, guard bands intact, a return value the contract allows."""
    assert got.returned is None, got.returned
    for name, out in got.outputs.items():
        assert not poison_mask(out).any(), f"{name}: elements never written"
    for name, damage in got.guard_damage.items():
        assert damage == ([], []), f"{name}: guard band written at {damage}"


def check_cache(got: torch.Tensor, before: torch.Tensor, expected: torch.Tensor, slots: torch.Tensor) -> None:
    """Rows at valid slots close to the reference's; every other row bit-identical to the launch state."""
    def rows(t: torch.Tensor) -> torch.Tensor:                    # [N*P, Hkv, D]
        return t.reshape(-1, *t.shape[-2:])

    written = torch.zeros(rows(got).shape[0], dtype=torch.bool)
    written[slots[slots >= 0].long()] = True
    torch.testing.assert_close(rows(got)[written].double(), rows(expected)[written].double(), **BF16)
    assert same_bits(rows(got)[~written], rows(before)[~written]), "a row without a valid slot changed"


def compare_rope_kv_write(tk, inputs: CaseInputs) -> Launched:
    got, want = run(tk.rope_kv_write, inputs), run(ref.rope_kv_write, inputs)
    check_contract(got)
    torch.testing.assert_close(got.outputs["query"].double(), want.outputs["query"].double(), **BF16)
    for name in ("k_cache", "v_cache"):
        check_cache(got.caches[name], inputs.args[name], want.caches[name], inputs.args["slot_mapping"])
    return got


def compare_decode(tk, inputs: CaseInputs, **overrides: Any) -> Launched:
    got, want = run(tk.paged_decode_attention, inputs, **overrides), run(ref.paged_decode_attention, inputs)
    check_contract(got)
    torch.testing.assert_close(got.outputs["out"].double(), want.outputs["out"].double(), **BF16)
    for name in ("k_cache", "v_cache"):
        assert same_bits(got.caches[name], inputs.args[name]), f"{name} written by a read-only op"
    return got


# -- rope_kv_write -------------------------------------------------------------------

@pytest.mark.parametrize("slot_mode", [SlotMode("padded", 0.5), SlotMode("random")], ids=str)
def test_rope_kv_write_matches_reference(tk, slot_mode):
    compare_rope_kv_write(tk, generate(make_case("rope_kv_write", slot_mode=slot_mode)))


def test_rope_kv_write_with_slot_minus_one_writes_no_cache_row(tk):
    inputs = generate(make_case("rope_kv_write", slot_mode=SlotMode("const", -1)))
    got = compare_rope_kv_write(tk, inputs)
    for name in ("k_cache", "v_cache"):
        assert same_bits(got.caches[name], inputs.args[name]), name


# -- paged_decode_attention ----------------------------------------------------------

@pytest.mark.parametrize("seq_lens", [SeqLens("multi_block"), SeqLens("list", (1, 2, 16, 64))], ids=str)
def test_paged_decode_attention_matches_reference(tk, seq_lens):
    compare_decode(tk, generate(make_case("paged_decode_attention", seq_lens=seq_lens)))


def test_paged_decode_attention_with_tiles_smaller_than_a_page(tk, monkeypatch):
    monkeypatch.setattr(tk, "KV_BLOCK", 4)          # four tiles per 16-row page
    compare_decode(tk, generate(make_case("paged_decode_attention", seq_lens=SeqLens("list", (1, 5, 17, 40)))))


def test_unused_block_table_entries_are_never_read(tk):
    """Unused entries on a page of NaN: a kernel that reads one, even under a zero weight, goes NaN."""
    inputs = generate(make_case("paged_decode_attention", seq_lens=SeqLens("list", (1, 17, 33, 40)),
                                slot_mode=SlotMode("arange")))
    table, P = inputs.args["block_table"], inputs.sizes["P"]
    used = torch.arange(table.shape[1])[None, :] * P < inputs.args["seq_lens"][:, None]
    assert (table[~used] == -1).all() and (~used).any(), "the generator leaves unused entries at -1"
    spare = min(set(range(inputs.sizes["N"])) - set(table[used].tolist()))
    caches = {}
    for name in ("k_cache", "v_cache"):
        caches[name] = inputs.args[name].clone()
        caches[name][spare] = float("nan")
    baseline = compare_decode(tk, replace(inputs, args={**inputs.args, **caches}))    # entries at -1
    on_nan_page = run(tk.paged_decode_attention, inputs, **caches,
                      block_table=torch.where(used, table, torch.full_like(table, spare)))
    assert same_bits(on_nan_page.outputs["out"], baseline.outputs["out"])


# -- a qwen3-shaped head: D = P = 128, GQA group 5 ---------------------------------------

QWEN_HEAD = replace(TINY, batch=2, num_heads=10, num_kv_heads=2, head_dim=128, page_size=128)


def test_qwen3_shaped_rope_kv_write(tk):
    compare_rope_kv_write(tk, generate(make_case("rope_kv_write", geometry=QWEN_HEAD,
                                                 seq_lens=SeqLens("list", (3, 129)))))


def test_qwen3_shaped_paged_decode_attention(tk):
    compare_decode(tk, generate(make_case("paged_decode_attention", geometry=QWEN_HEAD,
                                          seq_lens=SeqLens("list", (1, 129)))))


# -- host checks, registry and the missing-triton path --------------------------------------

def test_non_power_of_two_head_dim_is_refused(tk):
    inputs = generate(make_case("paged_decode_attention", geometry=replace(TINY, head_dim=24)))
    with pytest.raises(ValueError, match="head_dim to be a power of two, got 24"):
        run(tk.paged_decode_attention, inputs)


@pytest.mark.parametrize("op", ["rope_kv_write", "paged_decode_attention"])
def test_registry_entry_carries_the_contract_signature(tk, op):
    # tk: the first import of triton in this process has to be the interpreted one
    module, _, attr = registry.BUILTINS["triton"][op].partition(":")
    kernel = getattr(importlib.import_module(module), attr)
    assert tuple(inspect.signature(kernel).parameters) == OPS[op].arg_names


def test_missing_triton_is_an_import_error_with_the_install_hint(monkeypatch):
    """Triton hidden from the import system (present or not): the module import fails, naming the extra."""
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.language", None)
    monkeypatch.delitem(sys.modules, "harness.kernels.triton_kernels", raising=False)
    with pytest.raises(ImportError, match=re.escape(INSTALL_HINT)):
        importlib.import_module("harness.kernels.triton_kernels")


def test_without_triton_installed_the_import_fails_with_the_install_hint():
    if importlib.util.find_spec("triton") is not None:
        pytest.skip("triton is installed")
    with pytest.raises(ImportError, match=re.escape(INSTALL_HINT)):
        importlib.import_module("harness.kernels.triton_kernels")
