"""Case files (docs/cases.md): loading, expansion, ids, validation errors, -k selection.

Pure and fast: every fixture is a YAML file written to tmp_path.
"""
from __future__ import annotations

import pickle
import textwrap
from dataclasses import replace

import pytest

from harness.packs.qwen3.tolerances import ATTENTION_ATOL_RMS
from harness.case import (
    GEOMETRY_FIELDS,
    DEFAULT_LOGITS_TOLERANCE,
    DEFAULT_TOLERANCE,
    default_tolerance,
    PRESETS,
    Case,
    SeqLens,
    SlotMode,
    Tolerance,
)
from harness.casefiles import (
    CASE_KEYS,
    CaseFileError,
    ExpressionError,
    Where,
    load_matrix,
    load_paths,
    parse_seq_lens,
    parse_slot_mode,
    select,
)
from harness.errors import UsageError

SPEC_EXAMPLE = """\
name: decode-rope-kv              # optional; default: the file's stem
op: rope_kv_write                 # an op from §4
kernel: reference                 # builtin name, or package.module:callable
geometry: tiny                    # preset; any geometry field may be overridden below
tolerance: {atol: 3.0e-3, rtol: 3.0e-3, max_error_ratio: 0.02}
timeout_s: 60
env: {PTO2_RING_HEAP: "1073741824"}   # set in the worker process
matrix:                           # cartesian product of every axis
  batch: [1, 16]
  seq_lens: ["const(1)", "uniform(1, 3756)", "multi_block"]
  slot_mode: [arange, random, "const(-1)", "padded(0.25)"]
  seed: [1234, 7]
exclude:
  - {batch: 1, slot_mode: "padded(0.25)"}
include:                          # extra cases, each a full set of values
  - {name: warmup-scratch, batch: 16, slot_mode: "const(-1)", scratch_pages: 1, block_value: 0, seed: 1}
"""


def write(tmp_path, text: str, name: str = "m.yaml"):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load(tmp_path, text: str, name: str = "m.yaml") -> list[Case]:
    return load_matrix(write(tmp_path, text, name))


def error(tmp_path, text: str, name: str = "m.yaml") -> CaseFileError:
    path = write(tmp_path, text, name)
    with pytest.raises(CaseFileError) as info:
        load_matrix(path)
    err = info.value
    assert "\n" not in str(err)
    assert str(err).startswith(str(path))
    return err


def ids(cases) -> list[str]:
    return [c.case_id for c in cases]


# ---------------------------------------------------------------------------
# The example of docs/cases.md
# ---------------------------------------------------------------------------

class TestSpecExample:
    @pytest.fixture
    def cases(self, tmp_path):
        return load(tmp_path, SPEC_EXAMPLE, "decode.yaml")

    def test_count(self, cases):
        # 2 * 3 * 4 * 2 = 48, minus batch 1 x padded (3 * 2 = 6), plus one include
        assert len(cases) == 43

    def test_id_format(self, cases):
        assert "decode-rope-kv[batch=16,seq_lens=uniform(1,3756),slot_mode=arange,seed=1234]" in ids(cases)
        assert ids(cases)[0] == "decode-rope-kv[batch=1,seq_lens=const(1),slot_mode=arange,seed=1234]"
        assert ids(cases)[-1] == "decode-rope-kv[warmup-scratch]"
        assert not any("padded" in i and "batch=1," in i for i in ids(cases))
        assert len(set(ids(cases))) == 43
        assert not any(" " in i or "/" in i or "::" in i for i in ids(cases))

    def test_case_values(self, cases, tmp_path):
        case = next(c for c in cases
                    if c.case_id == "decode-rope-kv[batch=16,seq_lens=uniform(1,3756),slot_mode=arange,seed=1234]")
        assert case.matrix == "decode-rope-kv"
        assert case.source == f"{tmp_path / 'decode.yaml'}:8"
        assert case.op == "rope_kv_write"
        assert case.kernel == "reference"
        assert case.geometry == PRESETS["tiny"].__class__(**{**PRESETS["tiny"].__dict__, "batch": 16})
        assert case.seq_lens == SeqLens("uniform", (1, 3756))
        assert case.slot_mode == SlotMode("arange")
        assert case.seed == 1234
        assert case.timeout_s == 60.0 and isinstance(case.timeout_s, float)
        assert case.env == {"PTO2_RING_HEAP": "1073741824"}
        assert case.tier == "ci"
        tol = Tolerance(atol=3e-3, rtol=3e-3, max_error_ratio=0.02)
        assert case.tolerance == {"query": tol, "k_cache": tol, "v_cache": tol}
        assert case.params == {
            "op": "rope_kv_write", "kernel": "reference", "geometry": "tiny",
            "tolerance": {"atol": 3e-3, "rtol": 3e-3, "max_error_ratio": 0.02},
            "timeout_s": 60, "env": {"PTO2_RING_HEAP": "1073741824"},
            "batch": 16, "seq_lens": "uniform(1,3756)", "slot_mode": "arange", "seed": 1234,
        }
        assert list(case.params)[-4:] == ["batch", "seq_lens", "slot_mode", "seed"]

    def test_include(self, cases, tmp_path):
        inc = cases[-1]
        assert inc.source == f"{tmp_path / 'decode.yaml'}:16"
        assert inc.geometry.batch == 16
        assert inc.slot_mode == SlotMode("const", -1)
        assert inc.scratch_pages == 1 and inc.block_value == 0 and inc.seed == 1
        assert inc.num_pages == 1
        # layered over the top level, not over the axes: seq_lens falls back to the default
        assert inc.seq_lens == SeqLens("const", (1,))
        assert "name" not in inc.params and "seq_lens" not in inc.params
        assert inc.params["slot_mode"] == "const(-1)"

    def test_wire_round_trip(self, cases):
        for case in (cases[0], cases[-1]):
            assert Case.from_wire(case.to_wire()) == case

    def test_params_not_shared(self, cases):
        cases[0].params["tolerance"]["atol"] = 1.0
        assert cases[1].params["tolerance"]["atol"] == 3e-3


# ---------------------------------------------------------------------------
# Defaults, names, geometry
# ---------------------------------------------------------------------------

def test_every_case_key_has_a_parser_and_a_default():
    from harness.casefiles import values
    assert set(values._PARSERS) == set(CASE_KEYS)
    assert set(values._DEFAULT_PLAIN) | set(GEOMETRY_FIELDS) == set(CASE_KEYS)


def test_defaults(tmp_path):
    (case,) = load(tmp_path, "op: rope_kv_write\n", "single.yaml")
    assert case.case_id == "single"
    assert case.matrix == "single"
    assert case.source == f"{tmp_path / 'single.yaml'}:1"
    assert case.kernel == "reference"
    assert case.geometry == PRESETS["tiny"]
    assert case.seq_lens == SeqLens("const", (1,))
    assert case.slot_mode == SlotMode("arange")
    assert case.seed == 0
    assert case.timeout_s == 60.0
    assert case.tier == "ci"
    assert case.env == {}
    assert case.tolerance == {}
    assert case.tolerance_for("query") == DEFAULT_TOLERANCE
    assert case.chunk_size is None and case.block_value is None and case.scratch_pages is None
    assert case.params == {"op": "rope_kv_write"}


def test_stem_is_made_id_safe(tmp_path):
    (case,) = load(tmp_path, "op: rope_kv_write\n", "my cases:v2.yaml")
    assert case.case_id == "my-cases-v2"


def test_bad_name(tmp_path):
    err = error(tmp_path, "name: a/b\nop: rope_kv_write\n")
    assert (err.line, err.column, err.field) == (1, 7, "name")
    assert "not usable in a test id" in err.message


def test_geometry_preset_and_overrides(tmp_path):
    (case,) = load(tmp_path, """\
        op: paged_decode_attention
        geometry: qwen3-14b
        batch: 2
        eps: 1e-5
        rope_theta: 10000
        num_pages: 100
    """)
    g = case.geometry
    assert (g.batch, g.num_heads, g.num_kv_heads, g.head_dim, g.page_size) == (2, 40, 8, 128, 128)
    assert g.eps == 1e-5 and isinstance(g.eps, float)       # 1e-5 is a float (YAML 1.2 style)
    assert g.rope_theta == 10000.0 and isinstance(g.rope_theta, float)
    assert case.num_pages == 100


def test_geometry_axis(tmp_path):
    cases = load(tmp_path, """\
        op: paged_decode_attention
        matrix:
          geometry: [tiny, qwen3-14b]
    """)
    assert ids(cases) == ["m[geometry=tiny]", "m[geometry=qwen3-14b]"]
    assert [c.geometry.head_dim for c in cases] == [32, 128]


def test_single_valued_axes_stay_out_of_the_id(tmp_path):
    cases = load(tmp_path, """\
        op: rope_kv_write
        matrix:
          kernel: [reference]
          seed: [3, 4]
    """)
    assert ids(cases) == ["m[seed=3]", "m[seed=4]"]
    assert cases[0].params == {"op": "rope_kv_write", "kernel": "reference", "seed": 3}


def test_single_case_matrix_gets_the_bare_name(tmp_path):
    (case,) = load(tmp_path, "op: rope_kv_write\nmatrix:\n  seed: [5]\n")
    assert case.case_id == "m"
    assert case.source.endswith("m.yaml:2")


def test_kernel_import_path_and_axis(tmp_path):
    cases = load(tmp_path, """\
        op: fused_rope_decode_attention
        matrix:
          kernel: [reference, returns_query, "my_pkg.kernels:fused"]
    """)
    assert [c.kernel for c in cases] == ["reference", "returns_query", "my_pkg.kernels:fused"]
    assert ids(cases)[2] == "m[kernel=my_pkg.kernels:fused]"


def test_every_value_form(tmp_path):
    (case,) = load(tmp_path, """\
        op: prefill_attention
        kernel: reference
        seq_lens: [20, 40]
        batch: 2
        slot_mode: "padded(.5)"
        chunk_size: 8
        seed: 9
        timeout_s: 2.5
        tier: device
        env: {A: 1, B: 0x10, C: 1.5e3, D: text}
    """)
    assert case.seq_lens == SeqLens("list", (20, 40))
    assert case.slot_mode == SlotMode("padded", 0.5)
    assert case.chunk_size == 8
    assert case.timeout_s == 2.5
    assert case.tier == "device"
    assert case.env == {"A": "1", "B": "0x10", "C": "1.5e3", "D": "text"}   # numbers as written
    assert case.params["seq_lens"] == "[20,40]"
    assert case.params["slot_mode"] == "padded(0.5)"


def test_yaml_anchors_and_merge_keys(tmp_path):
    cases = load(tmp_path, """\
        op: rope_kv_write
        include:
          - &one {batch: 2, seed: 3}
          - {<<: *one, seed: 4}
    """)
    assert ids(cases) == ["m[batch=2,seed=3]", "m[batch=2,seed=4]"]
    assert [c.seed for c in cases] == [3, 4]


def test_explicit_keys_override_merged_ones_but_not_each_other(tmp_path):
    (case,) = load(tmp_path, """\
        op: rope_kv_write
        include:
          - {<<: {seed: 1, batch: 2}, seed: 5}
    """)
    assert (case.seed, case.geometry.batch) == (5, 2)
    err = error(tmp_path, "op: rope_kv_write\ninclude:\n  - {<<: {seed: 1}, seed: 5, seed: 6}\n")
    assert err.message == "duplicate key 'seed' (first at line 3)"


# ---------------------------------------------------------------------------
# Expansion: include and exclude
# ---------------------------------------------------------------------------

def test_include_without_name_lists_differing_values(tmp_path):
    cases = load(tmp_path, """\
        op: rope_kv_write
        seed: 1
        matrix:
          batch: [1, 2]
        include:
          - {seed: 1, slot_mode: random, batch: 3}
          - {seed: 2}
    """)
    assert ids(cases) == ["m[batch=1]", "m[batch=2]", "m[slot_mode=random,batch=3]", "m[seed=2]"]
    assert cases[2].source.endswith("m.yaml:6") and cases[3].source.endswith("m.yaml:7")
    assert cases[3].geometry.batch == PRESETS["tiny"].batch     # not from the axis


def test_include_only_file(tmp_path):
    cases = load(tmp_path, """\
        op: rope_kv_write
        include:
          - {name: a, seed: 1}
          - {name: b, seed: 2}
    """)
    assert ids(cases) == ["m[a]", "m[b]"]


def test_exclude_compares_parsed_values(tmp_path):
    cases = load(tmp_path, """\
        op: rope_kv_write
        matrix:
          seq_lens: ["uniform(1,3756)", "const(1)"]
          slot_mode: ["padded(0.25)", arange]
        exclude:
          - {seq_lens: "uniform(1, 3756)", slot_mode: "padded( .25 )"}
    """)
    assert ids(cases) == [
        "m[seq_lens=uniform(1,3756),slot_mode=arange]",
        "m[seq_lens=const(1),slot_mode=padded(0.25)]",
        "m[seq_lens=const(1),slot_mode=arange]",
    ]


def test_exclude_matches_defaults_and_preset_values(tmp_path):
    cases = load(tmp_path, """\
        op: rope_kv_write
        matrix:
          kernel: [reference, skip_rope]
          batch: [4, 1]
        exclude:
          - {kernel: reference, batch: 4, seed: 0}   # seed 0 is the default
    """)
    assert ids(cases) == ["m[kernel=reference,batch=1]", "m[kernel=skip_rope,batch=4]", "m[kernel=skip_rope,batch=1]"]


def test_exclude_matching_nothing_is_an_error(tmp_path):
    err = error(tmp_path, """\
        op: rope_kv_write
        matrix:
          batch: [1, 2]
        exclude:
          - {batch: 3}
    """)
    assert (err.line, err.column, err.field) == (5, 5, "exclude[0]")
    assert "matches no case" in err.message


def test_everything_excluded_is_an_error(tmp_path):
    err = error(tmp_path, """\
        op: rope_kv_write
        matrix:
          batch: [1, 2]
        exclude:
          - {op: rope_kv_write}
    """)
    assert (err.line, err.field) == (2, "matrix")
    assert "every case is excluded" in err.message


def test_empty_exclude_entry(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\nmatrix: {seed: [1, 2]}\nexclude:\n  - {}\n")
    assert (err.line, err.field) == (4, "exclude[0]")


def test_exclude_without_matrix(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\nexclude:\n  - {seed: 1}\n")
    assert (err.line, err.field) == (2, "exclude")


# ---------------------------------------------------------------------------
# Tolerance
# ---------------------------------------------------------------------------

def test_per_output_tolerance(tmp_path):
    (case,) = load(tmp_path, """\
        op: decode_layers
        tolerance:
          logits: {atol: 0.1}
          next_hidden: {rtol: 0.5, max_error_ratio: 0}
          k_cache: {atol: 0, rtol: 0, max_error_ratio: 0}
    """)
    assert case.tolerance["logits"] == Tolerance(0.1, DEFAULT_LOGITS_TOLERANCE.rtol,
                                                 DEFAULT_LOGITS_TOLERANCE.max_error_ratio,
                                                 DEFAULT_LOGITS_TOLERANCE.argmax_margin)
    hidden_default = default_tolerance("decode_layers", "next_hidden")
    assert case.tolerance["next_hidden"] == Tolerance(hidden_default.atol, 0.5, 0.0)
    assert case.tolerance["k_cache"] == Tolerance(0.0, 0.0, 0.0)
    assert "v_cache" not in case.tolerance
    assert case.tolerance_for("v_cache") == default_tolerance("decode_layers", "v_cache")


def test_flat_tolerance_fills_every_output_and_cache(tmp_path):
    (case,) = load(tmp_path, "op: decode_layers\ntolerance: {atol: 0.5, argmax_margin: 0.2}\n")
    assert set(case.tolerance) == {"logits", "next_hidden", "k_cache", "v_cache"}
    assert case.tolerance["logits"] == Tolerance(0.5, DEFAULT_LOGITS_TOLERANCE.rtol,
                                                 DEFAULT_LOGITS_TOLERANCE.max_error_ratio, 0.2)
    hidden_default = default_tolerance("decode_layers", "next_hidden")
    assert case.tolerance["next_hidden"] == Tolerance(0.5, hidden_default.rtol, hidden_default.max_error_ratio)


def test_tolerance_axis(tmp_path):
    cases = load(tmp_path, """\
        op: paged_decode_attention
        matrix:
          tolerance: [{atol: 0.001}, {out: {atol: 0.01}}]
    """)
    assert ids(cases) == ["m[tolerance={atol:0.001}]", "m[tolerance={out:{atol:0.01}}]"]
    # an atol given is a fixed atol (no atol_rms unless given too)
    assert cases[1].tolerance == {"out": Tolerance(0.01, DEFAULT_TOLERANCE.rtol, DEFAULT_TOLERANCE.max_error_ratio)}


def test_atol_rms_in_a_case_file(tmp_path):
    cases = load(tmp_path, """\
        op: fused_rope_decode_attention
        matrix:
          tolerance: [{out: {atol_rms: null}}, {query: {atol_rms: 0.05}}, {out: {rtol: 0.01}},
                      {out: {atol: 0.01, atol_rms: 0.03}}]
    """)
    assert cases[0].tolerance["out"].atol_rms is None                    # null: a fixed atol
    assert cases[1].tolerance["query"] == replace(DEFAULT_TOLERANCE, atol_rms=0.05)
    assert cases[2].tolerance["out"].atol_rms == ATTENTION_ATOL_RMS      # other fields keep the default's
    assert cases[3].tolerance["out"] == replace(DEFAULT_TOLERANCE, atol=0.01, atol_rms=0.03)


@pytest.mark.parametrize("tolerance, where, message", [
    ("{query: {atol: 1}}", "3:13: tolerance.query", "op paged_decode_attention has no output or cache 'query'"),
    ("{out: {argmax_margin: 1}}", "3:19: tolerance.out.argmax_margin", "argmax_margin applies to logits only"),
    ("{argmax_margin: 0.1}", "3:13: tolerance.argmax_margin", "op paged_decode_attention has no logits"),
    ("{atl: 1}", "3:13: tolerance.atl", "unknown tolerance field 'atl'; did you mean 'atol'?"),
    ("{atol: 1, out: {atol: 1}}", "3:22: tolerance.out", "mixes tolerance fields and per-output mappings"),
    ("{max_error_ratio: 1.5}", "3:30: tolerance.max_error_ratio", "must be <= 1, got 1.5"),
    ("{atol: -1}", "3:19: tolerance.atol", "must be >= 0, got -1"),
    ("{atol: true}", "3:19: tolerance.atol", "expected a number, got true (a boolean)"),
    ("0.1", "3:12: tolerance", "expected {atol, rtol, max_error_ratio} or a mapping"),
])
def test_bad_tolerance(tmp_path, tolerance, where, message):
    err = error(tmp_path, f"op: paged_decode_attention\nseed: 1\ntolerance: {tolerance}\n")
    assert f"{err.line}:{err.column}: {err.field}" == where
    assert message in err.message


def test_tolerance_error_positions_in_block_style(tmp_path):
    err = error(tmp_path, """\
        op: paged_decode_attention
        tolerance:
          out:
            atol: 0.1
            argmax_margin: 0.5
    """)
    assert str(err).endswith("m.yaml:5:5: tolerance.out.argmax_margin: argmax_margin applies to logits only")
    err = error(tmp_path, """\
        op: paged_decode_attention
        tolerance:
          out: {atol: 0.1}
          querry: {atol: 0.1}
    """)
    assert (err.line, err.column, err.field) == (4, 3, "tolerance.querry")
    assert err.message.startswith("op paged_decode_attention has no output or cache 'querry' (valid: out, k_cache, v_cache)")


# ---------------------------------------------------------------------------
# parse_seq_lens / parse_slot_mode
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    ("const(1)", SeqLens("const", (1,))),
    (" const( 7 ) ", SeqLens("const", (7,))),
    ("uniform(1, 3756)", SeqLens("uniform", (1, 3756))),
    ("uniform(5,5)", SeqLens("uniform", (5, 5))),
    ([3, 1, 2], SeqLens("list", (3, 1, 2))),
    ("[3, 1,2]", SeqLens("list", (3, 1, 2))),
    ("multi_block", SeqLens("multi_block")),
])
def test_parse_seq_lens(value, expected):
    assert parse_seq_lens(value, "here") == expected


def test_seq_lens_normal_forms():
    assert str(parse_seq_lens("uniform( 1 ,3756 )", "x")) == "uniform(1,3756)"
    assert str(parse_seq_lens([1, 2], "x")) == "[1,2]"


@pytest.mark.parametrize("value, message", [
    ("const(0)", "sequence lengths must be >= 1, got 0"),
    ("const(-3)", "sequence lengths must be >= 1, got -3"),
    ("uniform(0, 4)", "sequence lengths must be >= 1, got 0"),
    ("uniform(9, 3)", "uniform(lo, hi) needs lo <= hi, got uniform(9, 3)"),
    ("uniform(1)", "unknown seq_lens 'uniform(1)'"),
    ("const(1.5)", "unknown seq_lens"),
    ("__import__('os')", "unknown seq_lens"),
    ("Multi_Block", "unknown seq_lens"),
    (5, "expected seq_lens as const(n), uniform(lo, hi), a list of ints, multi_block; got 5"),
    (True, "got true (a boolean)"),
    ([], "must not be empty"),
    ([1, True], "expected a sequence length (an integer), got true (a boolean)"),
    ([1, 0], "sequence lengths must be >= 1, got 0"),
    ({"a": 1}, "got a mapping"),
])
def test_parse_seq_lens_bad(value, message):
    with pytest.raises(CaseFileError) as info:
        parse_seq_lens(value, "--seq-lens")
    assert message in str(info.value)
    assert str(info.value).startswith("--seq-lens")


def test_parse_with_a_where():
    with pytest.raises(CaseFileError) as info:
        parse_seq_lens([1, -1], Where("cases/x.yaml", 3, 7, "seq_lens"))
    assert str(info.value) == "cases/x.yaml:3:7: seq_lens[1]: sequence lengths must be >= 1, got -1"


@pytest.mark.parametrize("value, expected", [
    ("arange", SlotMode("arange")),
    ("random", SlotMode("random")),
    ("const(-1)", SlotMode("const", -1)),
    ("const( 5 )", SlotMode("const", 5)),
    ("padded(0.25)", SlotMode("padded", 0.25)),
    ("padded(0)", SlotMode("padded", 0.0)),
    ("padded(1)", SlotMode("padded", 1.0)),
    ("padded(2.5e-1)", SlotMode("padded", 0.25)),
])
def test_parse_slot_mode(value, expected):
    mode = parse_slot_mode(value, "x")
    assert mode == expected
    assert type(mode.value) is type(expected.value)


@pytest.mark.parametrize("value, message", [
    ("foo", "unknown slot mode 'foo' (expected arange, random, const(v), padded(f))"),
    ("padded(1.5)", "padded(f) needs 0 <= f <= 1, got 1.5"),
    ("padded(-0.1)", "padded(f) needs 0 <= f <= 1"),
    ("const(x)", "unknown slot mode"),
    ("const(1.0)", "unknown slot mode"),
    (-1, "expected a slot mode (arange, random, const(v), padded(f)), got -1"),
    (None, "got null"),
])
def test_parse_slot_mode_bad(value, message):
    with pytest.raises(CaseFileError) as info:
        parse_slot_mode(value, "--slot-mode")
    assert message in str(info.value)


def test_slot_mode_error_in_file_names_the_axis_element(tmp_path):
    err = error(tmp_path, """\
        op: rope_kv_write
        matrix:
          batch: [1]
          slot_mode: [arange, random, foo]
    """)
    assert str(err) == (f"{tmp_path / 'm.yaml'}:4:31: matrix.slot_mode[2]: "
                        "unknown slot mode 'foo' (expected arange, random, const(v), padded(f))")


# ---------------------------------------------------------------------------
# Bad input, one class at a time, with its place
# ---------------------------------------------------------------------------

def test_malformed_yaml(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\nmatrix:\n  batch: [1, 2\n  seed: [1]\n")
    assert (err.line, err.column, err.field) == (4, 7, "")
    assert err.message == ("invalid YAML: expected ',' or ']', but got ':' "
                           "(while parsing a flow sequence at line 3)")
    err = error(tmp_path, "op: rope_kv_write\n  seed: 1\n")
    assert (err.line, err.column) == (2, 7)
    assert "mapping values are not allowed here" in err.message


@pytest.mark.parametrize("text, line, column", [
    ("op: rope_kv_write\nmatrix:\n  batch: [1, 2\n", 3, 10),
    ("op: rope_kv_write\nmatrix:\n  batch: [1, 2\n\n# trailing comment\n", 3, 10),
    ("op: rope_kv_write\nenv: {A: 'x}\n", 2, 10),
])
def test_unclosed_at_end_of_file_points_at_the_opening(tmp_path, text, line, column):
    err = error(tmp_path, text)
    assert (err.line, err.column) == (line, column)
    assert err.message.startswith("invalid YAML: ") and "that starts here" in err.message


def test_tab_indentation_is_reported_with_its_place(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\nmatrix:\n\tseed: [1]\n")
    assert (err.line, err.column) == (3, 1)


@pytest.mark.parametrize("text, message", [
    ("op: rope_kv_write\nseed: !foo 3\n", "invalid YAML: could not determine a constructor for the tag '!foo'"),
    ("op: rope_kv_write\nseed: !!python/object:os.system {}\n", "unsupported YAML tag 'tag:yaml.org,2002:python/object:os.system'"),
    ("op: rope_kv_write\nenv: !!set {A}\n", "unsupported YAML tag 'tag:yaml.org,2002:set'"),
    ("op: rope_kv_write\nseed: 2024-01-01\n", "expected an integer, got '2024-01-01' (a date)"),
])
def test_yaml_tags_are_not_constructed(tmp_path, text, message):
    err = error(tmp_path, text)
    assert (err.line, err.column) == (2, text.split("\n")[1].index(":") + 3)
    assert message in err.message


def test_two_documents(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\n---\nop: rope_kv_write\n")
    assert err.line == 2 and "single document" in err.message


def test_empty_file(tmp_path):
    err = error(tmp_path, "# nothing\n")
    assert err.line is None and "empty case file" in err.message


def test_top_level_not_a_mapping(tmp_path):
    err = error(tmp_path, "- op: rope_kv_write\n")
    assert (err.line, err.column) == (1, 1)
    assert "must be a mapping" in err.message


def test_duplicate_yaml_key(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\nseed: 1\nseed: 2\n")
    assert (err.line, err.column, err.field) == (3, 1, "seed")
    assert err.message == "duplicate key 'seed' (first at line 2)"


def test_non_string_key(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\n1: 2\n")
    assert err.line == 2 and "keys must be plain strings" in err.message


def test_unknown_top_level_key(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\nsed: 1\n")
    assert (err.line, err.column, err.field) == (2, 1, "sed")
    assert err.message.startswith("unknown key 'sed'; did you mean 'seed'? (valid: name, op, kernel, geometry, batch,")


def test_unknown_matrix_key(tmp_path):
    err = error(tmp_path, """\
        op: rope_kv_write
        matrix:
          batch: [1, 2]
          slot_mdoe: [arange]
    """)
    assert str(err).startswith(
        f"{tmp_path / 'm.yaml'}:4:3: matrix.slot_mdoe: unknown key 'slot_mdoe'; did you mean 'slot_mode'? (valid: op,")
    assert "name" not in err.message.split("valid:")[1].split(",")[0]


def test_unknown_include_and_exclude_keys(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\ninclude:\n  - {name: a, sede: 1}\n")
    assert (err.line, err.field) == (3, "include[0].sede")
    err = error(tmp_path, "op: rope_kv_write\nmatrix: {seed: [1, 2]}\nexclude:\n  - {name: a}\n")
    assert (err.line, err.field) == (4, "exclude[0].name")


@pytest.mark.parametrize("text, field, message", [
    ("op: rope_kv_writ\n", "op", "unknown op 'rope_kv_writ'; did you mean 'rope_kv_write'?"),
    ("op: rope_kv_write\nkernel: refernce\n", "kernel", "unknown kernel 'refernce'; did you mean 'reference'?"),
    ("op: rope_kv_write\nkernel: 'my-pkg:fn'\n", "kernel", "or package.module:callable"),
    ("op: rope_kv_write\ngeometry: qwen3\n", "geometry", "unknown geometry preset 'qwen3'"),
    ("op: rope_kv_write\ntier: gpu\n", "tier", "unknown tier 'gpu' (expected one of: ci, device)"),
])
def test_unknown_names(tmp_path, text, field, message):
    err = error(tmp_path, text)
    assert err.field == field
    assert message in err.message
    assert err.line == text.count("\n")


def test_kernel_that_does_not_implement_the_op(tmp_path):
    err = error(tmp_path, "op: decode_layers\nkernel: triton\n")
    assert (err.line, err.column, err.field) == (2, 9, "kernel")
    assert err.message == ("kernel 'triton' does not implement op 'decode_layers' "
                           "(it implements: rope_kv_write, paged_decode_attention) (case m)")


def test_kernel_that_does_not_implement_an_axis_op(tmp_path):
    err = error(tmp_path, """\
        kernel: returns_query
        matrix:
          op: [fused_rope_decode_attention, rope_kv_write]
    """)
    assert (err.line, err.field) == (1, "kernel")
    assert err.message.endswith("(case m[op=rope_kv_write])")


def test_missing_op(tmp_path):
    err = error(tmp_path, "seed: 1\n")
    assert err.line == 1 and err.message.startswith("no op given")
    err = error(tmp_path, "include:\n  - {op: rope_kv_write}\n  - {seed: 2}\n")
    assert (err.line, err.field) == (3, "include[1]")


@pytest.mark.parametrize("line, message", [
    ("batch: '4'", "expected an integer, got '4' (a string)"),
    ("batch: true", "expected an integer, got true (a boolean)"),
    ("batch: 4.0", "expected an integer, got 4.0"),
    ("batch: 0", "must be >= 1, got 0"),
    ("page_size: -16", "must be >= 1, got -16"),
    ("num_heads: 0", "must be >= 1, got 0"),
    ("vocab: null", "expected an integer, got null"),
    ("head_dim: 33", "head_dim must be even (RoPE rotate-half splits it in two), got 33"),
    ("eps: 0", "must be > 0, got 0"),
    ("eps: '1e-6'", "expected a number, got '1e-6' (a string)"),
    ("rope_theta: .inf", "must be finite"),
    ("seed: -1", "must be >= 0, got -1"),
    ("seed: false", "expected an integer, got false (a boolean)"),
    ("timeout_s: 0", "must be > 0, got 0"),
    ("timeout_s: true", "expected a number, got true (a boolean)"),
    ("timeout_s: [1]", "expected a number, got a list"),
    ("chunk_size: 0", "must be >= 1, got 0"),
    ("block_value: -1", "must be >= 0, got -1"),
    ("scratch_pages: 0", "must be >= 1, got 0"),
    ("op: 3", "expected a string, got 3"),
    ("env: {A: yes}", "environment values must be strings or numbers, got true (a boolean); quote it"),
    ("env: {A: null}", "environment values must be strings or numbers, got null"),
    ("env: {A: [1]}", "got a list"),
    ("env: {1A: x}", "'1A' is not a valid environment variable name"),
    ("env: [A]", "expected a mapping of variable name to value, got a list"),
    ("name: 5", "expected a string, got 5"),
])
def test_wrong_types_and_values(tmp_path, line, message):
    text = f"op: prefill_attention\n{line}\n" if not line.startswith("op:") else f"{line}\n"
    err = error(tmp_path, text)
    assert err.line == text.count("\n")
    assert err.field.startswith(line.split(":")[0])
    assert message in err.message


def test_floats_accept_ints(tmp_path):
    (case,) = load(tmp_path, "op: rope_kv_write\neps: 1\ntimeout_s: 5\ntolerance: {atol: 0}\n")
    assert case.geometry.eps == 1.0 and isinstance(case.geometry.eps, float)
    assert case.timeout_s == 5.0 and isinstance(case.timeout_s, float)
    assert case.tolerance["query"].atol == 0.0 and isinstance(case.tolerance["query"].atol, float)


def test_matrix_not_a_mapping(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\nmatrix: [1, 2]\n")
    assert (err.line, err.column, err.field) == (2, 9, "matrix")
    assert "expected a mapping" in err.message


def test_empty_matrix(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\nmatrix: {}\n")
    assert (err.line, err.field) == (2, "matrix")
    assert "empty matrix" in err.message


def test_empty_axis(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\nmatrix:\n  batch: [1]\n  seed: []\n")
    assert (err.line, err.column, err.field) == (4, 9, "matrix.seed")
    assert "empty axis" in err.message


def test_axis_not_a_list(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\nmatrix:\n  seed: 3\n")
    assert (err.line, err.field) == (3, "matrix.seed")
    assert "expected a non-empty list of values, got 3" in err.message


def test_axis_also_at_top_level(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\nseed: 1\nmatrix:\n  seed: [1, 2]\n")
    assert (err.line, err.field) == (4, "matrix.seed")
    assert "set both at top level (line 2) and as a matrix axis" in err.message


def test_bool_in_axis(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\nmatrix:\n  batch: [1, true]\n")
    assert (err.line, err.column, err.field) == (3, 14, "matrix.batch[1]")
    assert err.message == "expected an integer, got true (a boolean)"


# ---------------------------------------------------------------------------
# Impossible geometry and input modes
# ---------------------------------------------------------------------------

def test_heads_not_a_multiple(tmp_path):
    err = error(tmp_path, """\
        op: paged_decode_attention
        matrix:
          num_kv_heads: [2, 3]
    """)
    assert (err.line, err.column, err.field) == (3, 21, "matrix.num_kv_heads[1]")
    assert err.message == "num_heads 4 is not a multiple of num_kv_heads 3 (case m[num_kv_heads=3])"


def test_heads_not_a_multiple_blames_the_preset_when_nothing_else_is_given(tmp_path):
    err = error(tmp_path, "op: paged_decode_attention\nnum_heads: 5\n")
    assert (err.line, err.field) == (2, "num_heads")


def test_hidden_need_not_match_heads(tmp_path):
    (case,) = load(tmp_path, "op: decode_layers\nhidden: 96\n")
    assert case.geometry.hidden == 96


def test_explicit_seq_lens_length_must_match_batch(tmp_path):
    err = error(tmp_path, "op: paged_decode_attention\nbatch: 3\nseq_lens: [1, 2]\n")
    assert (err.line, err.column, err.field) == (3, 11, "seq_lens")
    assert "explicit seq_lens has 2 lengths but batch is 3" in err.message


def test_seq_lens_beyond_capacity(tmp_path):
    # tiny: page 16; uniform up to 40 -> 3 blocks per sequence, batch 4 -> 12 pages
    err = error(tmp_path, """\
        op: paged_decode_attention
        seq_lens: "uniform(1, 40)"
        matrix:
          scratch_pages: [12, 11]
    """)
    assert (err.line, err.field) == (4, "matrix.scratch_pages[1]")
    assert err.message == "seq_lens need up to 12 pages but the cache has 11 (case m[scratch_pages=11])"
    err = error(tmp_path, "op: paged_decode_attention\nseq_lens: multi_block\nnum_pages: 8\n")
    assert (err.line, err.field) == (3, "num_pages")
    assert "seq_lens need up to 16 pages but the cache has 8" in err.message    # 4 rows * 4 blocks


def test_derived_num_pages_always_fits(tmp_path):
    (case,) = load(tmp_path, "op: paged_decode_attention\ngeometry: qwen3-14b\nseq_lens: 'uniform(1, 3756)'\n")
    assert case.num_pages == 16 * 30


def test_block_value_lifts_the_capacity_limit(tmp_path):
    (case,) = load(tmp_path, """\
        op: rope_kv_write
        batch: 16
        seq_lens: "const(500)"
        slot_mode: "const(-1)"
        scratch_pages: 1
        block_value: 0
    """)
    assert case.num_pages == 1 and case.block_value == 0


def test_block_value_must_be_a_page(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\nbatch: 1\nscratch_pages: 2\nblock_value: 2\n")
    assert (err.line, err.field) == (4, "block_value")
    assert "block_value 2 is not a page of the cache (it has 2 pages)" in err.message


def test_block_value_with_batch_needs_negative_const_slots(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\nbatch: 2\nblock_value: 0\n")
    assert (err.line, err.field) == (3, "block_value")
    assert "block_value with batch 2 needs slot_mode const(v) with v < 0, got arange" in err.message
    err = error(tmp_path, "op: rope_kv_write\nbatch: 2\nblock_value: 0\nslot_mode: 'padded(0.5)'\n")
    assert (err.line, err.field) == (4, "slot_mode")
    (case,) = load(tmp_path, "op: rope_kv_write\nbatch: 1\nblock_value: 0\n")
    assert case.block_value == 0


def test_const_slot_collides_with_batch(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\nmatrix:\n  slot_mode: ['const(-1)', 'const(3)']\n")
    assert (err.line, err.field) == (3, "matrix.slot_mode[1]")
    assert "slot_mode const(3) writes up to 4 rows to the same slot" in err.message
    (case,) = load(tmp_path, "op: rope_kv_write\nbatch: 1\nslot_mode: 'const(3)'\n")
    assert case.slot_mode == SlotMode("const", 3)


def test_prefill_chunks_count_as_rows_for_slot_collisions(tmp_path):
    err = error(tmp_path, "op: prefill_attention\nbatch: 1\nseq_lens: const(40)\nslot_mode: 'const(5)'\n")
    assert "writes up to 40 rows to the same slot" in err.message
    err = error(tmp_path, "op: prefill_attention\nbatch: 1\nseq_lens: const(40)\nblock_value: 0\n")
    assert "valid slots would collide" in err.message
    (case,) = load(tmp_path, "op: prefill_attention\nbatch: 1\nseq_lens: const(40)\nchunk_size: 1\n"
                             "slot_mode: 'const(5)'\nnum_pages: 3\n")
    assert case.chunk_size == 1


def test_read_only_ops_ignore_slot_rules(tmp_path):
    (case,) = load(tmp_path, "op: paged_decode_attention\nslot_mode: 'const(3)'\n")
    assert case.geometry.batch == 4


def test_an_include_repeating_a_matrix_case_is_refused(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\nmatrix:\n  batch: [1, 16]\n  seed: [1]\n"
                          "include:\n  - {batch: 16, seed: 1}\n")
    assert "case 'm[batch=16,seed=1]' is the same case as 'm[batch=16]'" in err.message


def test_const_slot_beyond_the_cache(tmp_path):
    err = error(tmp_path, "op: rope_kv_write\nbatch: 1\nslot_mode: 'const(16)'\n")   # 1 page of 16 slots
    assert "slot_mode const(16) is beyond the cache (1 pages of 16 = 16 slots)" in err.message


def test_chunk_size_only_for_prefill(tmp_path):
    (case,) = load(tmp_path, "op: prefill_attention\nchunk_size: 4\n")
    assert case.chunk_size == 4
    err = error(tmp_path, "op: rope_kv_write\nchunk_size: 4\n")
    assert (err.line, err.field) == (2, "chunk_size")
    assert "chunk_size applies to op prefill_attention only, not rope_kv_write" in err.message


# ---------------------------------------------------------------------------
# Ids: duplicates and safety
# ---------------------------------------------------------------------------

def test_duplicate_axis_value(tmp_path):
    err = error(tmp_path, """\
        op: rope_kv_write
        matrix:
          seq_lens: ["uniform(1,3)", "uniform(1, 3)"]
    """)
    assert (err.line, err.field) == (3, "matrix.seq_lens[1]")
    assert "duplicate value uniform(1,3) (same as matrix.seq_lens[0] at line 3)" in err.message


def test_duplicate_include_names(tmp_path):
    err = error(tmp_path, """\
        op: rope_kv_write
        include:
          - {name: warm, seed: 1}
          - {name: warm, seed: 2}
    """)
    assert (err.line, err.field) == (4, "include[1]")
    assert err.message == "duplicate case id 'm[warm]' (also defined at line 3)"


def test_include_duplicating_a_matrix_case(tmp_path):
    err = error(tmp_path, """\
        op: rope_kv_write
        matrix:
          seed: [1, 2]
        include:
          - {seed: 2}
    """)
    assert (err.line, err.field) == (5, "include[0]")
    assert err.message == "duplicate case id 'm[seed=2]' (also defined at line 2)"


def test_ids_are_safe_for_pytest(tmp_path):
    cases = load(tmp_path, """\
        op: rope_kv_write
        matrix:
          env: [{P: "/a/b::c d"}, {P: x}]
    """)
    for case in cases:
        assert "/" not in case.case_id and "::" not in case.case_id and " " not in case.case_id
    assert cases[0].env == {"P": "/a/b::c d"}


# ---------------------------------------------------------------------------
# load_paths
# ---------------------------------------------------------------------------

def test_load_paths_directory(tmp_path):
    write(tmp_path, "op: rope_kv_write\nmatrix: {seed: [1, 2]}\n", "cases/b.yaml")
    write(tmp_path, "op: rope_kv_write\n", "cases/a.yml")
    write(tmp_path, "op: rope_kv_write\n", "cases/sub/c.yaml")
    write(tmp_path, "not yaml: [", "cases/notes.txt")
    write(tmp_path, "not yaml: [", "cases/.hidden/x.yaml")
    cases = load_paths([tmp_path / "cases"])
    assert ids(cases) == ["a", "b[seed=1]", "b[seed=2]", "c"]
    # a file given twice (directly and through its directory) is loaded once
    again = load_paths([str(tmp_path / "cases" / "a.yml"), tmp_path / "cases"])
    assert ids(again) == ["a", "b[seed=1]", "b[seed=2]", "c"]
    assert ids(load_paths(tmp_path / "cases" / "b.yaml")) == ["b[seed=1]", "b[seed=2]"]


def test_load_paths_duplicate_ids_across_files(tmp_path):
    write(tmp_path, "op: rope_kv_write\n", "x/decode.yaml")
    write(tmp_path, "op: rope_kv_write\nseed: 3\n", "y/decode.yaml")
    with pytest.raises(CaseFileError) as info:
        load_paths([tmp_path / "x", tmp_path / "y"])
    err = info.value
    assert err.path == str(tmp_path / "y" / "decode.yaml") and err.line == 1
    assert f"duplicate case id 'decode' (also defined at {tmp_path / 'x' / 'decode.yaml'}:1" in err.message


def test_load_paths_missing_and_empty(tmp_path):
    with pytest.raises(CaseFileError, match="no such file or directory"):
        load_paths([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(CaseFileError, match=r"no case files \(\*\.yaml, \*\.yml\)"):
        load_paths([tmp_path / "empty"])


def test_load_paths_reports_the_bad_file(tmp_path):
    write(tmp_path, "op: rope_kv_write\n", "cases/a.yaml")
    bad = write(tmp_path, "op: rope_kv_write\nbatch: 0\n", "cases/b.yaml")
    with pytest.raises(CaseFileError) as info:
        load_paths([tmp_path / "cases"])
    assert str(info.value) == f"{bad}:2:8: batch: must be >= 1, got 0"


# ---------------------------------------------------------------------------
# CaseFileError
# ---------------------------------------------------------------------------

def test_case_file_error_format_and_pickle():
    err = CaseFileError("cases/decode.yaml", 14, 5, "matrix.slot_mode[2]", "unknown slot mode 'foo'")
    assert str(err) == "cases/decode.yaml:14:5: matrix.slot_mode[2]: unknown slot mode 'foo'"
    assert isinstance(err, ValueError)
    back = pickle.loads(pickle.dumps(err))
    assert (back.path, back.line, back.column, back.field, str(back)) == (
        err.path, err.line, err.column, err.field, str(err))
    assert str(CaseFileError("a.yaml", None, None, "", "cannot read")) == "a.yaml: cannot read"
    assert str(CaseFileError("a.yaml", 3, None, "", "dup")) == "a.yaml:3: dup"


# ---------------------------------------------------------------------------
# -k selection
# ---------------------------------------------------------------------------

@pytest.fixture
def spec_cases(tmp_path):
    return load(tmp_path, SPEC_EXAMPLE, "decode.yaml")


def _k(cases, expr):
    return ids(select(cases, expr))


@pytest.mark.parametrize("expr, count", [
    ("", 43),
    ("   ", 43),
    ("decode", 43),
    ("DECODE-ROPE", 43),                          # case-insensitive
    ("batch=16", 24),
    ("warmup", 1),
    ("not warmup", 42),
    ("batch=1, and seed=7", 9),                   # 3 seq_lens * 3 slot modes
    ("random or arange", 24),
    ("batch=1, and (random or arange)", 12),
    ("not (batch=16 or warmup)", 18),
    ("not not warmup", 1),
    ("seq_lens=uniform(1,3756)", 14),             # a glued group is part of the word
    ("'uniform(1,3756)' and slot_mode=const(-1)", 4),
    ('"padded(0.25)"', 6),
    ("nothing-like-this", 0),
])
def test_select(spec_cases, expr, count):
    assert len(select(spec_cases, expr)) == count


def test_select_keeps_order_and_none(spec_cases):
    assert _k(spec_cases, None) == ids(spec_cases)
    picked = _k(spec_cases, "seed=7 and multi_block and batch=16")
    assert picked == [i for i in ids(spec_cases) if "seed=7" in i and "multi_block" in i and "batch=16" in i]
    assert picked == [
        "decode-rope-kv[batch=16,seq_lens=multi_block,slot_mode=arange,seed=7]",
        "decode-rope-kv[batch=16,seq_lens=multi_block,slot_mode=random,seed=7]",
        "decode-rope-kv[batch=16,seq_lens=multi_block,slot_mode=const(-1),seed=7]",
        "decode-rope-kv[batch=16,seq_lens=multi_block,slot_mode=padded(0.25),seed=7]",
    ]


@pytest.mark.parametrize("expr, column, message", [
    ("a and", 6, "expected a substring, 'not' or '('; got end of input"),
    ("(a", 3, "expected ')'; got end of input"),
    ("a b", 3, "expected 'and', 'or' or end of input; got 'b'"),
    ("and", 1, "expected a substring, 'not' or '('; got 'and'"),
    (")", 1, "expected a substring, 'not' or '('; got ')'"),
    ("a or (b and)", 12, "got ')'"),
    ("not", 4, "got end of input"),
    ("'abc", 1, "unterminated quoted string"),
    ("a and ''", 7, "empty quoted string"),
    ("(" * 200 + "a" + ")" * 200, 102, "nested too deeply"),
])
def test_select_bad_expression(spec_cases, expr, column, message):
    with pytest.raises(ExpressionError) as info:
        select(spec_cases, expr)
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, UsageError)
    assert err.column == column
    assert message in err.message
    assert str(err) == f"-k {expr!r}: at column {column}: {err.message}"
    assert pickle.loads(pickle.dumps(err)).expression == expr


def test_select_never_evaluates(spec_cases):
    assert select(spec_cases, "__import__('os').system('false')") == []
