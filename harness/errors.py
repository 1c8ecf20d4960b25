"""The harness's own errors: one base, so a front end catches them once.

``UsageError`` and its family are the user's to fix (a flag, a case file, a rules
file, a ref, a store or a report path): the CLI prints their one line and exits 2.
Anything else that escapes is a harness bug (exit 3).  A kernel's failure is never
an exception here: it is a ``Result`` with an outcome.
"""
from __future__ import annotations


class HarnessError(Exception):
    """Base of every error the harness raises on purpose."""


class UsageError(HarnessError, ValueError):
    """Bad input from the user: a flag, a file, a name.  Its message is one line, with its place."""
