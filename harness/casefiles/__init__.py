"""Case files (docs/cases.md): the names the rest of the harness uses.

``located`` reads YAML whose nodes know their place, ``values`` parses each case
key, ``loader`` reads a file and hands it to the loader of its kind (``matrix``:
kernel matrices, ``specfile``: spec modules, ``commandfile``: commands), ``expression``
is the ``-k`` grammar and ``select``.
"""
from harness.casefiles.expression import ExpressionError, compile_expression, select
from harness.casefiles.located import LocatedError, Where
from harness.casefiles.loader import load_matrix, load_paths
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
