"""Located YAML: a document composed with a safe loader, whose every node knows its place.

Shared by the case-file loader (``harness.casefiles``) and the classifier's rules
loader (``harness.classify.rules``): one YAML flavour, one error format
(``<path>:<line>:<col>: <field>: <what>``), one conversion of PyYAML's errors to
it, one did-you-mean.  Each loader raises its own ``LocatedError`` subclass, so
the functions here that raise take the class to raise.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import yaml

from harness.errors import UsageError
from harness.formats import one_line

__all__ = [
    "LocatedError",
    "Loader",
    "Node",
    "Where",
    "compose",
    "did_you_mean",
    "load",
    "wrap",
]


@dataclass(frozen=True)
class Where:
    """Where a value came from: file (or any label such as ``--seq-lens``), 1-based line/column, field path."""

    path: str
    line: int | None = None
    column: int | None = None
    field: str = ""

    # Built directly, not with dataclasses.replace: a file of many values makes one per value.
    def key(self, name: str) -> "Where":
        return Where(self.path, self.line, self.column, f"{self.field}.{name}" if self.field else name)

    def index(self, i: int) -> "Where":
        return Where(self.path, self.line, self.column, f"{self.field}[{i}]")

    def at(self, node: yaml.Node) -> "Where":
        mark = node.start_mark
        return Where(self.path, mark.line + 1, mark.column + 1, self.field)

    def __str__(self) -> str:
        return _location(self.path, self.line, self.column)


def _location(path: str, line: int | None, column: int | None) -> str:
    loc = path
    if line is not None:
        loc += f":{line}"
        if column is not None:
            loc += f":{column}"
    return loc


class LocatedError(UsageError):
    """A bad input file, rendered as one line: ``<path>:<line>:<col>: <field>: <message>``."""

    def __init__(self, path: str, line: int | None, column: int | None, field: str, message: str):
        self.path = path
        self.line = line
        self.column = column
        self.field = field
        self.message = message
        super().__init__(str(self))

    @classmethod
    def at(cls, where: Where, message: str) -> "LocatedError":
        return cls(where.path, where.line, where.column, where.field, message)

    def __str__(self) -> str:
        parts = [_location(self.path, self.line, self.column)]
        if self.field:
            parts.append(self.field)
        parts.append(self.message)
        return ": ".join(parts)

    def __reduce__(self):
        return (type(self), (self.path, self.line, self.column, self.field, self.message))


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``; did you mean 'x'?`` for the closest other choice: never the word itself (a known name
    that failed for another reason needs that reason, not itself suggested back)."""
    close = difflib.get_close_matches(word, [c for c in choices if c != word], n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


# ---------------------------------------------------------------------------
# Composing
# ---------------------------------------------------------------------------

# Hostile input is refused with one line instead of a RecursionError or a memory blow-up: the
# composer recurses once per nesting level, and aliases share nodes that the tree expands.
MAX_DEPTH = 64
MAX_NODES = 50_000
# No key takes an integer past 2**63 - 1 (19 digits; seeds are the largest): a longer one is refused
# by its digits before Python converts it (past 4300 digits ``int`` raises ValueError).
MAX_INT_DIGITS = 32
_INT_TAG = "tag:yaml.org,2002:int"


class _TooDeep(Exception):
    def __init__(self, mark):
        self.mark = mark


class Loader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-6`` / ``1.0e6`` as floats (YAML 1.2), as users expect,
    and refuses nesting deeper than ``MAX_DEPTH`` before Python's recursion limit is reached."""

    _depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooDeep(self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def compose(text: str, path: str, error: type[LocatedError]) -> tuple[yaml.Node | None, Loader]:
    """The single document's node tree (marks kept) and the loader that constructs its scalars."""
    try:
        loader = Loader(text)           # PyYAML's reader refuses NUL and other control bytes here
    except yaml.reader.ReaderError as exc:
        raise _unprintable(exc, text, path, error) from None
    try:
        return loader.get_single_node(), loader
    except yaml.reader.ReaderError as exc:
        raise _unprintable(exc, text, path, error) from None
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(exc, path, text, error) from None
    except yaml.YAMLError as exc:
        raise error(path, None, None, "", f"invalid YAML: {one_line(str(exc))}") from None
    except _TooDeep as exc:
        raise error(path, exc.mark.line + 1, exc.mark.column + 1, "",
                    f"nested deeper than {MAX_DEPTH} levels (case files need a handful)") from None
    finally:
        loader.dispose()


def _unprintable(exc: yaml.reader.ReaderError, text: str, path: str, error: type[LocatedError]) -> LocatedError:
    """A byte YAML does not allow (a NUL, a control character), at its line and column."""
    before = text[:exc.position]
    line = before.count("\n") + 1
    column = exc.position - (before.rfind("\n") + 1) + 1
    what = "a NUL byte" if exc.character == 0 else f"control character #x{exc.character:04x}"
    return error(path, line, column, "", f"{what}: not allowed in a case file")


def _yaml_error(exc: yaml.MarkedYAMLError, path: str, text: str, error: type[LocatedError]) -> LocatedError:
    """One line at the error mark.  A problem at end of input (an unclosed bracket or quote)
    is reported where the unclosed construct starts: that is the line to fix."""
    mark = exc.problem_mark or exc.context_mark
    what = one_line(exc.problem or "malformed").replace("'<stream end>'", "end of file")
    at_end = exc.problem_mark is not None and exc.problem_mark.index >= len(text.rstrip())
    if exc.context:
        ctx = one_line(exc.context)
        if at_end and exc.context_mark is not None:
            mark = exc.context_mark
            ctx += " that starts here"
        elif exc.context_mark is not None and exc.context_mark.line != mark.line:
            ctx += f" at line {exc.context_mark.line + 1}"
        what += f" ({ctx})"
    line = mark.line + 1 if mark is not None else None
    column = mark.column + 1 if mark is not None else None
    return error(path, line, column, "", f"invalid YAML: {what}")


# ---------------------------------------------------------------------------
# Nodes: plain mappings, lists and scalars, each with its place
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    kind: str                        # scalar | list | map
    value: Any                       # python scalar | list[Node] | dict[str, Node]
    where: Where
    keys: dict[str, Where] = field(default_factory=dict)   # map only: where each key is written
    text: str | None = None          # scalar only: the text as written

    def describe(self) -> str:
        if self.kind == "list":
            return "a list"
        if self.kind == "map":
            return "a mapping"
        return _describe_scalar(self.value, self.text)


def _describe_scalar(value: Any, text: str | None = None) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{'true' if value else 'false'} (a boolean)"
    if isinstance(value, str):
        return f"{value!r} (a string)"
    if isinstance(value, (int, float)):
        return text if text is not None else repr(value)
    shown = repr(text) if text is not None else repr(value)
    return f"{shown} (a {type(value).__name__})"


def load(text: str, path: str, error: type[LocatedError]) -> Node | None:
    """The document as a ``Node`` tree (None when empty): string keys only, no tags, no recursion,
    at most ``MAX_NODES`` nodes once aliases are expanded."""
    node, loader = compose(text, path, error)
    if node is None:
        return None
    try:
        return _tree(loader, node, Where(path), error, _Budget())
    except yaml.MarkedYAMLError as exc:        # e.g. a bad merge key
        raise _yaml_error(exc, path, text, error) from None


_PLAIN_COLLECTION_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")
_MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass
class _Budget:
    """Nodes left to build: an alias is one node in the file but a whole copy in the tree."""

    left: int = MAX_NODES

    def spend(self, where: Where, error: type[LocatedError]) -> None:
        self.left -= 1
        if self.left < 0:
            raise error.at(where, f"expands to more than {MAX_NODES} values (YAML aliases that repeat "
                                  f"aliases grow exponentially)")


def _tree(loader: Loader, node: yaml.Node, where: Where, error: type[LocatedError], budget: _Budget,
          active: frozenset = frozenset()) -> Node:
    where = where.at(node)
    budget.spend(where, error)
    if id(node) in active:
        raise error.at(where, "recursive YAML alias")
    active = active | {id(node)}
    if isinstance(node, yaml.CollectionNode) and node.tag not in _PLAIN_COLLECTION_TAGS:
        raise error.at(where, f"unsupported YAML tag '{node.tag}' (case files hold plain mappings, lists and scalars)")
    if isinstance(node, yaml.MappingNode):
        explicit = sum(1 for k, _ in node.value if k.tag != _MERGE_TAG)
        loader.flatten_mapping(node)            # YAML merge keys (<<): merged pairs come first
        first_explicit = len(node.value) - explicit
        children: dict[str, Node] = {}
        keys: dict[str, Where] = {}
        merged: set[str] = set()
        for i, (knode, vnode) in enumerate(node.value):
            key = loader.construct_object(knode, deep=True) if isinstance(knode, yaml.ScalarNode) else None
            if not isinstance(key, str):
                shown = _describe_scalar(key) if isinstance(knode, yaml.ScalarNode) else "a collection"
                raise error.at(where.at(knode), f"keys must be plain strings, got {shown}")
            kw = where.key(key).at(knode)
            if key in children and key not in merged:
                raise error.at(kw, f"duplicate key '{key}' (first at line {keys[key].line})")
            if i < first_explicit:
                merged.add(key)               # a merged value: explicit keys override it
            else:
                merged.discard(key)
            keys[key] = kw
            children[key] = _tree(loader, vnode, where.key(key), error, budget, active)
        return Node("map", children, where, keys)
    if isinstance(node, yaml.SequenceNode):
        items = [_tree(loader, item, where.index(i), error, budget, active) for i, item in enumerate(node.value)]
        return Node("list", items, where)
    if node.tag == _INT_TAG:
        refuse_long_integer(node.value, where, error)
    return Node("scalar", loader.construct_object(node, deep=True), where, text=node.value)


def refuse_long_integer(text: str, where: Where, error: type[LocatedError]) -> None:
    """An integer written with more than ``MAX_INT_DIGITS`` digits: one line naming the field."""
    digits = sum(c.isdigit() for c in text)
    if digits > MAX_INT_DIGITS:
        raise error.at(where, f"an integer of {digits} digits: larger than any key takes (the largest, "
                              f"a seed, is at most 2**63-1, 19 digits)")


def wrap(value: Any, where: Where, error: type[LocatedError]) -> Node:
    """A plain Python value as a ``Node`` (for parsing values that come from flags or code, not a file)."""
    if isinstance(value, Node):
        return value
    if isinstance(value, Mapping):
        children = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise error.at(where, f"keys must be plain strings, got {_describe_scalar(k)}")
            children[k] = wrap(v, where.key(k), error)
        return Node("map", children, where, {k: where.key(k) for k in children})
    if isinstance(value, (list, tuple)):
        return Node("list", [wrap(v, where.index(i), error) for i, v in enumerate(value)], where)
    return Node("scalar", value, where)
