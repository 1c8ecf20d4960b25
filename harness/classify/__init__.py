"""The failure classifier (docs/classify.md): the names the rest of the harness uses.

``rules`` loads and validates the rules (built-in, project, ``--rules`` files),
``matching`` names a failure from its evidence with them.
"""
from harness.classify.matching import (
    Classification,
    Hit,
    classify_exception,
    classify_exit,
    classify_text,
    classify_timeout,
    exit_line,
    match_rules,
    read_log,
)
from harness.classify.rules import (
    BUILTIN_RULES_FILE,
    PROJECT_RULES_FILE,
    CodeInfo,
    Role,
    Rule,
    RulesError,
    builtin_rules,
    builtin_tables,
    combine_rules,
    default_rules,
    load_rules,
)

__all__ = [
    "BUILTIN_RULES_FILE",
    "PROJECT_RULES_FILE",
    "Classification",
    "CodeInfo",
    "Hit",
    "Role",
    "Rule",
    "RulesError",
    "builtin_rules",
    "builtin_tables",
    "classify_exception",
    "classify_exit",
    "classify_text",
    "classify_timeout",
    "combine_rules",
    "default_rules",
    "exit_line",
    "load_rules",
    "match_rules",
    "read_log",
]
