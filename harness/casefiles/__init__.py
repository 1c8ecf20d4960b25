"""Case files (docs/cases.md): the names the rest of the harness uses.

``located`` reads YAML whose nodes know their place, ``values`` parses each case
key, ``matrix`` expands a file into checked ``Case`` objects, ``expression``
is the ``-k`` grammar.
"""
from harness.casefiles.expression import ExpressionError, compile_expression
from harness.casefiles.located import LocatedError, Where
from harness.casefiles.matrix import load_matrix, load_paths, select
from harness.casefiles.values import CASE_KEYS, CaseFileError, parse_seq_lens, parse_slot_mode

__all__ = [
    "CASE_KEYS",
    "CaseFileError",
    "ExpressionError",
    "LocatedError",
    "Where",
    "compile_expression",
    "load_matrix",
    "load_paths",
    "parse_seq_lens",
    "parse_slot_mode",
    "select",
]
