"""The failure classifier: fixtures of real-shaped logs, the rule data, rules files, bad input."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import yaml

from harness.casefiles import LocatedError
from harness.classify import (
    PROJECT_RULES_FILE,
    Classification,
    Role,
    RulesError,
    builtin_rules,
    builtin_tables,
    classify_exception,
    classify_exit,
    classify_text,
    classify_timeout,
    combine_rules,
    default_rules,
    exit_line,
    load_rules,
    match_rules,
    read_log,
)
from harness.outcomes import Outcome

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
EXPECTED: dict = yaml.safe_load((LOGS / "expected.yaml").read_text())


def _log(name: str) -> str:
    return read_log(LOGS / name)


def _classify(name: str, spec: dict, rules=None) -> Classification:
    text = _log(name)
    via = spec.get("via", "exception")
    if via == "exit":
        return classify_exit(spec["returncode"], text, rules=rules)
    if via == "timeout":
        return classify_timeout(2, text, rules=rules)
    return classify_exception("launch", spec.get("exc_type", "RuntimeError"), spec.get("message", ""), "", text,
                              rules=rules)


def _evidence(name: str, spec: dict) -> str:
    text = _log(name)
    return text + "\n" + exit_line(spec["returncode"]) if spec.get("via") == "exit" else text


PUBLIC = LOGS / "public"                # real public logs, labelled by hand (test_classify_public_logs.py)
PUBLIC_SPECS: dict = yaml.safe_load((PUBLIC / "collection.yaml").read_text())
PUBLIC2 = LOGS / "public2"              # the fresh collection of issue 38 (test_classify_public2.py)
PUBLIC2_SPECS: dict = yaml.safe_load((PUBLIC2 / "collection.yaml").read_text())


def _all_evidence() -> list[str]:
    """Every fixture's evidence: the written excerpts here and the public collections."""
    public = [read_log(folder / name) + ("\n" + exit_line(spec["returncode"]) if spec.get("via") == "exit" else "")
              for folder, specs in ((PUBLIC, PUBLIC_SPECS), (PUBLIC2, PUBLIC2_SPECS)) for name, spec in specs.items()]
    return [_evidence(name, spec) for name, spec in EXPECTED.items()] + public


# -- the fixture table ------------------------------------------------------------------------

def test_every_fixture_has_an_expectation_and_there_are_enough():
    files = {p.name for p in LOGS.glob("*.log")}
    assert files == set(EXPECTED)
    assert len(files) >= 30


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_classifies_as_expected(name):
    spec = EXPECTED[name]
    c = _classify(name, spec)
    got = (c.outcome.value, c.code, c.sticky, c.rule)
    assert got == (spec["outcome"], spec["code"], spec["sticky"], spec["rule"]), c.summary
    assert set(spec.get("secondary", [])) <= set(c.secondary), c.secondary
    for key, value in spec.get("fields", {}).items():
        assert c.fields.get(key) == value, (key, c.fields)
    if "hint" in spec:
        assert c.hint and spec["hint"] in c.hint, c.hint
    assert "\n" not in c.summary and len(c.summary) < 600


def test_every_builtin_rule_is_hit_by_a_fixture():
    hit = {h.rule.name for text in _all_evidence() for h in match_rules(text)}
    missing = [r.name for r in builtin_rules() if r.name not in hit]
    assert not missing, f"built-in rules no fixture exercises: {missing}"


def test_needles_are_sound_on_every_fixture_line():
    """Where a rule's regex matches a line, one of its derived needles is in that line."""
    lines = [line for text in _all_evidence() for line in text.splitlines()]
    for rule in builtin_rules():
        if not rule.needles:
            continue
        for line in lines:
            if rule.pattern.search(line):
                assert any(n in line for n in rule.needles), (rule.name, rule.needles, line)


def test_only_the_error_id_rules_scan_the_whole_text():
    slow = {r.name for r in builtin_rules() if not r.needles}
    assert slow == {"cann_inner_error_id", "cann_error_id"}


# -- the rule data -----------------------------------------------------------------------------

def test_every_acl_runtime_code_has_its_name():
    acl = builtin_tables()["acl"]
    for code in [*range(507000, 507058), 507899, 507900, 507901]:
        assert code in acl and acl[code].name.startswith("ACL_ERROR_RT_"), code
    assert acl[507014].name == "ACL_ERROR_RT_AICORE_TIMEOUT"
    assert acl[507015].name == "ACL_ERROR_RT_AICORE_EXCEPTION"
    assert acl[507018].name == "ACL_ERROR_RT_AICPU_EXCEPTION" and acl[507018].role is Role.CASCADE
    assert acl[507035].name == "ACL_ERROR_RT_VECTOR_CORE_EXCEPTION"
    assert acl[507046].name == "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT"
    assert acl[507053].name == "ACL_ERROR_RT_DEVICE_MEM_ERROR"
    assert acl[507054].name == "ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR"
    assert acl[507057].name == "ACL_ERROR_RT_SUSPECT_REMOTE_ERROR"
    assert acl[207018].name == "ACL_ERROR_RT_DEVIDE_OOM"
    assert acl[561002].name == "ACLNN_ERR_INNER_TILING_ERROR"


def test_pto2_codes_are_named_and_unknown_ones_read_generically():
    pto2 = builtin_tables()["pto2"]
    assert [pto2[c].name for c in (1, 2, 3, 4, 100)] == [
        "SCOPE_DEADLOCK", "HEAP_RING_DEADLOCK", "FLOW_CONTROL_DEADLOCK", "DEP_POOL_OVERFLOW", "SCHEDULER_TIMEOUT"]
    c = classify_text("PTO2 runtime failed: orch_error_code=42 sched_error_code=0 runtime_status=-42")
    assert (c.outcome, c.code, c.name) == (Outcome.ORCH_ERROR, 42, None)
    assert c.summary.startswith("ORCH_ERROR_42: ")


def test_a_clean_pto2_status_line_is_not_an_error():
    assert classify_text("PTO2 run done: orch_error_code=0 sched_error_code=0 runtime_status=0") is None


def test_summary_names_the_printed_code_the_cause_the_cascade_and_the_evidence():
    c = _classify("npu_a2_aicore_then_507018.log", {})
    assert c.name == "ACL_ERROR_RT_AICPU_EXCEPTION"
    assert c.summary.startswith("ACL_ERROR_RT_AICPU_EXCEPTION (507018): ")
    assert "; cause: AI Core execution fault; cascade: FAIL_EZ9999; detail: device_id=6, " in c.summary
    assert "retcode=0x26, task_error=aicore exception" in c.summary and " | " in c.summary
    assert "The aicore execution is abnormal" in c.summary and "RUNTIME(" not in c.summary


# -- root cause first ------------------------------------------------------------------------

def test_existing_contract_root_cause_printed_first_wins():
    """The orchestration error is the class; the code the runtime printed is the label."""
    log = ("[ERROR] PTO2 orch_error_code=2 sched_error_code=0 runtime_status=-2\n"
           "RuntimeError: NPU function error: aclrtSynchronizeStream, error code is 507018\n")
    c = classify_exception("launch", "RuntimeError", "error code is 507018", "", log)
    assert (c.outcome, c.code, c.sticky, c.secondary) == (Outcome.ORCH_ERROR, 507018, True, ("FAIL_507018",))
    assert (c.fields["orch_error_code"], c.fields["cause"]) == (2, "HEAP_RING_DEADLOCK")


def test_a_cascade_alone_is_the_class():
    c = classify_text("RuntimeError: NPU function error: aclrtSynchronizeStream, error code is 507018")
    assert (c.outcome, c.code, c.secondary) == (Outcome.DEVICE_FAULT, 507018, ())


def test_a_cause_beats_cascades_printed_before_it_and_context_yields_to_both():
    text = ("EZ9999: Inner Error!\n"
            "error code is 507018\n"
            "error code is 507046\n"
            "there is an exception of fftsplus aivector error, core id is 5\n")
    c = classify_text(text)
    assert (c.code, c.rule) == (507018, "npu_vector_core_exception")    # the cause; the earliest cascade code
    assert c.secondary == ("FAIL_EZ9999", "FAIL_507018", "FAIL_507046")
    assert classify_text(text.rsplit("there", 1)[0]).code == 507018     # earliest cascade
    assert classify_text("EZ9999: Inner Error!\n").code == "EZ9999"     # context, alone


def test_one_signature_per_line():
    c = classify_text("RuntimeError: CUDA error: an illegal memory access was encountered")
    assert (c.code, c.rule, c.secondary) == (700, "cuda_illegal_address", ())


def test_exit_is_always_sticky_and_the_signal_is_kept():
    c = classify_exit(-9, "MemoryError\n")
    assert (c.outcome, c.sticky, c.secondary) == (Outcome.OOM, True, ("FAIL_SIGKILL",))
    assert c.summary.startswith("worker died: ")
    assert (classify_exit(-11).outcome, classify_exit(-11).code) == (Outcome.CRASH, "SIGSEGV")
    assert classify_exit(3).code == 3
    assert classify_exit(-77).code == "signal 77"
    unknown = classify_exit(None)
    assert (unknown.outcome, unknown.code, unknown.sticky) == (Outcome.CRASH, None, True)


def test_stages_without_rules_and_the_fallback():
    assert classify_exception("import", "ModuleNotFoundError", "No module named 'x'", "").outcome is Outcome.BUILD_ERROR
    assert classify_exception("contract", "ContractError", "bad sig", "").outcome is Outcome.CONTRACT
    plain = classify_exception("launch", "ValueError", "bad value", "", "unrelated noise\n")
    assert (plain.outcome, plain.code, plain.sticky, plain.summary) == (
        Outcome.CRASH, None, False, "kernel raised ValueError: bad value")


def test_timeout_keeps_what_the_log_shows():
    assert classify_timeout(1.5).summary == "no result within timeout_s=1.5; worker killed"
    c = classify_timeout(1.5, "PTO2 scheduler timeout sub_class=S1:running-stalled (detail=1) stuck_core=3")
    assert (c.outcome, c.code, c.secondary, c.fields["stuck_core"]) == (Outcome.HANG, None, ("FAIL_100",), 3)
    assert "timeout_s=1.5" in c.summary


# -- rules files -------------------------------------------------------------------------------

def _write(tmp_path: Path, text: str, name: str = "rules.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


GOOD = """\
    rules:
      - name: my_kernel_guard
        pattern: 'MYLIB guard tripped at row (?P<row>\\d+)'
        outcome: OOB_WRITE
        sticky: false
        meaning: "mylib's own guard check fired"
        hint: check the row
"""


def test_a_user_rule_file_loads_and_classifies(tmp_path):
    rules = load_rules(_write(tmp_path, GOOD))
    assert [r.name for r in rules] == ["my_kernel_guard"] and rules[0].needles == ("MYLIB guard tripped at row ",)
    c = classify_text("x\nMYLIB guard tripped at row 17\n", rules)
    assert (c.outcome, c.sticky, c.fields, c.hint) == (Outcome.OOB_WRITE, False, {"row": 17}, "check the row")


@pytest.mark.parametrize("body, where, message", [
    ("""\
     rules:
       - name: a
         pattern: 'x'
         outcome: CRASH
         sticky: false
         meaning: m
       - name: b
         pattern: '(unclosed'
         outcome: CRASH
         sticky: false
         meaning: m
     """, "rules.yaml:8:14: rules[1].pattern", "bad regex: missing ), unterminated subpattern"),
    ("""\
     rules:
       - name: a
         pattern: 'x'
         outcome: DEVICE_FALT
         sticky: true
         meaning: m
     """, "rules.yaml:4:14: rules[0].outcome", "unknown outcome 'DEVICE_FALT'; did you mean 'DEVICE_FAULT'?"),
    ("""\
     rules:
       - name: a
         pattern: 'x'
         sticky: true
         meaning: m
     """, "rules.yaml:2:5: rules[0].outcome", "missing required field 'outcome'"),
    ("""\
     rules:
       - name: a
         pattern: 'x'
         outcome: CRASH
         sticky: true
         meaning: m
         stiky: false
     """, "rules.yaml:7:5: rules[0].stiky", "unknown key 'stiky'; did you mean 'sticky'?"),
    ("""\
     rules:
       - name: a
         pattern: 'x'
         outcome: CRASH
         sticky: yes please
         meaning: m
     """, "rules.yaml:5:13: rules[0].sticky", "expected true or false"),
    ("""\
     rules:
       - name: a
         pattern: 'x*'
         outcome: CRASH
         sticky: true
         meaning: m
     """, "rules.yaml:3:14: rules[0].pattern", "pattern matches an empty line"),
    ("""\
     rules:
       - name: a
         pattern: 'x (?P<n>\\d+)'
         outcome: CRASH
         sticky: true
         meaning: m
         code_groups: [num]
     """, "rules.yaml:7:19: rules[0].code_groups[0]", "the pattern has no group named 'num'"),
    ("""\
     rules:
       - name: a
         pattern: 'x'
         outcome: CRASH
         sticky: true
         meaning: m
         codes: acll
     """, "rules.yaml:7:12: rules[0].codes", "unknown code table 'acll'; did you mean 'acl'?"),
    ("""\
     rules:
       - name: a
         pattern: 'x'
         outcome: CRASH
         sticky: true
         meaning: m
       - name: a
         pattern: 'y'
         outcome: CRASH
         sticky: true
         meaning: m
     """, "rules.yaml:7:5: rules[1].name", "duplicate rule name 'a' (first at line 2)"),
    ("""\
     rules:
       - name: a
         pattern: 'x'
         outcome: CRASH
         sticky: true
         meaning: m
         codes: {1: {name: ONE, role: root}}
     """, "rules.yaml:7:34: rules[0].codes.1.role", "unknown role 'root'"),
    ("""\
     rules:
       - name: a
         pattern: 'x'
         outcome: CRASH
         sticky: true
         meaning: m
         detail: sometimes
     """, "rules.yaml:7:13: rules[0].detail", "expected true or false"),
    ("rules: [\n", "rules.yaml:2:1", "invalid YAML: expected the node content, but found end of file"),
    ("tables: {}\n", "rules.yaml:1:1: rules", "missing required field 'rules'"),
])
def test_bad_rules_files_are_one_line_errors_with_their_place(tmp_path, body, where, message):
    path = _write(tmp_path, body)
    with pytest.raises(RulesError) as info:
        load_rules(path)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(str(tmp_path / where)), text
    assert message in text, text
    assert isinstance(info.value, ValueError) and isinstance(info.value, LocatedError)


def test_a_missing_rules_file_is_a_rules_error(tmp_path):
    with pytest.raises(RulesError, match="no such rules file"):
        load_rules(tmp_path / "nope.yaml")
    with pytest.raises(RulesError, match="no such rules file"):
        default_rules(extra=[tmp_path / "nope.yaml"])


def test_user_rules_override_builtins_by_name_and_are_tried_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert default_rules() == builtin_rules()
    _write(tmp_path, """\
        tables:
          mine: {507018: {name: SLOT_MINUS_ONE_WRITE, meaning: "our kernels' -1 slot write", role: cause}}
        rules:
          - name: acl_runtime_fault
            pattern: 'error code is (?P<code>507\\d{3})'
            codes: mine
            outcome: DEVICE_FAULT
            sticky: true
            meaning: "device fault (project rule)"
          - name: npu_function_error
            pattern: 'NPU function error: (?P<api>\\w+)'
            outcome: HARNESS_ERROR
            sticky: false
            meaning: "project: any NPU API failure"
    """, PROJECT_RULES_FILE)
    rules = default_rules()
    names = [r.name for r in rules]
    assert names[:2] == ["acl_runtime_fault", "npu_function_error"]
    assert names.count("acl_runtime_fault") == 1 and len(rules) == len(builtin_rules()) + 1
    line = "RuntimeError: NPU function error: aclrtSynchronizeStream, error code is 507018"
    c = classify_text(line, rules)          # both user rules match the line: the first one wins
    assert (c.rule, c.name, c.outcome) == ("acl_runtime_fault", "SLOT_MINUS_ONE_WRITE", Outcome.DEVICE_FAULT)
    assert classify_text("error code is 507015", rules).name is None   # its own table, not the built-in one

    extra = _write(tmp_path, """\
        rules:
          - name: npu_function_error
            pattern: 'NPU function error: (?P<api>\\w+)'
            outcome: CRASH
            sticky: true
            meaning: "--rules wins"
    """, "more.yaml")
    both = default_rules(extra=[extra])
    assert both[0].name == "npu_function_error" and both[0].outcome is Outcome.CRASH
    assert [r.name for r in both].count("npu_function_error") == 1
    explicit = default_rules(project_file=extra)
    assert explicit[0].meaning == "--rules wins"


def test_a_user_rule_may_use_builtin_tables(tmp_path):
    rules = load_rules(_write(tmp_path, """\
        rules:
          - name: plog_retcode
            pattern: 'rtStreamSynchronize failed, ret=(?P<code>\\d{6})'
            codes: acl
            outcome: DEVICE_FAULT
            sticky: true
            meaning: plog form
    """))
    c = classify_text("rtStreamSynchronize failed, ret=507015", rules)
    assert (c.code, c.name) == (507015, "ACL_ERROR_RT_AICORE_EXCEPTION")


def test_a_user_detail_rule_names_the_cause_but_the_printed_code_stays_the_label(tmp_path):
    rules = load_rules(_write(tmp_path, """\
        rules:
          - name: mylib_status
            pattern: 'MYLIB status=(?P<status>\\w+)'
            code: MYLIB_STATUS
            detail: true
            outcome: DEVICE_FAULT
            sticky: true
            meaning: "mylib's own status line"
            hint: read mylib's ring dump
    """))
    assert rules[0].detail
    both = combine_rules(builtin_rules(), rules)
    c = classify_text("MYLIB status=RING_STUCK\nerror code is 507018\n", both)
    assert (c.code, c.rule, c.fields["status"], c.hint) == (507018, "mylib_status", "RING_STUCK", "read mylib's ring dump")
    alone = classify_text("MYLIB status=RING_STUCK\n", both)
    assert alone.code == "MYLIB_STATUS"                     # nothing printed a code: its own


# -- bad input: size, bytes, speed ---------------------------------------------------------

def test_a_100mb_log_with_bad_bytes_reads_bounded_and_classifies(tmp_path):
    path = tmp_path / "huge.log"
    with open(path, "wb") as fh:
        fh.write(b"\xff\xfe\x00 bad start\nthere is an aicore error exception, core id is 9\n")
        fh.seek(100 << 20)                      # a sparse 100 MB file: NULs in the middle
        fh.write(b"\n\xc3\x28 bad tail\nRuntimeError: NPU function error: x, error code is 507018\n")
    text = read_log(path)
    c = classify_exception("launch", "RuntimeError", "error code is 507018", "", text)
    assert len(text) <= (16 << 20) + 16
    assert (c.code, c.rule, c.secondary) == (507018, "npu_aicore_exception", ("FAIL_507018",))


def test_a_10mb_log_of_noise_still_names_the_fault(tmp_path):
    # Its speed is bench/bench_classify.py's figure, not an assertion on wall time here.
    noise = "".join(f"[INFO] RUNTIME(1,python):2026-01-01-00:00:00.{i % 1000:03d} [stream.cc:{i % 900}] "
                    f"dispatch task {i} to core {i % 48} done ok\n" for i in range(2000))
    path = tmp_path / "ten.log"
    with open(path, "w") as fh:
        fh.write("The aicore execution is abnormal, device_id=0, stream_id=1, task_id=2\n")
        while fh.tell() < 10_000_000:
            fh.write(noise)
        fh.write("RuntimeError: NPU function error: x, error code is 507018\n")
    c = classify_exception("launch", "RuntimeError", "error code is 507018", "", read_log(path))
    assert (c.code, c.rule, c.secondary) == (507018, "npu_aicore_abnormal", ("FAIL_507018",))


def test_a_giant_line_without_newlines_is_fine():
    text = "x" * (3 << 20) + " error code is 507018 " + "y" * (3 << 20)
    assert classify_text(text).code == 507018


def test_spam_of_one_signature_keeps_first_and_last():
    lines = [f"warning {i}: error code is 507018" for i in range(5000)]
    lines.insert(4000, "The aicore execution is abnormal, device_id=0")
    c = classify_text("\n".join(lines) + "\nerror code is 507046\n")
    assert (c.code, c.rule) == (507018, "npu_aicore_abnormal")   # found through its own needle, whatever the spam
    assert set(c.secondary) == {"FAIL_507018", "FAIL_507046"}


def test_the_fallback_regex_path_for_rules_without_needles(tmp_path):
    rules = load_rules(_write(tmp_path, """\
        rules:
          - name: ci
            pattern: '(?i)segfault in (?P<lib>\\w+)'
            outcome: CRASH
            sticky: true
            meaning: case-insensitive, so no needle
    """))
    assert rules[0].needles == ()
    assert classify_text("noise\nSEGFAULT in libfoo\n", rules).fields == {"lib": "libfoo"}


def test_patterns_are_single_line():
    assert all(re.compile(r.pattern.pattern).flags & re.DOTALL == 0 for r in builtin_rules())
