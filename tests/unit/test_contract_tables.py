"""``harness ops``: the contract tables printed from harness/ops/__init__.py, equal to docs/contracts.md's,
with shapes in numbers that are the worker's own."""
from __future__ import annotations

import dataclasses
import re

import pytest

from harness import packs
from harness.ops.abi import contract_rows
from harness.packs.qwen3.contracts import LAYOUTS
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.cli import main
from harness.cli.ops import parse_geometry
from harness.errors import UsageError
from harness.ops import OPS, resolve_shape
from helpers import ROOT


def _tables(markdown: str) -> dict[str, list[str]]:
    """The first table under each ``### `op``` heading."""
    tables = {}
    for m in re.finditer(r"^### `(\w+)`\n(.*?)(?=^#{1,3} |\Z)", markdown, flags=re.M | re.S):
        lines = m.group(2).splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("| argument"))
        end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
        tables[m.group(1)] = lines[start:end]
    return tables


# Where each builtin pack's contract tables are documented.
PACK_DOCS = {"qwen3": "contracts.md", "sampling": "sampling.md"}


def test_docs_contract_tables_are_what_harness_ops_markdown_prints(capsys):
    assert main(["ops", "--markdown"]) == 0
    printed = _tables(capsys.readouterr().out)
    assert list(printed) == list(OPS)
    documented = {}
    for pack in packs.packs():
        if pack.name in PACK_DOCS:
            tables = _tables((ROOT / "docs" / PACK_DOCS[pack.name]).read_text(encoding="utf-8"))
            documented.update({op: tables.get(op) for op in pack.ops})
    assert documented == printed


def test_every_argument_has_a_layout_and_no_layout_names_a_missing_one():
    assert set(LAYOUTS) == set(packs.pack_of("rope_kv_write").ops)
    for op, spec in OPS.items():
        assert set(packs.entry(op).layouts) == set(spec.arg_names), op


def test_writes_and_returned_follow_the_checks():
    fused = {r.argument: r for r in contract_rows("fused_rope_decode_attention")}
    assert fused["out"].writes.startswith("every element of rows with `slot_mapping[b] ≥ 0`")
    assert (fused["out"].returned, fused["query"].returned) == ("first output", "in the tuple only")
    assert fused["k_cache"].writes == "the rows at `slot_mapping[b] ≥ 0`"
    paged = {r.argument: r for r in contract_rows("paged_decode_attention")}
    assert paged["k_cache"].writes == "nothing" and paged["scale"].writes == "–"
    prefill = {r.argument: r for r in contract_rows("prefill_attention")}
    assert prefill["v_cache"].writes == "the rows at `slot_mapping[t] ≥ 0`"
    layers = {r.argument: r for r in contract_rows("decode_layers")}
    assert layers["k_cache"].writes.startswith("in each layer, ")


@pytest.mark.parametrize("op", list(OPS))
def test_geometry_shapes_are_the_ones_the_worker_generates(op):
    from harness.worker.inputs import generate
    sizes = parse_geometry("tiny,batch=2,num_layers=2,seq_len=40")
    case = Case(case_id="x", matrix="x", source="x", op=op, kernel="reference",
                geometry=dataclasses.replace(PRESETS["tiny"], batch=2, num_layers=2),
                seq_lens=SeqLens("const", (40,)), slot_mode=SlotMode("arange"), seed=0)
    ci = generate(case)
    generated = {name: tuple(getattr(v, "shape", ())) for name, v in ci.args.items()}
    generated.update({name: shape for name, (shape, _) in ci.outputs.items()})
    printed = {r.argument: r.shape for r in contract_rows(op, sizes)}
    assert printed == {name: "[" + ", ".join(map(str, shape)) + "]" for name, shape in generated.items()}


def test_a_geometry_without_lengths_leaves_their_symbols():
    rows = {r.argument: r.shape for r in contract_rows("prefill_attention", parse_geometry("qwen3-14b"))}
    assert rows["q_proj"] == "[T, 5120]" and rows["k_cache"] == "[N, 128, 8, 128]"
    assert rows["cu_seqlens"] == "[17]"


def test_resolve_shape_names_the_symbol_it_lacks():
    with pytest.raises(KeyError, match="MB"):
        resolve_shape(("B", "MB"), {"B": 1})


@pytest.mark.parametrize("argv, needle", [
    (["ops", "prefill_attenton"], "unknown op 'prefill_attenton'; did you mean 'prefill_attention'?"),
    (["ops", "--geometry", "tiy"], "unknown geometry 'tiy'; did you mean 'tiny'?"),
    (["ops", "--geometry", "tiny,bach=2"], "did you mean 'batch'?"),
    (["ops", "--geometry", "tiny,batch=two"], "batch takes a whole number"),
])
def test_unknown_op_or_geometry_is_one_line_and_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_parse_geometry_errors_are_usage_errors():
    with pytest.raises(UsageError):
        parse_geometry("tiny,batch=0")
