"""Needles: the literal text a regex cannot match without.

A rule's pattern is reduced, once, to literals one of which is in every line it
matches; the matcher (``matching``) searches the evidence for those with
``str.find`` and runs the regexes on the lines that hold one.  A pattern with no
usable literal (or one matching case-insensitively) gets none.
"""
from __future__ import annotations

import re

try:                                    # Python 3.11+
    from re import _constants as _sre
    from re import _parser as _sre_parse
except ImportError:                     # pragma: no cover - Python 3.10
    import sre_constants as _sre        # type: ignore[no-redef]
    import sre_parse as _sre_parse      # type: ignore[no-redef]

__all__ = ["needles"]

_MIN_NEEDLE = 3             # a shorter literal is on too many lines to narrow the search
_SELECTIVE = 6              # a literal this long is rare enough: fewer needles matter more than length

_REPEATS = tuple(op for op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, getattr(_sre, "POSSESSIVE_REPEAT", None)) if op)
_GROUPS = tuple(op for op in (_sre.SUBPATTERN, getattr(_sre, "ATOMIC_GROUP", None)) if op)


def needles(pattern: re.Pattern) -> tuple[str, ...]:
    """Literals, one of which is in every string the pattern matches; () when none is long enough."""
    if not isinstance(pattern.pattern, str) or pattern.flags & re.IGNORECASE:
        return ()
    try:
        best = _requirement(_sre_parse.parse(pattern.pattern, pattern.flags))
    except Exception:       # an unknown parse shape only costs speed
        return ()
    if not best or min(map(len, best)) < _MIN_NEEDLE or any("\n" in n for n in best):
        return ()
    return tuple(sorted(best))


def _requirement(items) -> frozenset[str] | None:
    """The strongest requirement of a parsed sequence: literals of which a match contains one."""
    found: list[frozenset[str]] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            found.append(frozenset(["".join(run)]))
            run.clear()

    for op, av in _flatten(items):
        if op is _sre.LITERAL:
            run.append(chr(av))
            continue
        if op is _sre.AT:           # zero width: literals either side stay adjacent
            continue
        if op is _sre.BRANCH and run and all(leads := [_lead(branch) for branch in av[1]]):
            # re's parser moves a prefix the alternatives share out of them ("100|107" becomes
            # "1" + "00|07"): put it back, so the needles are "100" and "107", not "1"
            prefix = "".join(run)
            found.append(frozenset(prefix + lead for lead in leads))
        flush()
        if op is _sre.BRANCH:
            alternatives = [_requirement(branch) for branch in av[1]]
            if all(alternatives):
                found.append(frozenset().union(*alternatives))
        elif op in _REPEATS and av[0] >= 1:
            inner = _requirement(av[2])
            if inner:
                found.append(inner)
    flush()
    # the longest shortest literal, up to _SELECTIVE; then the fewest alternatives (each is one more
    # pass over the evidence: one "507" beats ten 3-letter words, one "Error: " six long names);
    # then the longest
    return max(found, key=lambda req: (min(_SELECTIVE, *map(len, req)), -len(req), min(map(len, req))),
               default=None)


def _lead(items) -> str:
    """The literal text a parsed sequence starts with."""
    lead: list[str] = []
    for op, av in _flatten(items):
        if op is not _sre.LITERAL:
            break
        lead.append(chr(av))
    return "".join(lead)


def _flatten(items):
    for op, av in items:
        if op in _GROUPS:
            sub = av if op is not _sre.SUBPATTERN else av[3]
            if op is _sre.SUBPATTERN and av[1] & _sre.SRE_FLAG_IGNORECASE:
                yield _sre.ANY, None
            else:
                yield from _flatten(sub)
        else:
            yield op, av
