"""docs/classify.md, "Your own rules": the example loads as written, its key table names every key
a rule takes and marks as required exactly the keys the loader requires."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.classify import rules
from harness.classify.matching import classify_text

DOC = Path(__file__).resolve().parents[2] / "docs" / "classify.md"


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text.split("## Your own rules", 1)[1].split("\n## ", 1)[0]


def test_the_documented_example_loads_and_classifies(tmp_path):
    example = re.search(r"```yaml\n(.*?)```", _section(), re.S).group(1)
    path = tmp_path / "harness-rules.yaml"
    path.write_text(example)
    [rule] = rules.load_rules(path)
    found = classify_text("MYLIB_FATAL ring=3", rules.combine_rules(rules.builtin_rules(), [rule]))
    assert found is not None and found.rule == rule.name and found.outcome.value == "DEVICE_FAULT"


def test_the_key_table_marks_every_required_key():
    rows = re.findall(r"^\| `(\w+)` \| (yes|no) \|", _section(), re.M)
    documented = {key: required == "yes" for key, required in rows}
    assert set(documented) == set(rules._RULE_KEYS)
    assert {key for key, required in documented.items() if required} == set(rules._REQUIRED)


@pytest.mark.parametrize("missing", rules._REQUIRED)
def test_a_rule_written_without_a_required_key_is_one_line_naming_it(tmp_path, missing):
    full = {"name": "mine", "pattern": "'MYLIB_FATAL'", "outcome": "CRASH", "sticky": "false",
            "meaning": "our library gave up"}
    body = "".join(f"    {k}: {v}\n" for k, v in full.items() if k != missing)
    path = tmp_path / "r.yaml"
    path.write_text("rules:\n  -" + body[3:])
    with pytest.raises(rules.RulesError) as info:
        rules.load_rules(path)
    assert "\n" not in str(info.value) and f"missing required field '{missing}'" in str(info.value)
    assert str(info.value).startswith(f"{path}:2:")
