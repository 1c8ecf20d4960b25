"""Command case files: expansion, placeholders, and every bad input as one located line."""
from __future__ import annotations

import textwrap

import pytest

from harness.casefiles import CaseFileError, load_matrix
from harness.casefiles.commandspec import CommandSpec, PassRule, substitute


def _load(tmp_path, text: str, name: str = "c.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return load_matrix(path)


def _error(tmp_path, text: str) -> str:
    with pytest.raises(CaseFileError) as info:
        _load(tmp_path, text)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_matrix_expands_into_cases_with_ids_params_and_the_spec(tmp_path):
    cases = _load(tmp_path, """\
        name: serving-suite
        command: "python -m pytest tests -q --junitxml={junit} -k {suite}"
        cwd: "{worktree}"
        env: {PYPTO_ROOT: "{worktree}", ASCEND_RT_VISIBLE_DEVICES: "{device_index}"}
        timeout_s: 900
        matrix: {seed: [0, 1, 2], suite: [decode]}
        pass: {exit_code: 0, not_regex: "error code is \\\\d+"}
        """)
    assert [c.case_id for c in cases] == ["serving-suite[seed=0]", "serving-suite[seed=1]", "serving-suite[seed=2]"]
    c = cases[1]
    assert (c.op, c.seed, c.timeout_s, c.params) == ("command", 1, 900.0, {"seed": 1, "suite": "decode"})
    assert c.env == {"PYPTO_ROOT": "{worktree}", "ASCEND_RT_VISIBLE_DEVICES": "{device_index}"}
    spec = CommandSpec.from_wire(c.command)
    assert spec.shell and spec.cwd == "{worktree}" and spec.base_dir == str(tmp_path)
    assert spec.pass_rule == PassRule(exit_code=0, not_regex=r"error code is \d+")
    assert c.source == f"{tmp_path / 'c.yaml'}:6"


def test_the_wire_form_round_trips(tmp_path):
    from harness.case import Case
    [c] = _load(tmp_path, 'command: ["{python}", "-c", "print(1)"]\n')
    assert Case.from_wire(c.to_wire()) == c
    assert CommandSpec.from_wire(c.command).command == ("{python}", "-c", "print(1)")


def test_substitute_fills_placeholders_and_keeps_literal_braces():
    assert substitute("echo {seed} {{x}} {junit}", {"seed": "3", "junit": "/j.xml"}) == "echo 3 {x} /j.xml"


@pytest.mark.parametrize("text, where, says", [
    ("cwd: .\n", ":1:1:", "no command given"),
    ("command: echo\nop: fused_rope_decode_attention\n", ":2:1: op:", "either `command` or `op`"),
    ("command: 'echo {sed}'\nmatrix: {seed: [1]}\n", ":1:10: command:", "unknown placeholder {sed}"),
    ("command: [echo, '{nope}']\n", ":1:17: command[1]:", "unknown placeholder {nope}"),
    ("command: echo\nenv: {A: '{x}'}\n", ":2:10: env.A:", "unknown placeholder {x}"),
    ("command: 'echo {'\n", ":1:10: command:", "unmatched '{'"),
    ("command: echo\ncwd: no/such/dir\n", ":2:6: cwd:", "no such directory"),
    ("command: echo\ncwd: '{casedir}/gone'\n", ":2:6: cwd:", "no such directory"),   # known when read
    ("command: echo\nmatrix: {casedir: [a]}\n", ":2:10: matrix.casedir:", "filled in by the harness"),
    ("command: echo\ntimeout_s: 1.5\n", ":2:12: timeout_s:", "whole number of seconds"),
    ("command: echo\ntimeout_s: '900s'\n", ":2:12: timeout_s:", "whole number of seconds"),
    ("command: echo\ntimeout_s: true\n", ":2:12: timeout_s:", "whole number of seconds"),
    ("command: ''\n", ":1:10: command:", "empty command"),
    ("command: []\n", ":1:10: command:", "empty command list"),
    ("command: echo\npass: {exit: 0}\n", "pass.exit", "exit"),
    ("command: echo\npass: {regex: '('}\n", ":2:15: pass.regex:", "not a regular expression"),
    ("command: echo\nmatrix: {device: [a]}\n", ":2:10: matrix.device:", "filled in by the harness"),
    ("command: echo\nmatrix: {seed: [x]}\n", ":2:17: matrix.seed[0]:", "a seed is an integer"),
    ("command: echo\ngeometry: tiny\n", "geometry", "geometry"),
])
def test_bad_input_is_one_line_naming_file_line_column_and_field(tmp_path, text, where, says):
    message = _error(tmp_path, text)
    assert message.startswith(str(tmp_path / "c.yaml"))
    assert where in message and says in message, message


def test_a_kernel_case_file_still_loads_as_before(tmp_path):
    [c] = _load(tmp_path, "op: rope_kv_write\n")
    assert c.command is None and c.op == "rope_kv_write"


def test_list_prints_one_line_per_case_for_a_command_written_over_several_lines(tmp_path, capsys):
    from harness.cli import main
    (tmp_path / "c.yaml").write_text(textwrap.dedent("""\
        name: repro-loop
        command: |
          for i in 1 2 3; do
            python repro.py --step $i || exit 1
          done
        matrix: {seed: [0, 1]}
        """))
    (tmp_path / "k.yaml").write_text("name: k\nop: rope_kv_write\n")
    assert main(["list", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(len(line.split("\t")) == 5 for line in lines), lines
    mine = [line for line in lines if line.startswith("repro-loop[seed=0]")]
    assert mine and mine[0].split("\t")[2] == \
        "for i in 1 2 3; do\\n  python repro.py --step $i || exit 1\\ndone\\n"
