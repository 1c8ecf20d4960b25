"""Located YAML, shared by case files and rules files: places, one error family, one YAML error format."""
from __future__ import annotations

import pickle

import pytest

from harness.casefiles import CaseFileError, ExpressionError, LocatedError, Where, load_matrix
from harness.casefiles.located import did_you_mean
from harness.classify import RulesError, load_rules
from harness.errors import UsageError


def test_case_file_and_rules_errors_are_siblings_in_the_usage_family():
    for cls in (CaseFileError, RulesError):
        assert issubclass(cls, LocatedError) and issubclass(cls, UsageError) and issubclass(cls, ValueError)
    assert not issubclass(RulesError, CaseFileError) and not issubclass(CaseFileError, RulesError)
    assert issubclass(ExpressionError, UsageError) and not issubclass(ExpressionError, LocatedError)


def test_an_error_made_at_a_place_has_its_class_and_place_and_pickles():
    assert Where("rules.yaml").key("rules").index(2).key("pattern").field == "rules[2].pattern"
    where = Where("rules.yaml", 9, 14, "rules[2].pattern")
    err = RulesError.at(where, "bad regex")
    assert type(err) is RulesError
    assert str(err) == "rules.yaml:9:14: rules[2].pattern: bad regex"
    assert str(where) == "rules.yaml:9:14"
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is RulesError and str(back) == str(err)


def test_did_you_mean():
    assert did_you_mean("stiky", ("sticky", "meaning")) == "; did you mean 'sticky'?"
    assert did_you_mean("zzz", ("sticky", "meaning")) == ""
    # a known name that failed for another reason (its import) is never suggested back to itself
    assert did_you_mean("transformers-qwen3", ("transformers-qwen3", "reference")) == ""
    assert did_you_mean("refrence", ("reference", "refrence-x")) == "; did you mean 'reference'?"


@pytest.mark.parametrize("body", [
    "op: [\n",
    "op: rope_kv_write\n  bad: 1\n",
    "op: 'unclosed\n",
    "op:\n\t- a\n",
])
def test_a_yaml_error_reads_the_same_in_a_case_file_and_a_rules_file(tmp_path, body):
    (tmp_path / "f.yaml").write_text(body)
    with pytest.raises(CaseFileError) as case_error:
        load_matrix(tmp_path / "f.yaml")
    with pytest.raises(RulesError) as rules_error:
        load_rules(tmp_path / "f.yaml")
    assert str(case_error.value) == str(rules_error.value)
    assert str(case_error.value).startswith(f"{tmp_path / 'f.yaml'}:") and "invalid YAML: " in str(case_error.value)
