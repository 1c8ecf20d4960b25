"""``-k`` expressions: which case ids to keep, in pytest's keyword grammar.

    expr := and_expr ('or' and_expr)*
    and_expr := not_expr ('and' not_expr)*
    not_expr := 'not' not_expr | '(' expr ')' | WORD

A WORD is a case-insensitive substring of the case id: a run of characters
other than whitespace and parentheses, or a quoted string ('...' or "...").
A parenthesised group glued to a word (no spaces), as in uniform(1,3756), is
part of the word.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from harness.case import Case
from harness.errors import UsageError

__all__ = ["ExpressionError", "SubResultMatch", "command_case_match", "compile_expression", "select"]


class ExpressionError(UsageError):
    """A bad ``-k`` expression: ``-k 'a and': at column 6: expected ...``."""

    def __init__(self, expression: str, column: int, message: str):
        self.expression = expression
        self.column = column
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"-k {self.expression!r}: at column {self.column}: {self.message}"

    def __reduce__(self):
        return (type(self), (self.expression, self.column, self.message))


_KEYWORDS = ("and", "or", "not")
_MAX_DEPTH = 100


@dataclass(frozen=True)
class _Token:
    kind: str       # word | and | or | not | ( | ) | end
    text: str
    column: int     # 1-based


def _tokens(expr: str) -> list[_Token]:
    out: list[_Token] = []
    i, n = 0, len(expr)
    while i < n:
        c = expr[i]
        if c.isspace():
            i += 1
        elif c in "()":
            out.append(_Token(c, c, i + 1))
            i += 1
        elif c in "'\"":
            end = expr.find(c, i + 1)
            if end < 0:
                raise ExpressionError(expr, i + 1, "unterminated quoted string")
            if end == i + 1:
                raise ExpressionError(expr, i + 1, "empty quoted string")
            out.append(_Token("word", expr[i + 1:end], i + 1))
            i = end + 1
        else:
            start = i
            while i < n and not expr[i].isspace() and expr[i] not in "()":
                i += 1
                if i < n and expr[i] == "(" and expr[start:i] not in _KEYWORDS:
                    close = _glued_group_end(expr, i)
                    if close is not None:
                        i = close
            word = expr[start:i]
            out.append(_Token(word if word in _KEYWORDS else "word", word, start + 1))
    out.append(_Token("end", "", n + 1))
    return out


def _glued_group_end(expr: str, i: int) -> int | None:
    """Index after the ``)`` closing the group that opens at ``expr[i]``, if it holds no whitespace."""
    depth = 0
    for j in range(i, len(expr)):
        c = expr[j]
        if c.isspace():
            return None
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j + 1
    return None


# A parsed expression: ("word", needle) | ("not", node) | ("and", nodes) | ("or", nodes).
_Node = tuple


class _Parser:
    def __init__(self, expr: str):
        self.expr = expr
        self.tokens = _tokens(expr)
        self.pos = 0

    def peek(self) -> _Token:
        return self.tokens[self.pos]

    def take(self) -> _Token:
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok

    def fail(self, tok: _Token, expected: str) -> ExpressionError:
        got = "end of input" if tok.kind == "end" else repr(tok.text)
        return ExpressionError(self.expr, tok.column, f"expected {expected}; got {got}")

    def parse(self) -> _Node:
        node = self.or_expr(0)
        if self.peek().kind != "end":
            raise self.fail(self.peek(), "'and', 'or' or end of input")
        return node

    def or_expr(self, depth: int) -> _Node:
        parts = [self.and_expr(depth)]
        while self.peek().kind == "or":
            self.take()
            parts.append(self.and_expr(depth))
        return parts[0] if len(parts) == 1 else ("or", tuple(parts))

    def and_expr(self, depth: int) -> _Node:
        parts = [self.not_expr(depth)]
        while self.peek().kind == "and":
            self.take()
            parts.append(self.not_expr(depth))
        return parts[0] if len(parts) == 1 else ("and", tuple(parts))

    def not_expr(self, depth: int) -> _Node:
        tok = self.peek()
        if depth > _MAX_DEPTH:
            raise ExpressionError(self.expr, tok.column, "expression nested too deeply")
        if tok.kind == "not":
            self.take()
            return ("not", self.not_expr(depth + 1))
        if tok.kind == "(":
            self.take()
            inner = self.or_expr(depth + 1)
            if self.peek().kind != ")":
                raise self.fail(self.peek(), "')'")
            self.take()
            return inner
        if tok.kind == "word":
            self.take()
            return ("word", tok.text.lower())
        raise self.fail(tok, "a substring, 'not' or '('")


def _evaluate(node: _Node, word: Callable[[str], bool | None]) -> bool | None:
    """``node`` with each word's truth from ``word``; None is "not known" (Kleene's three values)."""
    kind = node[0]
    if kind == "word":
        return word(node[1])
    if kind == "not":
        inner = _evaluate(node[1], word)
        return None if inner is None else not inner
    values = [_evaluate(part, word) for part in node[1]]
    decisive = kind == "or"            # True decides an 'or', False an 'and'
    if decisive in values:
        return decisive
    return None if None in values else not decisive


def _words(node: _Node) -> list[str]:
    if node[0] == "word":
        return [node[1]]
    if node[0] == "not":
        return _words(node[1])
    return [w for part in node[1] for w in _words(part)]


def compile_expression(expr: str) -> Callable[[str], bool]:
    """A ``-k`` expression -> a predicate on case ids (case-insensitive). Raises ``ExpressionError``."""
    node = _Parser(expr).parse()
    return lambda case_id: bool(_evaluate(node, lambda needle, s=case_id.lower(): needle in s))


def select(cases: Iterable[Case], expr: str | None) -> list[Case]:
    """The cases whose id matches a pytest-style ``-k`` expression; an empty expression keeps all."""
    cases = list(cases)
    if expr is None or not expr.strip():
        return cases
    match = compile_expression(expr)
    return [c for c in cases if match(c.case_id)]


@dataclass(frozen=True)
class SubResultMatch:
    """What ``-k`` says of a command case whose tests are not known before it runs."""

    whole: bool          # the case id matches: the case as it is
    tests: bool          # its id does not, but an id ``case::test`` may: run it, keep the tests that match


def command_case_match(expr: str, case_ids: list[str]) -> Callable[[str], SubResultMatch]:
    """-k for command cases, whose JUnit tests become results ``case::test``.

    A word that is in no case id of the selection can only be meant for a test: when there is
    one, a command case whose id does not match is still run when the expression may match an
    id ``case_id::<a test>`` (a word in the case id is true there, any other word not known).
    When every word is in some case id, -k selects cases as it always did: a command case is not
    run (at a suite's cost) to look for tests that ``-k repro`` was never meant to reach.
    """
    node = _Parser(expr).parse()
    lowered = [c.lower() for c in case_ids]
    reaches = any(not any(w in c for c in lowered) for w in _words(node))

    def match(case_id: str) -> SubResultMatch:
        s = case_id.lower()
        if _evaluate(node, lambda needle: needle in s):
            return SubResultMatch(True, False)
        partial = _evaluate(node, lambda needle: True if needle in s else None)
        return SubResultMatch(False, reaches and partial is None)
    return match
