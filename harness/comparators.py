"""A spec op's per-output comparators as written in a case file's ``compare:`` (docs/specs.md).
Torch-free: the case-file loader checks the text, the device worker runs them
(``harness/worker/comparators.py``).

Builtins (``NAME`` another tensor of the spec, ``N`` a whole number >= 0):

  topk_pairs(VALUES)   indices judged by the values paired with them (tie-aware)
  argmax(LOGITS)       an argmax index; a flip within the near-tie margin is NEAR_TIE
  ulp(N)               floating: within N ulps of the stored dtype
  dequant(SCALES)      int8 codes judged after dequantisation, +-1 code allowed

Anything else is ``package.module:function`` with the library's signature
``cmp(actual, expected, *, actual_outputs, expected_outputs, inputs, rtol, atol) -> (bool, str)``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

BUILTIN_COMPARATORS = ("topk_pairs", "argmax", "ulp", "dequant")
_FORM = re.compile(r"\s*([a-z_]+)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*|\d+)\s*\)\s*$")
_IMPORT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Comparator:
    kind: str            # one of BUILTIN_COMPARATORS, or "function"
    arg: str             # the tensor name, N, or the import path


def parse_comparator(text: str) -> Comparator:
    """The comparator a ``compare:`` value names; ValueError with the reason."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("expected a comparator: topk_pairs(VALUES), argmax(LOGITS), ulp(N), dequant(SCALES) "
                         "or package.module:function")
    m = _FORM.match(text)
    if m:
        kind, arg = m.groups()
        if kind not in BUILTIN_COMPARATORS:
            raise ValueError(f"unknown comparator {kind!r} (builtins: {', '.join(BUILTIN_COMPARATORS)}; "
                             f"or package.module:function)")
        if kind == "ulp":
            if not arg.isdigit():
                raise ValueError(f"ulp takes a whole number of ulps, got {arg!r}")
        elif arg.isdigit():
            raise ValueError(f"{kind} takes the name of another tensor of the spec, got {arg!r}")
        return Comparator(kind, arg)
    if _IMPORT.fullmatch(text.strip()):
        return Comparator("function", text.strip())
    raise ValueError(f"{text!r} is neither a builtin comparator (topk_pairs(VALUES), argmax(LOGITS), ulp(N), "
                     f"dequant(SCALES)) nor package.module:function")


__all__ = ["BUILTIN_COMPARATORS", "Comparator", "parse_comparator"]
