"""Hostile case files and flag values are refused with one located line, quickly (issue 13, item 8)."""
from __future__ import annotations

import argparse
import time

import pytest

from harness.casefiles import CaseFileError, load_matrix, load_paths
from harness.casefiles.located import MAX_DEPTH, MAX_NODES
from harness.casefiles.bounds import MAX_CASE_BYTES, case_bytes
from harness.cli.parser import MAX_SHARDS, build_parser
from harness.devices import MAX_DEVICES, DeviceError, parse_device_list
from harness.run.options import MAX_REPEAT


def _write(tmp_path, text, name="hostile.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _refused(path, *fragments, max_cases=None):
    start = time.monotonic()
    with pytest.raises(CaseFileError) as info:
        load_matrix(path) if max_cases is None else load_matrix(path, max_cases)
    assert time.monotonic() - start < 10
    text = str(info.value)
    assert "\n" not in text
    for fragment in fragments:
        assert fragment in text, text
    return text


def test_alias_bomb_is_refused_by_the_node_budget(tmp_path):
    lines = ["a0: &a0 [1, 2, 3, 4, 5, 6, 7, 8, 9]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    path = _write(tmp_path, "\n".join(["op: rope_kv_write", "env:", *("  " + ln for ln in lines)]) + "\n")
    _refused(path, f"hostile.yaml:", f"more than {MAX_NODES} values")


def test_aliases_within_the_budget_still_load(tmp_path):
    path = _write(tmp_path, "op: rope_kv_write\nmatrix:\n  seed: &s [1, 2]\n  batch: *s\n")
    assert len(load_matrix(path)) == 4


def test_merge_keys_that_merge_merges_do_not_blow_up(tmp_path):
    lines = ["m0: &m0 {k0: 1}"] + [f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}], k{i}: 1}}" for i in range(1, 40)]
    path = _write(tmp_path, "op: rope_kv_write\nenv:\n" + "".join(f"  {ln}\n" for ln in lines))
    _refused(path, "env.m0", "environment values")      # built in time, refused for what it is


@pytest.mark.parametrize("flow", [True, False])
def test_deep_nesting_is_one_line_not_a_recursion_error(tmp_path, flow):
    depth = 500
    if flow:
        text = "op: " + "[" * depth + "]" * depth + "\n"
    else:
        text = "op:\n" + "".join("  " * i + "-\n" for i in range(1, depth))
    path = _write(tmp_path, text)
    _refused(path, f"nested deeper than {MAX_DEPTH} levels", "hostile.yaml:")


def test_shipped_nesting_still_loads(tmp_path):
    path = _write(tmp_path, "op: fused_rope_decode_attention\ntolerance:\n  out: {atol: 0.1}\n")
    assert load_matrix(path)[0].tolerance["out"].atol == 0.1


def test_matrix_past_the_cap_is_refused_before_it_is_expanded(tmp_path):
    axes = "".join(f"  {k}: [{', '.join(str(v) for v in range(1, 11))}]\n"
                   for k in ("seed", "batch", "page_size", "hidden", "vocab", "intermediate", "num_layers"))
    path = _write(tmp_path, "op: rope_kv_write\nmatrix:\n" + axes)
    _refused(path, "hostile.yaml:2:1: matrix: expands to 10000000 cases", "cap of 100000 (--max-cases)")


def test_the_cap_is_a_parameter_and_counts_every_file(tmp_path):
    path = _write(tmp_path, "op: rope_kv_write\nmatrix:\n  seed: [1, 2, 3]\n")
    _refused(path, "expands to 3 cases, more than the cap of 2", max_cases=2)
    assert len(load_matrix(path, 3)) == 3
    _write(tmp_path, "name: other\nop: rope_kv_write\nmatrix:\n  seed: [1, 2]\n", "b.yaml")
    with pytest.raises(CaseFileError, match="hostile.yaml:2:1: matrix: expands to 3 cases, more than the 2 left of "
                                            "the cap of 4 after 2 cases of the files before it"):
        load_paths([tmp_path], max_cases=4)
    assert len(load_paths([tmp_path], max_cases=5)) == 5


def test_a_file_past_what_is_left_of_the_cap_is_refused_before_it_is_built(tmp_path, monkeypatch):
    """Counted against what the files before it left, not built and then counted (issue 37, item 6)."""
    from harness.casefiles import matrix
    _write(tmp_path, "name: first\nop: rope_kv_write\nmatrix:\n  seed: [1, 2, 3]\n", "a.yaml")
    _write(tmp_path, "name: second\nop: rope_kv_write\nmatrix:\n  seed: [1, 2, 3]\n  batch: [1, 2, 3]\n", "b.yaml")
    built: list[str] = []
    real = matrix._build_case
    monkeypatch.setattr(matrix, "_build_case", lambda spec, draft: built.append(spec.name) or real(spec, draft))
    with pytest.raises(CaseFileError, match="b.yaml:3:1: matrix: expands to 9 cases, more than the 7 left"):
        load_paths([tmp_path], max_cases=10)
    assert built == ["first"] * 3          # not one case of the second file was built


def test_the_default_cap_refuses_a_million_case_matrix_before_building_it(tmp_path, monkeypatch):
    from harness.casefiles import matrix
    monkeypatch.setattr(matrix, "_build_case", lambda spec, draft: pytest.fail("a case was built"))
    axes = "".join(f"  {k}: [{', '.join(str(v) for v in range(1, 11))}]\n"
                   for k in ("seed", "batch", "page_size", "hidden", "vocab", "intermediate"))
    path = _write(tmp_path, "op: rope_kv_write\nmatrix:\n" + axes)
    _refused(path, "expands to 1000000 cases, more than the cap of 100000 (--max-cases)")


def test_a_symlink_loop_in_a_case_directory_names_the_file(tmp_path):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "a.yaml").write_text("op: rope_kv_write\n")
    (cases / "b.yaml").symlink_to("c.yaml")
    (cases / "c.yaml").symlink_to("b.yaml")
    with pytest.raises(CaseFileError) as info:
        load_paths([cases])
    assert str(info.value) == f"{cases / 'b.yaml'}: is a symlink loop (it never reaches a file), not a case file"
    with pytest.raises(CaseFileError, match="c.yaml: is a symlink loop"):
        load_paths([cases / "c.yaml"])


@pytest.mark.parametrize("line, fragment", [
    ("seed: " + "9" * 5000, "hostile.yaml:2:7: seed: an integer of 5000 digits: larger than any key takes"),
    ("batch: " + "9" * 40, "hostile.yaml:2:8: batch: an integer of 40 digits"),
    ("seq_lens: const(" + "9" * 5000 + ")", "hostile.yaml:2:11: seq_lens: an integer of 5000 digits"),
    ("seq_lens: '[1, " + "9" * 5000 + "]'", "seq_lens: an integer of 5000 digits"),
    ("slot_mode: const(-" + "9" * 5000 + ")", "hostile.yaml:2:12: slot_mode: an integer of 5000 digits"),
])
def test_integers_too_large_for_any_key_name_the_field(tmp_path, line, fragment):
    path = _write(tmp_path, f"op: fused_rope_decode_attention\n{line}\n")
    assert len(_refused(path, fragment)) < 300


@pytest.mark.parametrize("flag", ["--seed", "--max-cases", "--hunt-seed"])
def test_a_flag_integer_of_thousands_of_digits_is_one_short_line(flag, capsys):
    command = "flake" if flag == "--hunt-seed" else "run"
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args([command, flag, "9" * 5000])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"{flag}: a number of 5000 digits" in err and len(err) < 400 and err.count("\n") == 1


@pytest.mark.parametrize("line, fragment", [
    ("batch: 1000000000", "hostile.yaml:2:8: batch: the case needs"),
    ("num_pages: 2000000000", "hostile.yaml:2:12: num_pages: the case needs"),
    ("seq_lens: uniform(1, 2000000000)", "hostile.yaml:2:11: seq_lens: the case needs"),
    ("seq_lens: const(1000000000000)", "seq_lens: sequence lengths must be <= 2147483647"),
    ("head_dim: 100000000000", "head_dim: must be <= 2147483647"),
    ("num_layers: 1000000", "num_layers: must be <= 4096"),
    ("seed: 1e23", "seed: expected an integer, got 1e23"),
    ("seed: 100000000000000000000000", "seed: must be <= 9223372036854775807"),
    ("timeout_s: 1e308", "timeout_s: must be <= 604800, got 1e308"),
    ("slot_mode: const(99999999999)", "slot_mode: const(v) needs |v| <= 2147483647"),
])
def test_sizes_and_values_no_machine_holds(tmp_path, line, fragment):
    path = _write(tmp_path, f"op: fused_rope_decode_attention\n{line}\n")
    _refused(path, fragment)


def test_decode_layers_vocab_that_cannot_fit(tmp_path):
    path = _write(tmp_path, "op: decode_layers\nvocab: 2000000000\nhidden: 100000\n")
    _refused(path, "the case needs", "no device holds more than 1.1 TB")


def test_case_bytes_counts_the_arguments(tmp_path):
    case = load_matrix(_write(tmp_path, "op: paged_decode_attention\n"))[0]
    small = case_bytes(case)
    assert 0 < small < MAX_CASE_BYTES
    g = case.geometry
    caches = 2 * case.num_pages * g.page_size * g.num_kv_heads * g.head_dim * 2   # bf16 k and v
    assert small >= caches


def _parse_error(capsys, argv):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("argv, fragment", [
    (["run", "--shard", "3/1000000000"], f"at most {MAX_SHARDS} shards"),
    (["run", "--shard", "0/3"], "the shard index I must be between 1 and 3"),
    (["flake", "--repeat", "1000000000"], f"--repeat must be at most {MAX_REPEAT}"),
    (["compare", "--repeat", "0"], "--repeat must be at least 1"),
    (["run", "--seed", "1e20"], "--seed takes a whole number, got '1e20'"),
    (["run", "--seed", "100000000000000000000"], "--seed must be at most 9223372036854775807"),
    (["flake", "--hunt-seed", "-1"], "--hunt-seed must be at least 0"),
    (["run", "--device", ""], "--device is empty"),
    (["run", "--devices", " "], "--devices is empty"),
    (["list", "--max-cases", "0"], "--max-cases must be at least 1"),
])
def test_hostile_flags_are_one_line(capsys, argv, fragment):
    err = _parse_error(capsys, argv)
    assert fragment in err and f"harness {argv[0]}: error:" in err


def test_sane_flags_still_parse():
    args = build_parser().parse_args(["run", "--shard", "2/4", "--seed", "7", "--device", "cpu", "--max-cases", "9"])
    assert (args.shard, args.seed, args.device, args.max_cases) == ("2/4", 7, "cpu", 9)


def test_device_range_is_bounded():
    with pytest.raises(DeviceError, match=f"more than {MAX_DEVICES} devices"):
        parse_device_list("cuda:0-1000000000")
    assert len(parse_device_list("npu:0-7")) == 8
