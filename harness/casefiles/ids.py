"""How every kind of case file names its cases and tells them apart.

Kernel matrices, spec files and command files build ids the same way, so ``-k``, ``--test``
and the store see one id grammar whatever the file: ``<name>[k=v,...]``, the name being the
file's ``name:`` or its stem (``stem_name``), each varying value as ``id_text`` writes it.
``refuse_identical_cases`` is the check that two ids do not name one case.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from harness.case import Case
from harness.casefiles.values import CaseFileError


def stem_name(path: str) -> str:
    """A file's name when it sets no ``name:``: its stem, with what an id cannot hold as ``-``."""
    return re.sub(r"[^A-Za-z0-9_.+-]", "-", Path(path).stem) or "cases"


def id_text(plain: Any) -> str:
    """One value as it appears in an id: YAML's spelling of booleans, ``repr`` of floats, nested
    mappings and lists in braces and brackets."""
    if isinstance(plain, bool):
        return "true" if plain else "false"
    if isinstance(plain, float):
        return repr(plain)
    if isinstance(plain, Mapping):
        return "{" + ",".join(f"{k}:{id_text(v)}" for k, v in plain.items()) + "}"
    if isinstance(plain, (list, tuple)):
        return "[" + ",".join(id_text(v) for v in plain) + "]"
    return str(plain)


def case_id_of(name: str, parts: list[str]) -> str:
    """A case id as every case file builds it: ``name[k=v,...]``, ``/`` and ``::`` escaped (``::``
    separates a command case from the tests of its JUnit)."""
    case_id = f"{name}[{','.join(parts)}]" if parts else name
    case_id = re.sub(r"\s+", "", case_id)
    return case_id.replace("/", "%2F").replace("::", ":%3A")


def refuse_identical_cases(cases: Iterable[Case]) -> None:
    """Two ids for one case (an include that repeats a matrix case) would run it twice."""
    first: dict[str, Case] = {}
    for case in cases:
        wire = case.to_wire()
        for key in ("case_id", "source", "params"):
            wire.pop(key)
        ident = repr(sorted(wire.items()))
        if ident in first:
            path, _, line = case.source.rpartition(":")
            raise CaseFileError(path, int(line), None, "",
                                f"case '{case.case_id}' is the same case as '{first[ident].case_id}' "
                                f"({first[ident].source})")
        first[ident] = case


__all__ = ["case_id_of", "id_text", "refuse_identical_cases", "stem_name"]
