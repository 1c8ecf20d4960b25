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
from typing import Callable

from harness.errors import UsageError

__all__ = ["ExpressionError", "compile_expression"]


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

    def parse(self) -> Callable[[str], bool]:
        fn = self.or_expr(0)
        if self.peek().kind != "end":
            raise self.fail(self.peek(), "'and', 'or' or end of input")
        return fn

    def or_expr(self, depth: int) -> Callable[[str], bool]:
        parts = [self.and_expr(depth)]
        while self.peek().kind == "or":
            self.take()
            parts.append(self.and_expr(depth))
        return parts[0] if len(parts) == 1 else (lambda s, ps=tuple(parts): any(p(s) for p in ps))

    def and_expr(self, depth: int) -> Callable[[str], bool]:
        parts = [self.not_expr(depth)]
        while self.peek().kind == "and":
            self.take()
            parts.append(self.not_expr(depth))
        return parts[0] if len(parts) == 1 else (lambda s, ps=tuple(parts): all(p(s) for p in ps))

    def not_expr(self, depth: int) -> Callable[[str], bool]:
        tok = self.peek()
        if depth > _MAX_DEPTH:
            raise ExpressionError(self.expr, tok.column, "expression nested too deeply")
        if tok.kind == "not":
            self.take()
            inner = self.not_expr(depth + 1)
            return lambda s: not inner(s)
        if tok.kind == "(":
            self.take()
            inner = self.or_expr(depth + 1)
            if self.peek().kind != ")":
                raise self.fail(self.peek(), "')'")
            self.take()
            return inner
        if tok.kind == "word":
            self.take()
            needle = tok.text.lower()
            return lambda s: needle in s
        raise self.fail(tok, "a substring, 'not' or '('")


def compile_expression(expr: str) -> Callable[[str], bool]:
    """A ``-k`` expression -> a predicate on case ids (case-insensitive). Raises ``ExpressionError``."""
    match = _Parser(expr).parse()
    return lambda case_id: match(case_id.lower())
